"""``normlimits audit``: the paper's four yardsticks on any causal language model.

::

    normlimits audit --model EleutherAI/pythia-160m --windows 8 --length 1024 --device auto --out DIR
    python -m normlimits audit --model ./my-saved-model --windows 2 --length 256 --out DIR

One forward pass per corpus window (:func:`normlimits.capture.capture_window`) is shared by the
four yardsticks of :mod:`normlimits.yardsticks` (the chapters' own code paths), streamed to each
in turn by the bench's :class:`~normlimits.bench.Lockstep` (one window's capture in memory at a
time). Captures made on an accelerator are moved to the CPU before the metrics, which run there.

Writes the output folder as one transaction (:class:`normlimits.outputs.FolderOutput`): every file
goes into a fresh temporary folder beside ``DIR``, ``manifest.json`` (each file's size and sha256)
last, and the folder is moved into place as a whole at the end, so ``DIR`` holds one complete
audit or is as it was. ``DIR`` may be missing, empty, or an earlier audit (its manifest says so and
its files are unchanged); anything else is refused, never overwritten: a folder of the user's own
files, or an earlier audit with files added or edited since, which ``--force`` replaces by moving
the old folder aside (``DIR.previous-<time>``). A second audit into the same folder while one runs
is refused (a lock file ``.DIR.lock`` beside it). Whether ``DIR`` can be written is checked
before the model is loaded. The files:

- ``DIR/audit.json``: ``rows`` (one ledger row per graded claim, the book's ledger format, checked
  by :func:`normlimits.ledger.validate_row`; ``chapter`` is ``audit``, ``model`` names the model),
  ``statistics`` and ``ungraded`` per yardstick, ``model``, ``corpus`` (source, bytes, sha256),
  ``settings`` (windows, length, device, dtype, the grids) and ``timings`` (forward passes and each
  yardstick, seconds);
- ``DIR/<yardstick>.png``: one figure per yardstick;
- ``DIR/report.md``: the verdicts, the ungraded numbers, the figures and the timings.

Every bad argument is refused with an error that names the option (``--model``, ``--windows``,
...), the value and the remedy; the exit status is then 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import re
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from .protocol import MAX_LENGTH
from .yardsticks import CRITICAL_PROTOCOLS, MIN_LENGTH, YARDSTICKS, AuditConfig

__all__ = ["AuditError", "main", "run_audit", "parser", "write_outputs", "report_markdown"]

PROG = "normlimits audit"
#: the longest default window (the paper's L); a model with a shorter context uses its own
DEFAULT_MAX_LENGTH = MAX_LENGTH


class AuditError(ValueError):
    """A bad argument; the message names the option."""


def _positive(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number (got {text!r})") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be at least 1 (got {value})")
        return value
    return parse


def _rows(text: str) -> int | None:
    if text.strip().lower() == "every":
        return None
    return _positive("--separability-rows")(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Run the paper's four yardsticks (vanishing attention, critical N, geometric "
                    "separability, gradient sensitivity) on a causal language model, grade them by "
                    "the book's registered claim rules and write audit.json, figures and a report.")
    p.add_argument("--model", required=True,
                   help="a hub id (gpt2, EleutherAI/pythia-160m, ...), a save_pretrained folder, "
                        "'standin' or 'gpt2-random' (anything NORMLIMITS_MODEL accepts)")
    p.add_argument("--out", required=True,
                   help="output folder: new, empty, or an earlier audit (created if missing; a "
                        "folder of other files is refused)")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier audit in --out even if files were added to or edited "
                        "in it since; the old folder is moved aside to OUT.previous-<time>")
    p.add_argument("--windows", type=_positive("--windows"), default=8,
                   help="corpus windows, one forward pass each (default 8)")
    p.add_argument("--length", type=_positive("--length"), default=None,
                   help=f"window length L, the largest L of every sweep (default: the model's "
                        f"context, at most {DEFAULT_MAX_LENGTH}; at least {MIN_LENGTH})")
    p.add_argument("--device", default=None,
                   help="cpu, auto, cuda, cuda:N, mps or map (default: NORMLIMITS_DEVICE, else cpu)")
    p.add_argument("--dtype", default=None,
                   help="forward-pass precision: float32, or bfloat16/float16 on an accelerator "
                        "(default: NORMLIMITS_DTYPE, else float32)")
    p.add_argument("--corpus", default=None,
                   help="path or URL of a UTF-8 text (default: NORMLIMITS_CORPUS, else War and "
                        "Peace from Project Gutenberg)")
    p.add_argument("--yardsticks", nargs="+", choices=list(YARDSTICKS), default=None,
                   help="run only these yardsticks (default: all four)")
    p.add_argument("--separability-rows", type=_rows, default=128, metavar="N|every",
                   help="query rows per window for N_s/N: a count of evenly spaced rows, or "
                        "'every' for every position as the paper (default 128)")
    p.add_argument("--critical-protocol", choices=list(CRITICAL_PROTOCOLS), default="paper",
                   help="critical N under the paper's protocol (every query position, Monte Carlo "
                        "expectation: the book's primary reading; the default) or on the last row "
                        "against the closed-form main sum (the bench's protocol: a quick look)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _renamed(message: str, env: str, option: str) -> str:
    return message.replace(env, option)


def _as_option(message: str, value: str | None, option: str) -> str:
    """A devices error about a parameter, reworded to name the command's ``option``."""
    message = message.replace(f"device/dtype argument {value!r}", f"{option} {value!r}")
    message = re.sub(r" \(or unset NORMLIMITS_\w+ for [^)]*\)", "", message)
    return message.replace("set NORMLIMITS_DEVICE to", "pass --device with")


def _placement(device: str | None, dtype: str | None):
    from .devices import resolve_device, resolve_dtype
    from .settings import SettingError

    try:
        where, _ = resolve_device(device)
    except SettingError as exc:
        raise AuditError(_as_option(str(exc), device, "--device") if device is not None
                         else str(exc)) from None
    try:
        resolve_dtype(dtype, where)
    except SettingError as exc:
        raise AuditError(_as_option(str(exc), dtype, "--dtype") if dtype is not None
                         else str(exc)) from None


def _load(args):
    """Model, corpus and windows, every failure an :class:`AuditError` naming the option."""
    from .corpus import load_corpus, token_windows
    from .models import ModelError, load_model
    from .settings import SettingError

    _placement(args.device, args.dtype)
    try:
        loaded = load_model(args.model, origin="--model", device=args.device, dtype=args.dtype)
    except (ModelError, SettingError, OSError) as exc:
        raise AuditError(_renamed(str(exc), "NORMLIMITS_MODEL", "--model")) from None
    context = int(loaded.max_positions)
    length = args.length if args.length is not None else min(DEFAULT_MAX_LENGTH, context)
    if length < MIN_LENGTH:
        raise AuditError(f"--length {length}: the yardsticks need windows of at least "
                         f"{MIN_LENGTH} tokens; pass --length {MIN_LENGTH} or more")
    if length > context:
        raise AuditError(f"--length {length}: the model {loaded.name} has a context of {context} "
                         f"tokens; pass --length {context} or less")
    try:
        corpus = load_corpus(args.corpus, origin="--corpus" if args.corpus is not None else None)
    except SettingError as exc:
        raise AuditError(str(exc)) from None
    try:
        windows = token_windows(loaded, corpus, length, args.windows, count_origin="--windows")
    except SettingError as exc:
        raise AuditError(f"--windows {args.windows} / --length {length}: {exc}") from None
    return loaded, corpus, windows


def _on_cpu(capture):
    """The capture with its tensors on the CPU (the metrics run there)."""
    if capture.queries.device.type == "cpu":
        return capture
    return dataclasses.replace(capture, **{f.name: getattr(capture, f.name).cpu()
                                           for f in dataclasses.fields(capture)})


def model_label(loaded) -> str:
    """The model as the rows name it, e.g. ``gpt2-random (124.4M params)``."""
    from .book import public_text

    n = int(loaded.n_params)
    size = f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n:,}"
    return public_text(f"{loaded.name} ({size} params)")


def run_audit(loaded, windows: torch.Tensor, config: AuditConfig, *,
              yardsticks: Sequence[str] | None = None, say=lambda message: None,
              captures=None) -> dict:
    """Run the chosen yardsticks over ``windows`` [W, L] (token ids), one forward pass per window.

    ``captures``: optionally, an iterable of the windows' captures already computed (e.g. from the
    book's capture cache), used in place of the forward passes.
    Returns ``{"measured": {name: Measured}, "timings": {...}}``.
    """
    from .bench import Lockstep
    from .capture import capture_window

    names = list(yardsticks or YARDSTICKS)
    label = model_label(loaded)
    lockstep = Lockstep({n: (lambda caps, n=n: YARDSTICKS[n](caps, config, label)) for n in names})

    def produce():
        if captures is not None:
            for index, capture in enumerate(captures):
                say(f"window {index + 1}/{len(windows)}: {', '.join(names)}")
                yield _on_cpu(capture)
            return
        for index, ids in enumerate(windows):
            say(f"window {index + 1}/{len(windows)}: forward pass and {', '.join(names)}")
            yield _on_cpu(capture_window(loaded, ids))

    start = time.perf_counter()
    measured = lockstep.run(produce())
    wall = time.perf_counter() - start
    timings = {"forward_seconds": lockstep.produce_seconds, "wall_seconds": wall,
               "yardstick_seconds": {n: lockstep.metric_seconds[n] for n in names},
               "yardstick_final_seconds": {n: lockstep.final_seconds[n] for n in names}}
    for n in names:
        verdicts = ", ".join(f"{r['id']}: {r['verdict']}" for r in measured[n].rows) or "ungraded"
        say(f"yardstick {n}: {lockstep.metric_seconds[n]:.1f} s ({verdicts})")
    return {"measured": measured, "timings": timings}


def _figure_png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def report_markdown(doc: dict) -> str:
    """The short Markdown report of an ``audit.json`` document."""
    m, c, s = doc["model"], doc["corpus"], doc["settings"]
    lines = [f"# Audit of {m['label']}", "",
             f"- Model: {m['label']}, {m['layers']} layers x {m['heads']} heads, family "
             f"{m['family']}, tokenizer {m['tokenizer']}; paper's GPT-2 124M: "
             f"{'yes' if m['is_paper_model'] else 'no'}.",
             f"- Corpus: {c['source']}.",
             f"- Settings: {s['windows']} windows of {s['length']} tokens on {s['device']}.", ""]
    if not m["is_paper_model"]:
        lines += ["Not the paper's model: a figure of GPT-2 124M that does not come out here is "
                  "\"not reproduced\", never \"refuted\".", ""]
    else:
        lines += ["On the paper's model, the book's verdict on Figure 2 (F2a, F2c) weighs every "
                  "reading of Eq. (7) it tries; the audit tries only the primary one, so its "
                  "\"refuted\" there means \"not under the primary reading\".", ""]
    lines += ["## Verdicts (the book's registered rules)", "",
              "| claim | statistic | value | verdict | reading |", "|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['id']}: {r['claim_text']} | {r['statistic']} | {_fmt(r['value'])} | "
                     f"**{r['verdict']}** | {r.get('reading', '')} |")
    for name, why in doc["ungraded"].items():
        lines += ["", f"## {name}: not graded", "", f"{why}."]
    lines += ["", "## Figures", ""]
    lines += [f"![{name}]({path})" for name, path in doc["figures"].items()]
    t = doc["timings"]
    lines += ["", "## Time", "", f"- forward passes: {t['forward_seconds']:.1f} s"]
    lines += [f"- {n}: {v:.1f} s" for n, v in t["yardstick_seconds"].items()]
    lines += [f"- whole run (load included): {t['total_seconds']:.1f} s", ""]
    return "\n".join(lines)


def write_outputs(out, doc: dict, figures: dict[str, bytes]) -> dict[str, Path]:
    """Write the figures, ``audit.json`` and ``report.md`` as one transaction: into ``out``, a
    :class:`~normlimits.outputs.FolderOutput` (committed here), or a folder path (opened here,
    refused if it holds anything but an earlier, unchanged audit). Returns the final paths."""
    from .outputs import FolderOutput

    output = out if isinstance(out, FolderOutput) else FolderOutput(Path(out), tool=PROG)
    with output:
        paths = {name: output.write(f"{name}.png", data) for name, data in figures.items()}
        paths["audit.json"] = output.write(
            "audit.json", (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
        paths["report.md"] = output.write("report.md", report_markdown(doc).encode())
        output.commit()
    return paths


def _prepare_out(out, force: bool = False):
    """The output transaction for ``--out``: refused now (before any computing) when the folder
    cannot be written, holds the user's files, or another audit is writing it."""
    from .outputs import FolderOutput, OutputError, check_target_text

    try:
        return FolderOutput(check_target_text(out, "--out"), tool=PROG, option="--out",
                            force=force)
    except OutputError as exc:
        raise AuditError(str(exc)) from None


def audit(args) -> dict:
    """Run the audit for parsed ``args``; returns the ``audit.json`` document."""
    import matplotlib

    matplotlib.use("Agg")
    start = time.perf_counter()
    say = (lambda message: None) if args.quiet else \
        (lambda message: print(f"[audit] {message}", file=sys.stderr, flush=True))
    output = _prepare_out(args.out, getattr(args, "force", False))
    with output:
        return _audit(args, output, start, say)


def _audit(args, output, start: float, say) -> dict:
    from .ledger import validate_row
    from .settings import configure_torch

    configure_torch()
    torch.manual_seed(0)
    loaded, corpus, windows = _load(args)
    length = int(windows.shape[1])
    config = AuditConfig(length=length, separability_rows=args.separability_rows,
                         critical_protocol=args.critical_protocol,
                         paper_model=bool(loaded.is_paper_model))
    where = loaded.placement.describe if loaded.placement else "cpu, float32"
    say(f"{model_label(loaded)}: {len(windows)} windows of {length} tokens on {where}; "
        f"set-up {time.perf_counter() - start:.1f} s")
    run = run_audit(loaded, windows, config, yardsticks=args.yardsticks, say=say)
    measured = run["measured"]
    figures = {name: _figure_png(m.plot(m.result)) for name, m in measured.items()}
    rows = [validate_row(r) for m in measured.values() for r in m.rows]
    from .book import corpus_label

    doc = {
        "tool": PROG,
        "model": {"label": model_label(loaded), "name": loaded.name, "source": loaded.source,
                  "family": loaded.family, "n_params": int(loaded.n_params),
                  "layers": int(loaded.n_layers), "heads": int(loaded.n_heads),
                  "d_head": int(loaded.d_head), "context": int(loaded.max_positions),
                  "tokenizer": loaded.tokenizer_kind, "is_paper_model": bool(loaded.is_paper_model),
                  "notes": list(loaded.notes)},
        "corpus": {"source": corpus_label(corpus), "sha256": corpus.sha256, "bytes": corpus.n_bytes},
        "settings": {"windows": int(len(windows)), "length": length, "device": where,
                     "yardsticks": list(measured), "grids": config.describe(),
                     "torch_threads": torch.get_num_threads()},
        "rows": rows,
        "statistics": {name: m.statistics for name, m in measured.items()},
        "ungraded": {name: m.ungraded for name, m in measured.items() if m.ungraded},
        "figures": {name: f"{name}.png" for name in figures},
        "timings": {**run["timings"], "total_seconds": time.perf_counter() - start},
    }
    json.dumps(doc, allow_nan=False)           # fail before writing if anything is not JSON
    paths = write_outputs(output, doc, figures)
    say(f"wrote {', '.join(p.name for p in paths.values())} and manifest.json to {output.shown}")
    if output.aside is not None:
        say(f"the earlier audit was moved aside to {output.aside}")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """``normlimits audit ...``: parse, run, print the verdicts; 2 on a bad argument."""
    p = parser()
    args = p.parse_args(argv)
    try:
        doc = audit(args)
    except AuditError as exc:
        p.error(str(exc))
    for r in doc["rows"]:
        print(f"{r['id']:4s} {r['verdict']:15s} {r['statistic']} = {_fmt(r['value'])}")
    for name, why in doc["ungraded"].items():
        print(f"{name}: not graded ({why})")
    out = Path(args.out)
    print(f"audit written to {out / 'audit.json'}, {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
