"""``normlimits compare``: several audits side by side, where their verdicts and settings differ.

::

    normlimits compare audit-gpt2 audit-pythia audit-mine --out compare-out

Reads each folder's ``audit.json`` (strictly: ``NaN`` is refused as the audit never writes it;
validated against its schema, :mod:`normlimits.claims.schema`; its ``results_sha256`` recomputed
from its rows, and its bytes checked against the sha256 its folder's ``manifest.json`` recorded, so
an edited result is refused, with or without its manifest), and writes, as one transaction (:class:`normlimits.core.outputs.FolderOutput`, as the audit):

- ``compare.json`` (schema ``compare``): the audits (name, path, model, ``results_sha256``),
  whether their results are identical, one entry per claim with each audit's verdict and value and
  whether the verdicts differ, and every compared setting with its value per audit and whether it
  differs (model and weights, corpus, windows and their positions, device, dtype, attention
  kernel, protocol and grids, seeds, software versions);
- ``compare.html``: one self-contained page (inline SVG, no external asset): the audits, the
  settings (differing ones marked), the verdict table (rows whose verdicts differ marked), the
  headline statistics and the overlaid figures;
- ``<yardstick>.png``/``.svg``/``.pdf``: each yardstick's headline curve of every audit on one
  axis.

The tables are pandas frames built by :func:`statistics_frame` and :func:`verdict_frame`, the same
functions the architectures chapter's tables come from (:mod:`normlimits.audit.architectures`); they
take audit documents (``audit.json``, or :meth:`normlimits.audit.architectures.Surveyed.document`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
from normlimits.audit.figure_files import inline_svg, render
from normlimits.audit.html_page import esc, number, page, table, value_text
from normlimits.audit.report import honesty_line
from normlimits.claims.schema import SCHEMA_VERSION, SchemaError, validate
from normlimits.core.outputs import (check_target_text, folder_argument, FolderOutput, OutputError,
                                     read_manifest)

__all__ = ["PROG", "CompareError", "FACTS", "STATISTICS", "CURVE_AXES", "load_audit", "column_names",
           "claim_rows", "statistics_frame", "verdict_frame", "settings_rows", "curve",
           "plot_overlay", "comparison", "compare_html", "parser", "main"]

PROG = "normlimits compare"


class CompareError(ValueError):
    """An audit folder cannot be compared; the message names it and the remedy."""


#: the model facts of the statistics table: label -> function of an audit document
FACTS: dict[str, Callable[[Mapping], object]] = {
    "positions": lambda d: d["model"]["positions"],
    "query / key-value heads per layer": lambda d: f"{d['model']['heads']} / {d['model']['kv_heads']}",
    "layers": lambda d: d["model"]["layers"],
    "parameters (M)": lambda d: round(d["model"]["n_params"] / 1e6, 2),
    "L (windows x tokens)": lambda d: f"{d['settings']['windows']} x {d['settings']['length']}",
}
#: the headline statistics of the statistics table: label -> (claim id, criterion key)
STATISTICS: dict[str, tuple[str, str]] = {
    "largest-weight exponent in L (median head)": ("NU", "exponent"),
    "rows with L > e^(2 Delta/T)": ("NU", "regime"),
    "critical N / L at the largest L": ("F2c", "fraction"),
    "true / expected distance at N = 5": ("F2a", "close"),
    "N_s/N plateau (median head)": ("F3", "level"),
    "slope of g in T at low T (deviation from -1)": ("F4", "low_slope"),
}
#: each yardstick's overlaid figure: its axes
CURVE_AXES = {
    "vanishing": dict(xscale="log", yscale="log", xlabel="L (keys visible)",
                      ylabel="largest weight (median head)", title="Vanishing attention"),
    "critical_n": dict(xscale="log", xlabel="L", ylabel="critical N / L",
                       title="Critical N (paper's protocol)"),
    "separability": dict(xscale="log", xlabel="N (top-N tokens)", ylabel="$N_s/N$ (median head)",
                         ylim=(0, 1.05), title="Geometric separability"),
    "jacobian": dict(xscale="log", yscale="log", xlabel="temperature T",
                     ylabel="g(T, smallest ε), max over heads", title="Gradient sensitivity"),
}


# ------------------------------------------------------------------------------ reading audits
def _reject_constant(token: str):
    raise ValueError(f"it holds {token}, which is not JSON (the audit never writes it)")


def read_strict(file: Path, remedy: str) -> dict:
    """The JSON document in ``file``, read as strictly as the audit writes it (``allow_nan=False``):
    ``NaN``, ``Infinity`` and ``-Infinity`` are refused, as is anything that is not JSON."""
    try:
        return json.loads(file.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CompareError(f"{file} is not readable strict JSON ({exc}). {remedy}") from None


def recorded_and_actual_hash(doc: Mapping) -> tuple[str, str]:
    """The ``results_sha256`` an audit document records, and the one its rows give now
    (:func:`normlimits.audit.provenance.results_sha256`)."""
    from normlimits.audit.provenance import results_sha256

    return str(doc["provenance"]["results_sha256"]), results_sha256(doc["rows"])


def load_audit(path: Path) -> tuple[dict, Path, bool]:
    """The audit document of ``path`` (an audit folder or its ``audit.json``), read strictly (no
    NaN) and validated against its schema; returns (document, the file read, whether its folder's
    manifest vouched for it). Refused: a file whose bytes differ from the sha256 its manifest
    recorded, and one whose rows do not give the ``results_sha256`` it records (edited after it
    was written, with or without its manifest)."""
    path = Path(path)
    file = path / "audit.json" if path.is_dir() else path
    remedy = "Pass a folder written by normlimits audit (or its audit.json)."
    again = "compare audits as they were written: run the audit again."
    if not file.is_file():
        raise CompareError(f"{path}: no audit.json there. {remedy}")
    doc = read_strict(file, "Run the audit again.")
    try:
        validate(doc, "audit", source=str(file), remedy="Run the audit again with this normlimits "
                 "to write it in the current format.")
    except SchemaError as exc:
        raise CompareError(str(exc)) from None
    manifest = read_manifest(file.parent)
    listed = (manifest or {}).get("files", {}).get(file.name) if manifest else None
    if listed is not None:
        actual = hashlib.sha256(file.read_bytes()).hexdigest()
        if actual != listed.get("sha256"):
            raise CompareError(f"{file} was changed after the audit wrote it (its sha256 is "
                               f"{actual[:16]}..., manifest.json recorded "
                               f"{str(listed.get('sha256'))[:16]}...); {again}")
    recorded, actual_rows = recorded_and_actual_hash(doc)
    if recorded != actual_rows:
        raise CompareError(f"{file} was edited after it was written: its rows give the results "
                           f"sha256 {actual_rows[:16]}..., the file records {recorded[:16]}...; {again}")
    return doc, file, listed is not None


def column_names(paths: Sequence[Path]) -> list[str]:
    """One column name per audit: its folder's name, made unique with ``(2)``, ``(3)``, ..."""
    names: list[str] = []
    for path in paths:
        path = Path(path)
        base = (path.parent if path.suffix == ".json" else path).resolve().name or str(path)
        name, k = base, 2
        while name in names:
            name, k = f"{base} ({k})", k + 1
        names.append(name)
    return names


# ------------------------------------------------------------------------------ the shared tables
def _row(doc: Mapping, claim_id: str) -> dict | None:
    """The claim's own row in ``doc``: the first of its id that is not graded on a chosen reading
    (a row with ``selection``; :mod:`normlimits.experiments.reading_table`'s policy: verdicts are compared on
    the primary reading everywhere)."""
    return next((r for r in doc["rows"] if r["id"] == claim_id and not r.get("selection")), None)


def _criterion(doc: Mapping, claim_id: str, key: str):
    row = _row(doc, claim_id)
    if row is None:
        return None
    return next((c["value"] for c in row["criteria"] if c["key"] == key), None)


def claim_rows(docs: Sequence[Mapping]) -> dict[str, list[dict | None]]:
    """Claim id -> each audit's row (None where the audit did not grade it), claims in order of
    first appearance (the audits' yardstick order)."""
    order = list(dict.fromkeys(r["id"] for d in docs for r in d["rows"]))
    return {cid: [_row(d, cid) for d in docs] for cid in order}


def statistics_frame(docs: Sequence[Mapping], names: Sequence[str]):
    """One column per audit: the model's facts (:data:`FACTS`) and the headline statistics
    (:data:`STATISTICS`; None where not graded), as a pandas DataFrame."""
    import pandas as pd

    columns = {}
    for name, doc in zip(names, docs):
        column = {label: get(doc) for label, get in FACTS.items()}
        column.update({label: _criterion(doc, cid, key) for label, (cid, key) in STATISTICS.items()})
        columns[name] = column
    return pd.DataFrame(columns)


def verdict_frame(docs: Sequence[Mapping], names: Sequence[str],
                  cell: Callable[[dict], str] = lambda row: row["verdict"]):
    """Claims x audits: ``cell(row)`` of each audit's row of each claim (default: the verdict),
    None where the audit did not grade it; a pandas DataFrame indexed by claim id."""
    import pandas as pd

    rows = claim_rows(docs)
    return pd.DataFrame({name: {cid: (None if per[k] is None else cell(per[k]))
                                for cid, per in rows.items()} for k, name in enumerate(names)})


def _files_digest(source: Mapping) -> str:
    """One short digest of the weights a model source names (files, GGUF, revision, seed)."""
    parts = [f["sha256"] for f in source.get("files", [])]
    parts += [source["gguf"]["sha256"]] if source.get("gguf") else []
    parts += [f"revision {source['revision']}"] if source.get("revision") else []
    parts += [f"seed {source['init_seed']}"] if "init_seed" in source else []
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16] if parts else "none"


#: the compared settings: name -> function of an audit document (a JSON value)
SETTINGS: dict[str, Callable[[Mapping], object]] = {
    "model": lambda d: d["model"]["label"],
    "model weights (digest of the files' sha256)": lambda d: _files_digest(d["provenance"]["model_source"]),
    "tokenizer": lambda d: f"{d['provenance']['tokenizer']['kind']}, vocabulary "
                           f"{d['provenance']['tokenizer']['vocab_size']}",
    "corpus (sha256)": lambda d: d["corpus"]["sha256"],
    "windows": lambda d: d["settings"]["windows"],
    "window length L": lambda d: d["settings"]["length"],
    "window starts (token offsets)": lambda d: d["provenance"]["windows"]["starts"],
    "device": lambda d: d["provenance"]["device"] + (f" ({d['provenance']['device_name']})"
                                                     if d["provenance"].get("device_name") else ""),
    "dtype": lambda d: d["provenance"]["dtype"],
    "attention implementation": lambda d: d["provenance"]["attention_implementation"],
    "yardsticks": lambda d: d["settings"]["yardsticks"],
    "critical-N protocol": lambda d: d["settings"]["grids"].get("critical_protocol"),
    "separability rows per window": lambda d: d["settings"]["grids"].get("separability_rows"),
    "other grids": lambda d: {k: v for k, v in d["settings"]["grids"].items()
                              if k not in ("critical_protocol", "separability_rows", "length")},
    "seeds": lambda d: d["provenance"]["seeds"],
    "normlimits": lambda d: d["provenance"]["project"]["version"] + ", " + d["provenance"]["project"]["git"],
    "torch": lambda d: d["provenance"]["libraries"].get("torch"),
    "transformers": lambda d: d["provenance"]["libraries"].get("transformers"),
    "tokenizers": lambda d: d["provenance"]["libraries"].get("tokenizers"),
    "torch threads": lambda d: d["provenance"]["torch_threads"],
}


def settings_rows(docs: Sequence[Mapping]) -> list[dict]:
    """Every compared setting (:data:`SETTINGS`): its value per audit and whether they differ."""
    out = []
    for name, get in SETTINGS.items():
        values = [get(d) for d in docs]
        differs = len({json.dumps(v, sort_keys=True) for v in values}) > 1
        out.append({"setting": name, "values": values, "differs": differs})
    return out


# ------------------------------------------------------------------------------ curves
def curve(doc: Mapping, yardstick: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of an audit's headline curve for ``yardstick``, from its statistics: the median
    head's largest weight against L; critical N / L against L (NaN where none below L); the median
    head's N_s/N against N; g(T, smallest ε), maximum over heads, against T."""
    if yardstick not in CURVE_AXES:
        raise ValueError(f"yardstick={yardstick!r}: choose one of {list(CURVE_AXES)}")
    s = doc["statistics"][yardstick]
    if yardstick == "vanishing":
        return np.asarray(s["lengths"]), np.asarray(s["median_max_weight"])
    if yardstick == "critical_n":
        fraction = [np.nan if f is None else f for f in s["critical_fraction"]]
        return np.asarray(s["lengths"]), np.asarray(fraction, dtype=float)
    if yardstick == "separability":
        return np.asarray(s["n_grid"]), np.asarray(s["median"])
    g = np.asarray(s["g_max"])                       # [temperatures, epsilons]
    return np.asarray(s["temperatures"]), g[:, int(np.argmin(s["epsilons"]))]


def plot_overlay(docs: Sequence[Mapping], labels: Sequence[str], yardstick: str, ax=None):
    """Every audit's headline curve for ``yardstick`` on one axis ``ax`` (default: a new figure),
    labelled by ``labels``; audits without that yardstick are left out. Returns the figure."""
    import matplotlib.pyplot as plt

    if yardstick not in CURVE_AXES:
        raise ValueError(f"yardstick={yardstick!r}: choose one of {list(CURVE_AXES)}")
    fig, ax = plt.subplots(figsize=(6.4, 4)) if ax is None else (ax.figure, ax)
    have = [(d, label) for d, label in zip(docs, labels) if yardstick in d["statistics"]]
    for doc, label in have:
        x, y = curve(doc, yardstick)
        ax.plot(x, y, "o-", ms=3, label=label)
    if yardstick == "vanishing" and have:
        lengths = np.asarray(sorted({v for d, _ in have for v in curve(d, "vanishing")[0]}))
        ax.plot(lengths, 1 / lengths, "k--", lw=1, label="1/L (uniform)")
    ax.set(**CURVE_AXES[yardstick])
    if ax.lines:
        ax.legend()
    return fig


# ------------------------------------------------------------------------------ the comparison
def comparison(docs: Sequence[Mapping], names: Sequence[str], files: Sequence[Path],
               verified: Sequence[bool]) -> dict:
    """The ``compare.json`` document (figures not yet listed)."""
    claims = []
    for cid, per in claim_rows(docs).items():
        graded = [r for r in per if r is not None]
        claims.append({"id": cid, "claim_text": graded[0]["claim_text"],
                       "statistic": graded[0]["statistic"],
                       "verdicts_differ": len({r["verdict"] for r in graded}) > 1,
                       "cells": [None if r is None else {"verdict": r["verdict"], "value": r["value"]}
                                 for r in per]})
    settings = settings_rows(docs)
    hashes = [recorded_and_actual_hash(d)[1] for d in docs]     # from the rows, never trusted
    return {"schema_version": SCHEMA_VERSION, "tool": PROG,
            "audits": [{"name": n, "path": str(f), "model": d["model"]["label"],
                        "results_sha256": h, "verified": bool(v)}
                       for n, f, d, v, h in zip(names, files, docs, verified, hashes)],
            "identical_results": len(set(hashes)) == 1, "claims": claims, "settings": settings,
            "differing_settings": [s["setting"] for s in settings if s["differs"]], "figures": {}}


def _shown(value) -> str:
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return "n/a" if value is None else str(value)


def compare_html(result: Mapping, docs: Sequence[Mapping], svgs: Mapping[str, str]) -> str:
    """The self-contained ``compare.html`` of a comparison (``svgs``: yardstick -> inline SVG)."""
    names = [a["name"] for a in result["audits"]]
    parts = [f"<h1>Comparison of {len(docs)} audits</h1>"]
    identical = ("The results are identical: every audit has the same results sha256."
                 if result["identical_results"] else
                 "The results differ (the audits' results sha256 are not all the same).")
    differing = result["differing_settings"]
    parts.append(f'<p class="summary">{esc(identical)} Settings that differ: '
                 f'<strong class="differing">{esc(", ".join(differing) or "none")}</strong>. '
                 f"Claims whose verdicts differ: <strong class=\"differing-claims\">"
                 f"{esc(', '.join(c['id'] for c in result['claims'] if c['verdicts_differ']) or 'none')}"
                 "</strong>.</p>")
    for a, doc in zip(result["audits"], docs):
        parts.append(f'<p class="honesty">{esc(a["name"])}: {esc(honesty_line(doc["model"]))}</p>')
    parts += ["<h2>Audits</h2>", table(
        ["audit", "model", "audit.json", "results sha256", "checked against its manifest"],
        [[esc(a["name"]), esc(a["model"]), f"<code>{esc(a['path'])}</code>",
          f'<span class="hash">{esc(a["results_sha256"])}</span>', "yes" if a["verified"] else "no"]
         for a in result["audits"]])]
    parts += ["<h2>Verdicts</h2>", "<p>Each claim graded by the book's registered rule on each "
              "audit; rows marked ≠ (shaded) have different verdicts.</p>"]
    rows_by_claim = claim_rows(docs)
    cells, attrs = [], []
    for c in result["claims"]:
        per = rows_by_claim[c["id"]]
        shown = [("not graded" if r is None else
                  f'<span class="verdict verdict-{r["verdict"].replace(" ", "-")}">{esc(r["verdict"])}'
                  f'</span> <span class="number">{esc(value_text(r))}</span>') for r in per]
        cells.append(["≠" if c["verdicts_differ"] else "", f"<strong>{esc(c['id'])}</strong>: "
                      f"{esc(c['claim_text'])}", esc(c["statistic"]), *shown])
        attrs.append(f'data-claim="{esc(c["id"])}"' + (' class="differs"' if c["verdicts_differ"] else ""))
    parts.append(table(["", "claim", "statistic", *names], cells, row_attrs=attrs, cls="verdicts"))
    parts += ["<h2>Settings</h2>", "<p>Rows marked ≠ (shaded) differ between the audits.</p>"]
    parts.append(table(["", "setting", *names],
                       [["≠" if s["differs"] else "", esc(s["setting"]),
                         *[f"<code>{esc(_shown(v))}</code>" for v in s["values"]]]
                        for s in result["settings"]],
                       row_attrs=[f'data-setting="{esc(s["setting"])}"' + (' class="differs"' if s["differs"] else "")
                                  for s in result["settings"]], cls="settings"))
    frame = statistics_frame(docs, names)
    parts += ["<h2>Headline statistics</h2>", table(
        ["", *names], [[esc(label), *[esc(number(v) if isinstance(v, float) else _shown(v))
                                      for v in frame.loc[label]]] for label in frame.index],
        cls="statistics")]
    parts.append("<h2>Figures</h2>")
    for name in result["figures"]:
        parts.append(f'<figure id="figure-{esc(name)}">{svgs[name]}<figcaption>{esc(name)}: every '
                     f"audit's headline curve ({esc(CURVE_AXES[name]['title'])}).</figcaption></figure>")
    return page(f"Comparison of {len(docs)} audits", "\n".join(parts))


# ------------------------------------------------------------------------------ the command
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Compare several audits of normlimits audit side by side: each "
                               "claim's verdict and value, the settings that differ, overlaid "
                               "figures; writes compare.json, compare.html and the figures.")
    p.add_argument("audits", nargs="+", metavar="AUDIT_DIR",
                   help="folders written by normlimits audit (or their audit.json), two or more")
    p.add_argument("--out", required=True, type=folder_argument("--out"),
                   help="output folder: new, empty, or an earlier comparison")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier comparison in --out even if it was changed since (the "
                        "old folder is moved aside to OUT.previous-<time>)")
    p.add_argument("--quiet", action="store_true", help="no summary on stdout")
    return p


def run(paths: Sequence[Path], out: str | Path, *, force: bool = False) -> dict:
    """Compare the audits of ``paths`` and write the output folder ``out``; returns the
    ``compare.json`` document. Raises :class:`CompareError` (a bad audit) or
    :class:`normlimits.core.outputs.OutputError` (an output that cannot be written)."""
    import matplotlib

    matplotlib.use("Agg")
    if len(paths) < 2:
        raise CompareError(f"got {len(paths)} audit folder; pass two or more AUDIT_DIR to compare")
    output = FolderOutput(check_target_text(out if isinstance(out, str) else str(out), "--out"),
                          tool=PROG, option="--out", force=force)
    with output:
        loaded = [load_audit(Path(p)) for p in paths]
        docs = [d for d, _, _ in loaded]
        names = column_names([f for _, f, _ in loaded])
        result = comparison(docs, names, [f for _, f, _ in loaded], [v for _, _, v in loaded])
        yardsticks = [y for y in CURVE_AXES if any(y in d["statistics"] for d in docs)]
        labels = [f"{n}: {d['model']['label']}" for n, d in zip(names, docs)]
        figures = {y: render(plot_overlay(docs, labels, y)) for y in yardsticks}
        result["figures"] = {y: {kind: f"{y}.{kind}" for kind in files} for y, files in figures.items()}
        validate(result, "compare", source="the comparison")
        for y, files in figures.items():
            for kind, data in files.items():
                output.write(f"{y}.{kind}", data)
        output.write("compare.json", (json.dumps(result, indent=2, sort_keys=True, allow_nan=False)
                                      + "\n").encode())
        svgs = {y: inline_svg(figures[y]["svg"], y, CURVE_AXES[y]["title"]) for y in figures}
        output.write("compare.html", compare_html(result, docs, svgs).encode())
        output.commit()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``normlimits compare AUDIT_DIR AUDIT_DIR ... --out DIR``; 2 on a bad argument."""
    p = parser()
    args = p.parse_args(argv)
    try:
        result = run([Path(a) for a in args.audits], args.out, force=args.force)
    except (CompareError, OutputError) as exc:
        p.error(str(exc))
    if not args.quiet:
        names = [a["name"] for a in result["audits"]]
        print(f"{'claim':6s}" + "".join(f"{n[:24]:26s}" for n in names))
        for c in result["claims"]:
            cells = [("-" if x is None else x["verdict"]) for x in c["cells"]]
            print(f"{c['id']:6s}" + "".join(f"{v:26s}" for v in cells) + ("  differs" if c["verdicts_differ"] else ""))
        print(f"settings that differ: {', '.join(result['differing_settings']) or 'none'}")
        print(f"results identical: {'yes' if result['identical_results'] else 'no'}")
        print(f"comparison written to {Path(args.out) / 'compare.json'}, {Path(args.out) / 'compare.html'}",
              file=sys.stdout)
    return 0
