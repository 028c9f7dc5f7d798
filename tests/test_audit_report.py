"""The audit's reports (normlimits.audit.report): report.md and the self-contained report.html,
opened offline in headless Chromium."""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import SHARED_CORPUS, make_tiny_gpt2
from normlimits.audit import command as audit, report as audit_report
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE
from test_site import chromium  # noqa: F401  (the fixture: Debian's Chromium, or a clear failure)


@pytest.fixture(scope="module")
def tiny_audit(tmp_path_factory):
    """One full audit (all four yardsticks) of a tiny byte-level GPT-2: (folder, audit.json)."""
    if not SHARED_CORPUS.is_file():
        pytest.skip("the shared corpus is absent")
    root = tmp_path_factory.mktemp("report")
    make_tiny_gpt2(n_positions=128).save_pretrained(root / "model")
    (root / "model" / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    out = root / "audit"
    assert audit.main(["--model", str(root / "model"), "--windows", "2", "--length", "64",
                       "--out", str(out), "--quiet"]) == 0
    return out, json.loads((out / "audit.json").read_text())


def _numbers(doc: dict) -> dict[str, list[str]]:
    """Per claim, every number its row shows: the headline value and every criterion's value."""
    return {r["id"]: [f"{v:.4g}" for v in [r["value"], *(c["value"] for c in r["criteria"])]
                      if v is not None] for r in doc["rows"]}


def _provenance_strings(doc: dict) -> list[str]:
    p = doc["provenance"]
    return [p["results_sha256"], p["windows"]["corpus_sha256"], p["command_line"],
            *(f["sha256"] for f in p["model_source"]["files"]),
            *(str(s) for s in p["windows"]["starts"]), p["libraries"]["torch"],
            p["libraries"]["transformers"], p["project"]["git"], p["attention_implementation"]]


def test_report_md_carries_the_rules_numbers_and_provenance(tiny_audit):
    out, doc = tiny_audit
    md = (out / "report.md").read_text()
    assert md == audit.report_markdown(doc)
    assert audit_report.honesty_line(doc["model"]) in md
    for r in doc["rows"]:
        line = next(x for x in md.splitlines() if x.startswith(f"| {r['id']}: "))
        assert f"{r['value']:.4g}" in line and f"**{r['verdict']}**" in line
        head = next(c for c in r["criteria"] if c["key"] == r["headline"])
        assert audit_report.criterion_test(head) in line
    for text in _provenance_strings(doc):
        assert text in md, text
    for name in doc["figures"]:
        assert f"![{name}]({name}.png) (also {name}.svg, {name}.pdf)" in md


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def test_report_html_is_self_contained(tiny_audit):
    out, doc = tiny_audit
    page = (out / "report.html").read_text()
    parsed = _Collect()
    parsed.feed(page)
    names = [t for t, _ in parsed.tags]
    assert "script" not in names and "link" not in names and "img" not in names
    external = [a for _, attrs in parsed.tags for k, a in attrs.items()
                if k in ("src", "href") and a and not a.startswith("#")]
    assert external == [], external
    figures = [a["data-figure"] for t, a in parsed.tags if t == "svg" and "data-figure" in a]
    assert figures == doc["settings"]["yardsticks"] and sorted(figures) == sorted(doc["figures"])
    text = " ".join(parsed.text)
    assert not re.search(r"\\[A-Za-z]+|\$", text.split("Provenance")[0]), \
        "LaTeX left in the page (math must read as plain text without MathJax)"
    assert audit_report.honesty_line(doc["model"]) in "".join(parsed.text)


def test_an_interval_is_shown_where_a_row_has_one(tiny_audit):
    _, doc = tiny_audit
    shown = copy.deepcopy(doc)
    row = shown["rows"][0]
    row.update(interval=[row["value"] - 0.01, row["value"] + 0.02], n=8, unit="window")
    low, high = row["interval"]
    expect = f"{row['value']:.4g} [{low:.4g}, {high:.4g}] (n = 8, resampled by window)"
    assert expect in audit.report_markdown(shown)
    assert expect in audit_report.report_html(shown, {n: "<svg></svg>" for n in shown["figures"]})


def test_the_paper_models_honesty_line():
    assert "never \"refuted\"" in audit_report.honesty_line({"is_paper_model": False})
    assert "tries only the primary one" in audit_report.honesty_line({"is_paper_model": True})


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
    numbers = _numbers(doc)
    for shown, row in zip(seen["rows"], doc["rows"]):
        assert shown["verdict"] == shown["shownVerdict"] == row["verdict"]
        for number in numbers[row["id"]]:
            assert number in shown["text"], (row["id"], number)
    for text in _provenance_strings(doc):
        assert text in seen["provenance"], text
    assert audit_report.honesty_line(doc["model"]) in seen["body"]
    assert (tmp_path / "report.png").stat().st_size > 20_000
