"""``make pdf``: the whole book as one PDF, printed by headless Chromium from the single-page build.

``make pdf`` builds the book with Sphinx's ``singlehtml`` builder (the chapters come from the
execution cache, so nothing re-executes when ``make book`` ran first) and then runs
``python -m normlimits.book.pdf [INDEX_HTML] [OUT_PDF]`` (defaults ``_build/singlehtml/index.html`` and
``_build/pdf/book.pdf``). This opens the page from ``file://`` in Debian's ``chromium`` (driven by
Playwright, every network request refused), waits until every image has loaded and MathJax (served
from the site itself) has typeset every formula, scales down the formulas wider than the page,
and prints it to A4 with page numbers. The
print stylesheet (``book/_static/layout.css``) hides the site's navigation and starts each chapter
on a new page.

Why not LaTeX: Sphinx's LaTeX builder would need a TeX distribution (about a gigabyte from Debian)
and would typeset the pages differently from the site (glued values, the Verdicts table, the
notebook outputs' HTML tables); printing the single-page site reuses the browser the site test
already needs and shows exactly what the site shows.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path
from normlimits.core.cache import atomic_write_bytes

DEFAULT_INDEX = Path("_build/singlehtml/index.html")
DEFAULT_OUT = Path("_build/pdf/book.pdf")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: A4 portrait, the margins leave room for the page number
PAGE = {"format": "A4", "margin": {"top": "16mm", "bottom": "18mm", "left": "14mm", "right": "14mm"}}
FOOTER = ('<div style="width:100%; font-size:8px; color:#555; text-align:center;">'
          '<span class="pageNumber"></span> / <span class="totalPages"></span></div>')

# Resolves when images and formulas are ready; returns what could not be made ready.
READY_JS = r"""
async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  for (const img of document.images) img.loading = 'eager';
  await Promise.race([Promise.all([...document.images].map(img => img.complete ? null :
      new Promise(r => { img.addEventListener('load', r); img.addEventListener('error', r); }))), sleep(60000)]);
  const t0 = performance.now();
  while (!(window.MathJax && MathJax.startup && MathJax.startup.promise) && performance.now() - t0 < 30000) await sleep(100);
  if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  return {
    brokenImages: [...document.images].filter(img => !img.naturalWidth).map(img => img.src),
    untypeset: [...document.querySelectorAll('.math')].filter(e => !e.querySelector('mjx-container')).length,
    formulas: document.querySelectorAll('mjx-container').length,
  };
}
"""


def single_page(index: Path) -> Path:
    """The printable single page of a ``singlehtml`` build whose ``index.html`` is ``index``.

    Jupyter Book writes ``index.html`` as a redirect to the root page (``book/intro.html``), which
    is the whole book in this build; but Sphinx's single-page builder writes every asset link of
    that page relative to the build's top folder. A copy next to ``index.html`` (``book.html``)
    therefore finds its stylesheets, scripts, MathJax and images.
    """
    match = re.search(r'http-equiv="refresh"\s+content="\d+;\s*url=([^"#]+)"', index.read_text(errors="replace"), re.I)
    if match is None:
        return index
    page = index.parent / "book.html"
    shutil.copyfile(index.parent / match.group(1), page)
    return page


#: the printable width of an A4 page with PAGE's margins, in CSS pixels (210 mm - 28 mm, 96 dpi)
PRINT_WIDTH = 688
# Scale down every formula wider than its line (a wide sympy display would be cut at the page's
# edge: paper cannot scroll); returns how many were scaled.
FIT_MATH_JS = r"""
() => {
  let scaled = 0;
  for (const el of document.querySelectorAll('mjx-container[display="true"]')) {
    const need = el.scrollWidth, have = el.clientWidth;
    if (have && need > have + 1) { el.style.fontSize = (98 * have / need).toFixed(1) + '%'; scaled++; }
  }
  return scaled;
}
"""


class PdfError(RuntimeError):
    """The PDF could not be made; the message says why and what to do."""


def chromium_path() -> str:
    """Debian's Chromium; a clear error with the remedy when it is missing."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise PdfError("make pdf prints the book with Debian's chromium, which is missing: run "
                       "`make browser` (as root it runs apt-get install chromium), then `make pdf`.")
    return path


def print_pdf(index: Path, out: Path) -> dict:
    """Print the single-page book at ``index`` to ``out``; returns what was checked and the time."""
    from playwright.sync_api import sync_playwright

    if not index.is_file():
        raise PdfError(f"{index} does not exist: build the single-page book first (make pdf does).")
    index = single_page(index)
    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    requested: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": PRINT_WIDTH, "height": 1000})
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://")
                   else (requested.append(route.request.url), route.abort()))
        page.goto(index.resolve().as_uri(), wait_until="load", timeout=120_000)
        page.emulate_media(media="print")
        ready = page.evaluate(READY_JS)
        if ready["brokenImages"] or ready["untypeset"]:
            browser.close()
            raise PdfError(f"{index}: {len(ready['brokenImages'])} images did not load "
                           f"({ready['brokenImages'][:3]}) and {ready['untypeset']} formulas were not "
                           "typeset; rebuild with `make pdf` (MathJax comes from book/_mathjax).")
        ready["scaled"] = page.evaluate(FIT_MATH_JS)
        data = page.pdf(print_background=True, display_header_footer=True,
                        header_template="<div></div>", footer_template=FOOTER, **PAGE)
        browser.close()

    atomic_write_bytes(out, data)       # never half a PDF in place; readable as the umask says
    return ready | {"seconds": round(time.perf_counter() - start, 1), "blocked": requested}


def main(argv: list[str]) -> int:
    index = Path(argv[0]) if argv else DEFAULT_INDEX
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    try:
        report = print_pdf(index, out)
    except PdfError as exc:
        print(f"make pdf: {exc}", file=sys.stderr)
        return 1
    print(f"PDF: {out} ({out.stat().st_size / 1e6:.1f} MB, {report['formulas']} formulas typeset, "
          f"{report['scaled']} scaled to the page width, printed in {report['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
