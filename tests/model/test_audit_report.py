"""The audit's reports (normlimits.audit.report): report.md and the self-contained report.html,
opened offline in headless Chromium."""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser


from conftest import audit_provenance_strings
from normlimits.audit import command as audit, report as audit_report


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
    for text in audit_provenance_strings(doc):
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


