/* Reading comfort that CSS alone cannot give (tests/test_site.py checks both at 1280 and 390 px):
   - a box whose content is wider than the column (a long display equation, a code line, a wide
     output, the scoreboard on a phone) scrolls, and gets the class "scroll-cue", which draws a
     shadow at its right edge (book/_static/layout.css) so the reader sees there is more;
   - on a narrow screen the chapters' provenance banner starts collapsed to its first line. */
(function () {
  "use strict";
  var NARROW = 720;
  var BOXES = "div.math, div.highlight pre, div.cell_output pre, div.cell_output .output.text_html, div.pasted-block, div.scoreboard-box";

  function markScrollable() {
    document.querySelectorAll(BOXES).forEach(function (el) {
      el.classList.toggle("scroll-cue", el.scrollWidth > el.clientWidth + 1);
    });
  }

  function collapseBanners() {
    if (window.innerWidth > NARROW) return;
    document.querySelectorAll("details.provenance-banner").forEach(function (el) { el.open = false; });
  }

  function start() {
    collapseBanners();
    markScrollable();
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(markScrollable);
    }
    window.addEventListener("resize", markScrollable);
    window.addEventListener("load", markScrollable);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
