"""The audit's report.html opened offline in headless Chromium."""

from __future__ import annotations

import pytest

from conftest import audit_numbers, audit_provenance_strings
from normlimits.audit import report as audit_report
from test_site import chromium  # noqa: F401  (the fixture: Debian's Chromium, or a clear failure)


@pytest.mark.browser
def test_report_html_opens_offline_with_every_figure_and_number(tiny_audit, chromium, tmp_path):
    from playwright.sync_api import sync_playwright

    from test_site import CHROMIUM_ARGS

    out, doc = tiny_audit
    requested, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1280, "height": 1000})

        def route(r):
            requested.append(r.request.url)
            r.continue_() if r.request.url.startswith("file://") else r.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((out / "report.html").as_uri(), wait_until="load")
        seen = page.evaluate("""() => ({
          figures: [...document.querySelectorAll('figure svg[data-figure]')].map(s => {
            const box = s.getBoundingClientRect();
            return {name: s.dataset.figure, width: box.width, height: box.height,
                    texts: [...s.querySelectorAll('text')].map(t => t.textContent).join(' '),
                    lines: s.querySelectorAll('path').length}; }),
          rows: [...document.querySelectorAll('table.verdicts > tbody > tr')].map(tr => ({
            claim: tr.dataset.claim, verdict: tr.dataset.verdict, text: tr.textContent,
            shownVerdict: tr.querySelector('.verdict').textContent})),
          provenance: document.querySelector('dl.provenance').textContent,
          body: document.body.innerText})""")
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert [r for r in requested if not r.startswith("file://")] == [], "nothing is fetched"
    assert errors == []
    assert [f["name"] for f in seen["figures"]] == doc["settings"]["yardsticks"]
    for f in seen["figures"]:
        assert f["width"] > 300 and f["height"] > 200 and f["lines"] > 10, f
    titles = {"vanishing": "Vanishing attention", "separability": "Geometric separability"}
    for f in seen["figures"]:
        if f["name"] in titles:
            assert titles[f["name"]] in f["texts"], f["texts"][:200]
    assert [r["claim"] for r in seen["rows"]] == [r["id"] for r in doc["rows"]]
    numbers = audit_numbers(doc)
    for shown, row in zip(seen["rows"], doc["rows"]):
        assert shown["verdict"] == shown["shownVerdict"] == row["verdict"]
        for number in numbers[row["id"]]:
            assert number in shown["text"], (row["id"], number)
    for text in audit_provenance_strings(doc):
        assert text in seen["provenance"], text
    assert audit_report.honesty_line(doc["model"]) in seen["body"]
    assert (tmp_path / "report.png").stat().st_size > 20_000
