"""The reports of an audit: ``report.md`` and the self-contained ``report.html``.

Both are made from the ``audit.json`` document alone (plus, for the HTML, the figures' SVG bytes),
so they say nothing the JSON does not hold. They carry the same parts: the model, corpus and
settings; the honesty line (:func:`honesty_line`: on a model other than GPT-2 124M a figure that
does not come out is "not reproduced", never "refuted"); the verdict table, each verdict with the
rule it follows, the statistic and its value (with its interval, where the row has one) and the
test the value had to pass; the ungraded yardsticks; the figures; and the provenance
(:func:`provenance_items`). ``report.html`` is one file: styles inline, figures as inline SVG,
mathematics as Unicode text (the rows' ``*_text`` fields), no script and nothing fetched.
"""

from __future__ import annotations

from typing import Mapping

from normlimits.claims.rules import Criterion
from normlimits.audit.html_page import definition_list, esc, page, table, value_text

__all__ = ["FIGURE_CAPTIONS", "honesty_line", "provenance_items", "report_markdown", "report_html",
           "criterion_test", "verdict_table_html"]

#: what each yardstick's figure shows (the report's captions)
FIGURE_CAPTIONS = {
    "vanishing": "The largest attention weight against the number of visible keys L, one line per "
                 "head (black: the median head; dashed: 1/L, uniform attention).",
    "critical_n": "Figure 2c's critical N against L under the audit's protocol: the smallest N at "
                  "which the KS test tells the true distance from its expectation.",
    "separability": "N_s/N against N on value vectors on the unit sphere: the median head, the "
                    "10th-90th percentile band of heads, the largest head and the exponential "
                    "upper bound.",
    "jacobian": "Figure 4's gradient sensitivity g(T, ε) against the temperature T, maximum over "
                "heads, one curve per ε.",
}


def honesty_line(model: Mapping) -> str:
    """What a verdict of this audit may and may not say about the paper (plain text)."""
    if not model["is_paper_model"]:
        return ("Not the paper's model: a figure of GPT-2 124M that does not come out here is "
                "\"not reproduced\", never \"refuted\".")
    return ("On the paper's model, the book's verdict on Figure 2 (F2a, F2c) rests on the primary "
            "reading of Eq. (7), as the audit's does; the book also tries other readings and shows "
            "one that reproduces as a labelled variant (\"chosen reading\"). The audit tries only "
            "the primary one, so its \"refuted\" there means \"not under the primary reading\".")


def criterion_test(c: Mapping) -> str:
    """The test a criterion's value had to pass, in words (``≤ 0.25``, ``in [0.8, 1.2]``)."""
    return Criterion.from_dict(c).describe()


def _headline(row: Mapping) -> Mapping:
    return next(c for c in row["criteria"] if c["key"] == row["headline"])


def _in_order(doc: Mapping, mapping: Mapping) -> list[tuple[str, object]]:
    """``mapping``'s (yardstick, value) pairs in the audit's yardstick order (a JSON object read
    back with sorted keys has lost it)."""
    return [(name, mapping[name]) for name in doc["settings"]["yardsticks"] if name in mapping]


def _seconds(value) -> str:
    return f"{value:.1f} s"


def _source_words(source: Mapping) -> str:
    """Where the weights came from, in words (the provenance's ``model_source``)."""
    kind = source["kind"]
    if kind == "hub":
        return f"hub id {source['hub_id']} at revision {source.get('revision') or 'unknown'}"
    if kind == "gguf":
        gguf = source["gguf"]
        return (f"GGUF file {gguf['name']} (sha256 {gguf['sha256']}, {gguf['bytes']:,} bytes), "
                f"dequantised into {source['path']}")
    if kind == "random":
        return f"random weights drawn with seed {source['init_seed']}"
    if kind == "standin":
        return f"the project's stand-in, cached in {source['path']}"
    return f"folder {source.get('path', '')}"


def provenance_items(doc: Mapping) -> list[tuple[str, str]]:
    """The provenance as (term, plain text) pairs, in the order the reports show them."""
    p = doc["provenance"]
    source = p["model_source"]
    where = _source_words(source)
    files = "; ".join(f"{f['name']}: sha256 {f['sha256']} ({f['bytes']:,} bytes)"
                      for f in source["files"]) or "none (no weight files were read)"
    w = p["windows"]
    t = p["timings"]
    tok = p["tokenizer"]
    device = p["device"] + (f" ({p['device_name']})" if p.get("device_name") else "") + \
        (f", device_map={p['device_map']}" if p.get("device_map") else "")
    resume = p["resume"]
    return [
        ("results sha256", p["results_sha256"]),
        ("command", p["command_line"]),
        ("started", p["started"]),
        ("normlimits", f"{p['project']['version']}, {p['project']['git']}"),
        ("Python", f"{p['python']} on {p['platform']}"),
        ("libraries", ", ".join(f"{k} {v or 'not installed'}" for k, v in p["libraries"].items())),
        ("device", f"{device}; {p['dtype']}; attention {p['attention_implementation']}; "
                   f"{p['torch_threads']} torch threads"),
        ("model source", f"{source['setting']}: {where}"),
        ("weight files", files),
        ("tokenizer", f"{tok['kind']}, vocabulary {tok['vocab_size'] if tok['vocab_size'] else 'unknown'} "
                      f"(model's embedding: {tok['model_vocab_size']:,} rows)"),
        ("corpus", f"sha256 {w['corpus_sha256']}, {w['corpus_tokens']:,} tokens"),
        ("windows", f"{len(w['starts'])} of {w['length']} tokens starting at token "
                    f"{', '.join(str(s) for s in w['starts'])}"),
        ("seeds", ", ".join(f"{k} {v}" for k, v in p["seeds"].items())),
        ("time", f"set-up {_seconds(t['setup_seconds'])}; forward passes {_seconds(t['forward_seconds'])}; "
                 + "; ".join(f"{k} {_seconds(v)}" for k, v in _in_order(doc, t["yardstick_seconds"]))
                 + f"; whole run {_seconds(t['total_seconds'])}"),
        ("resumed", f"windows {', '.join(map(str, resume['reused_windows']))} reused from the resume "
                    f"cache" if resume["reused_windows"] else "no (every window computed in this run)"),
    ]


def report_markdown(doc: Mapping) -> str:
    """The short Markdown report of an ``audit.json`` document."""
    m, c, s = doc["model"], doc["corpus"], doc["settings"]
    lines = [f"# Audit of {m['label']}", "",
             f"- Model: {m['label']}, {m['layers']} layers x {m['heads']} heads, family "
             f"{m['family']}, tokenizer {m['tokenizer']}; paper's GPT-2 124M: "
             f"{'yes' if m['is_paper_model'] else 'no'}.",
             f"- Corpus: {c['source']}.",
             f"- Settings: {s['windows']} windows of {s['length']} tokens on {s['device']}.", "",
             honesty_line(m), "",
             "## Verdicts (the book's registered rules)", "",
             "| claim | statistic | value | test | verdict | reading |", "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['id']}: {r['claim_text']} | {r['statistic']} | {value_text(r)} | "
                     f"{criterion_test(_headline(r))} | **{r['verdict']}** | {r.get('reading', '')} |")
    for name, why in _in_order(doc, doc["ungraded"]):
        lines += ["", f"## {name}: not graded", "", f"{why}."]
    lines += ["", "## Figures", ""]
    for name, files in _in_order(doc, doc["figures"]):
        lines.append(f"![{name}]({files['png']}) (also {files['svg']}, {files['pdf']})")
    t = doc["provenance"]["timings"]
    lines += ["", "## Time", "", f"- forward passes: {t['forward_seconds']:.1f} s"]
    lines += [f"- {n}: {v:.1f} s" for n, v in _in_order(doc, t["yardstick_seconds"])]
    lines += [f"- whole run (load included): {t['total_seconds']:.1f} s", "", "## Provenance", ""]
    lines += [f"- {term}: {text}" for term, text in provenance_items(doc)]
    return "\n".join(lines) + "\n"


def _verdict_cell(verdict: str) -> str:
    return f'<span class="verdict verdict-{verdict.replace(" ", "-")}">{esc(verdict)}</span>'


def _criteria_details(row: Mapping) -> str:
    rows = [[f"<code>{esc(c['key'])}</code>" + (f" ({c['kind']})" if c["kind"] != "measurement" else ""),
             esc(c["statistic_text"]), f'<span class="number">{esc(value_text(c))}</span>',
             esc(criterion_test(c)), {True: "yes", False: "no", None: "not measured"}[c["passed"]]]
            for c in row["criteria"]]
    outcomes = "; ".join(f"{v} if {cond}" if cond != "else" else f"otherwise {v}"
                         for cond, v in row["outcomes"])
    extra = (f"<p>Not testable here: {esc(row['reason'])}</p>" if row.get("reason") else "")
    return ("<details><summary>rule, every criterion, what was measured</summary>"
            f"<p>Rule: {esc(row['rule_text'])} ({esc(outcomes)}.)</p>"
            + table(["criterion", "statistic", "value", "test", "passes"], rows)
            + f"<p>Measured on {esc(row['model'])}: {esc(row['measured_text'])}</p>{extra}"
            + f"<p>Paper ({esc(row['section'])}): {esc(row['paper_text'])}</p></details>")


def verdict_table_html(rows) -> str:
    """The verdict table: one row per graded claim with its rule, statistic, value and test."""
    cells, attrs = [], []
    for r in rows:
        head = _headline(r)
        cells.append([f"<strong>{esc(r['id'])}</strong>: {esc(r['claim_text'])}" + _criteria_details(r),
                      esc(r["statistic"]), f'<span class="number">{esc(value_text(r))}</span>',
                      esc(criterion_test(head)), _verdict_cell(r["verdict"]), esc(r.get("reading", ""))])
        attrs.append(f'data-claim="{esc(r["id"])}" data-verdict="{esc(r["verdict"])}"')
    return table(["claim", "statistic", "value", "test", "verdict", "reading"], cells,
                 row_attrs=attrs, cls="verdicts")


def report_html(doc: Mapping, svgs: Mapping[str, str]) -> str:
    """The self-contained HTML report of an ``audit.json`` document; ``svgs``: yardstick -> its
    figure as inline SVG markup (:func:`normlimits.audit.figure_files.inline_svg`)."""
    m, c, s = doc["model"], doc["corpus"], doc["settings"]
    parts = [f"<h1>Audit of {esc(m['label'])}</h1>",
             definition_list([
                 ("model", esc(f"{m['label']}: {m['layers']} layers x {m['heads']} query heads "
                               f"({m['kv_heads']} key/value), family {m['family']}, positions "
                               f"{m['positions']}, tokenizer {m['tokenizer']}; {m['source']}")),
                 ("paper's GPT-2 124M", "yes" if m["is_paper_model"] else "no"),
                 ("corpus", esc(c["source"] if c["sha256"] in c["source"]
                                else f"{c['source']}, {c['bytes']:,} bytes, sha256 {c['sha256']}")),
                 ("settings", esc(f"{s['windows']} windows of {s['length']} tokens on {s['device']}; "
                                  f"yardsticks {', '.join(s['yardsticks'])}; critical-N protocol "
                                  f"{s['grids'].get('critical_protocol', 'paper')}")),
             ]),
             f'<p class="honesty">{esc(honesty_line(m))}</p>']
    parts += [f"<p>{esc(note)}</p>" for note in m["notes"]]
    parts += ["<h2>Verdicts (the book's registered rules)</h2>", verdict_table_html(doc["rows"])]
    for name, why in _in_order(doc, doc["ungraded"]):
        parts += [f"<h2>{esc(name)}: not graded</h2>", f"<p>{esc(why)}.</p>"]
    parts.append("<h2>Figures</h2>")
    for name, files in _in_order(doc, doc["figures"]):
        caption = FIGURE_CAPTIONS.get(name, name)
        parts.append(f'<figure id="figure-{esc(name)}">{svgs[name]}<figcaption><strong>{esc(name)}'
                     f"</strong>: {esc(caption)} Files: {esc(files['png'])}, {esc(files['svg'])}, "
                     f"{esc(files['pdf'])}.</figcaption></figure>")
    parts += ["<h2>Provenance</h2>",
              definition_list([(term, f'<span class="prov" data-term="{esc(term)}">{esc(text)}</span>')
                               for term, text in provenance_items(doc)], cls="provenance")]
    return page(f"Audit of {m['label']}", "\n".join(parts))
