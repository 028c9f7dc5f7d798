"""``normlimits audit``: the paper's four yardsticks on any causal language model.

::

    normlimits audit --model EleutherAI/pythia-160m --windows 8 --length 1024 --device auto --out DIR
    python -m normlimits audit --model ./my-saved-model --windows 2 --length 256 --out DIR

One forward pass per corpus window (:func:`normlimits.model.capture.capture_window`) is shared by the
four yardsticks of :mod:`normlimits.audit.yardsticks` (the chapters' own code paths), streamed to each
in turn by the bench's :class:`~normlimits.core.streaming.Lockstep` (one window's capture in memory at a
time). Captures made on an accelerator are moved to the CPU before the metrics, which run there.

Writes the output folder as one transaction (:class:`normlimits.core.outputs.FolderOutput`): every file
goes into a fresh temporary folder beside ``DIR``, ``manifest.json`` (each file's size and sha256)
last, and the folder is moved into place as a whole at the end, so ``DIR`` holds one complete
audit or is as it was. ``DIR`` may be missing, empty, or an earlier audit (its manifest says so and
its files are unchanged); anything else is refused, never overwritten: a folder of the user's own
files, or an earlier audit with files added or edited since, which ``--force`` replaces by moving
the old folder aside (``DIR.previous-<time>``). A second audit into the same folder while one runs
is refused (a lock file ``.DIR.lock`` beside it). Whether ``DIR`` can be written is checked
before the model is loaded. The files:

- ``DIR/audit.json``: ``schema_version`` (:mod:`normlimits.claims.schema`; the file is validated against
  the ``audit`` schema before anything is written), ``rows`` (one ledger row per graded claim, the
  book's ledger format, checked by :func:`normlimits.claims.ledger.validate_row`; ``chapter`` is
  ``audit``, ``model`` names the model), ``statistics`` and ``ungraded`` per yardstick, ``model``,
  ``corpus`` (source, bytes, sha256), ``settings`` (windows, length, device, dtype, the grids),
  ``figures`` (each yardstick's files) and ``provenance`` (:mod:`normlimits.audit.provenance`: the
  command, versions, git commit, device, dtype and attention kernel, the weight files' sha256, the
  tokenizer, the windows' positions, every seed, the timings, what was resumed, and
  ``results_sha256``, one hash of the rows);
- ``DIR/<yardstick>.png``, ``.svg`` and ``.pdf``: one figure per yardstick
  (:mod:`normlimits.audit.figure_files`);
- ``DIR/report.md`` and ``DIR/report.html`` (:mod:`normlimits.audit.report`; the HTML is one
  self-contained file): the verdicts with their rules, the ungraded numbers, the figures and the
  provenance.

An interrupted audit resumes: re-run with the same arguments, it reads the windows it finished
from a checksummed cache beside ``DIR`` (:mod:`normlimits.audit.resume`) and gives the same
``results_sha256`` as an uninterrupted run (``--no-resume``: keep nothing, start over).

Every bad argument is refused with an error that names the option (``--model``, ``--windows``,
...), the value and the remedy; the exit status is then 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from normlimits.audit.report import FIGURE_CAPTIONS, report_html, report_markdown
from normlimits.core.protocol import MAX_LENGTH
from normlimits.audit.yardsticks import CRITICAL_PROTOCOLS, MIN_LENGTH, YARDSTICKS, AuditConfig
from normlimits.audit import provenance as P
from normlimits.audit.figure_files import inline_svg, render
from normlimits.audit.resume import Resume
from normlimits.claims.ledger import validate_row
from normlimits.claims.schema import SCHEMA_VERSION, validate
from normlimits.core.devices import resolve_device, resolve_dtype
from normlimits.core.outputs import check_target_text, folder_argument, FolderOutput, OutputError
from normlimits.core.paths import public_text
from normlimits.core.settings import configure_torch, SettingError
from normlimits.core.streaming import Lockstep
from normlimits.model.capture_cache import capture_key
from normlimits.model.corpus import corpus_label, load_corpus, token_windows
from normlimits.model.errors import ModelError
from normlimits.model.pretrained import positions_of

__all__ = ["AuditError", "main", "run_audit", "parser", "write_outputs", "report_markdown",
           "model_block", "GLOBAL_SEED"]

PROG = "normlimits audit"
#: the longest default window (the paper's L); a model with a shorter context uses its own
DEFAULT_MAX_LENGTH = MAX_LENGTH
#: torch's global seed, set before the model is loaded (as the architectures chapter does)
GLOBAL_SEED = 0


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
    p.add_argument("--out", required=True, type=folder_argument("--out"),
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
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="keep no resume cache: an interrupted audit then starts over (default: "
                        "each window's forward pass is kept beside --out until the audit is "
                        "written, and a re-run with the same arguments reuses them)")
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
    from normlimits.model.load import load_model

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
        full = full_context(loaded)
        if full > context:                    # a sliding window bounds it, not the context
            raise AuditError(f"--length {length}: the model {loaded.name} attends over a sliding "
                             f"window of {context} tokens in some layers (its context is {full:,} "
                             "tokens), and the yardsticks need every layer to see every earlier "
                             f"key; pass --length {context} or less")
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
                                           for f in dataclasses.fields(capture)
                                           if getattr(capture, f.name) is not None})


def model_label(loaded) -> str:
    """The model as the rows name it, e.g. ``gpt2-random (124.4M params)``."""
    n = int(loaded.n_params)
    size = f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n:,}"
    return public_text(f"{loaded.name} ({size} params)")


def run_audit(loaded, windows: torch.Tensor, config: AuditConfig, *,
              yardsticks: Sequence[str] | None = None, say=lambda message: None,
              captures=None) -> dict:
    """Run the chosen yardsticks over ``windows`` [W, L] (token ids), one forward pass per window.

    ``captures``: optionally, an iterable of the windows' captures (e.g. from the book's capture
    cache or the audit's resume cache), used in place of the forward passes; it reports its own
    progress (no per-window line is said here then).
    Returns ``{"measured": {name: Measured}, "timings": {...}}``.
    """
    from normlimits.model.capture import capture_window

    names = list(yardsticks or YARDSTICKS)
    label = model_label(loaded)
    lockstep = Lockstep({n: (lambda caps, n=n: YARDSTICKS[n](caps, config, label)) for n in names})

    def produce():
        if captures is not None:            # the captures' source says where each came from
            for capture in captures:
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


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def write_outputs(out, doc: dict, figures: dict[str, dict[str, bytes]]) -> dict[str, Path]:
    """Write the figures (``figures``: yardstick -> format -> bytes, :func:`normlimits.
    figure_files.render`), ``audit.json``, ``report.md`` and ``report.html`` as one transaction:
    into ``out``, a :class:`~normlimits.core.outputs.FolderOutput` (committed here), or a folder path
    (opened here, refused if it holds anything but an earlier, unchanged audit). Returns the
    final paths."""
    output = out if isinstance(out, FolderOutput) else FolderOutput(Path(out), tool=PROG)
    with output:
        paths = {}
        for name, files in doc["figures"].items():
            for kind, filename in files.items():
                paths[filename] = output.write(filename, figures[name][kind])
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        paths["audit.json"] = output.write("audit.json", text.encode())
        doc = json.loads(text)        # the reports say what the file holds, as a reader reads it
        paths["report.md"] = output.write("report.md", report_markdown(doc).encode())
        svgs = {name: inline_svg(figures[name]["svg"], name, FIGURE_CAPTIONS.get(name, name))
                for name in doc["figures"]}
        paths["report.html"] = output.write("report.html", report_html(doc, svgs).encode())
        output.commit()
    return paths


def _prepare_out(out, force: bool = False):
    """The output transaction for ``--out``: refused now (before any computing) when the folder
    cannot be written, holds the user's files, or another audit is writing it."""
    try:
        return FolderOutput(check_target_text(str(out), "--out"), tool=PROG, option="--out",
                            force=force)
    except OutputError as exc:
        raise AuditError(str(exc)) from None


def audit(args, argv: Sequence[str] | None = None) -> dict:
    """Run the audit for parsed ``args`` (``argv``: the arguments as given, for the provenance;
    default ``sys.argv[1:]``); returns the ``audit.json`` document."""
    import matplotlib

    matplotlib.use("Agg")
    start = time.perf_counter()
    say = (lambda message: None) if args.quiet else \
        (lambda message: print(f"[audit] {message}", file=sys.stderr, flush=True))
    try:
        configure_torch()                     # a bad NORMLIMITS_THREADS is named now, exit 2
    except SettingError as exc:
        raise AuditError(str(exc)) from None
    output = _prepare_out(args.out, getattr(args, "force", False))
    argv = list(sys.argv[1:] if argv is None else argv)
    with output:
        return _audit(args, output, start, say, argv)


def full_context(loaded) -> int:
    """The model's context (``max_position_embeddings``), which a sliding window may exceed:
    :attr:`LoadedModel.max_positions` is the shorter of the two."""
    config = getattr(loaded, "text_config", None)
    return int(getattr(config, "max_position_embeddings", None) or loaded.max_positions)


def _window_notes(loaded) -> list[str]:
    full, window = full_context(loaded), int(loaded.max_positions)
    if full <= window:
        return []
    return [f"Some of its layers attend over a sliding window of {window} tokens (its context is "
            f"{full:,}): the audit's windows are at most {window} tokens, so that every layer sees "
            "every earlier key."]


def model_block(loaded) -> dict:
    """The ``model`` block of ``audit.json``: what the model is (label, name, where it came from,
    family, positions, size and shape, tokenizer, whether it is the paper's GPT-2 124M, notes)."""
    return {"label": model_label(loaded), "name": loaded.name, "source": loaded.source,
            "family": loaded.family, "positions": positions_of(loaded.model.config),
            "n_params": int(loaded.n_params), "layers": int(loaded.n_layers),
            "heads": int(loaded.n_heads), "kv_heads": int(loaded.n_kv_heads),
            "d_head": int(loaded.d_head), "context": full_context(loaded),
            "tokenizer": loaded.tokenizer_kind, "is_paper_model": bool(loaded.is_paper_model),
            "notes": [*loaded.notes, *_window_notes(loaded)]}


def _provenance(argv, loaded, corpus, config: AuditConfig, count: int, started: str,
                resume, timings: dict, rows: list[dict]) -> dict:
    seeds = {"torch_global": GLOBAL_SEED, **config.seeds()}
    return {**P.command_info(argv, PROG), "started": started, "project": P.project_version(),
            **P.environment(), **P.placement_info(loaded), "torch_threads": torch.get_num_threads(),
            "model_source": P.model_source(loaded), "tokenizer": P.tokenizer_info(loaded),
            "windows": P.window_positions(loaded, corpus, config.length, count), "seeds": seeds,
            "timings": timings, "resume": resume.describe(), "results_sha256": P.results_sha256(rows)}


def _audit(args, output, start: float, say, argv: list[str]) -> dict:
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    configure_torch()
    torch.manual_seed(GLOBAL_SEED)
    loaded, corpus, windows = _load(args)
    length = int(windows.shape[1])
    config = AuditConfig(length=length, separability_rows=args.separability_rows,
                         critical_protocol=args.critical_protocol,
                         paper_model=bool(loaded.is_paper_model))
    where = loaded.placement.describe if loaded.placement else "cpu, float32"
    names = list(args.yardsticks or YARDSTICKS)
    resume = Resume(output.target, capture_key(loaded, corpus, length, len(windows))
                    if getattr(args, "resume", True) else None, say)
    setup = time.perf_counter() - start
    say(f"{model_label(loaded)}: {len(windows)} windows of {length} tokens on {where}; "
        f"set-up {setup:.1f} s" + (f"; resume cache {Path(output.shown).parent / resume.folder.name}"
                                   if resume.enabled else ""))
    run = run_audit(loaded, windows, config, yardsticks=names, say=say,
                    captures=resume.captures(loaded, windows, ", ".join(names)))
    measured = run["measured"]
    figures = {name: render(m.plot(m.result)) for name, m in measured.items()}
    rows = [validate_row(r) for m in measured.values() for r in m.rows]
    timings = {"setup_seconds": setup, **run["timings"],
               "total_seconds": time.perf_counter() - start}
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tool": PROG,
        "model": model_block(loaded),
        "corpus": {"source": corpus_label(corpus), "sha256": corpus.sha256, "bytes": corpus.n_bytes},
        "settings": {"windows": int(len(windows)), "length": length, "device": where,
                     "yardsticks": list(measured), "grids": config.describe(),
                     "torch_threads": torch.get_num_threads()},
        "rows": rows,
        "statistics": {name: m.statistics for name, m in measured.items()},
        "ungraded": {name: m.ungraded for name, m in measured.items() if m.ungraded},
        "figures": {name: {kind: f"{name}.{kind}" for kind in files} for name, files in figures.items()},
        "provenance": _provenance(argv, loaded, corpus, config, len(windows), started, resume,
                                  timings, rows),
    }
    json.dumps(doc, allow_nan=False)           # fail before writing if anything is not JSON
    validate(doc, "audit", source="the audit's result")
    paths = write_outputs(output, doc, figures)
    try:                                       # the audit is written: a late Ctrl-C changes nothing
        resume.finish()
    except KeyboardInterrupt:
        print(f"[audit] interrupted after the audit was written to {output.shown}; its resume "
              f"cache {resume.folder} may be left beside it (delete it)", file=sys.stderr, flush=True)
    say(f"wrote {', '.join(p.name for p in paths.values())} and manifest.json to {output.shown}")
    if output.aside is not None:
        say(f"the earlier audit was moved aside to {output.aside}")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """``normlimits audit ...``: parse, run, print the verdicts; 2 on a bad argument."""
    p = parser()
    args = p.parse_args(argv)
    try:
        doc = audit(args, argv)
    except (AuditError, OutputError, SettingError) as exc:   # a setting, or a full disk: named
        p.error(str(exc))
    for r in doc["rows"]:
        print(f"{r['id']:4s} {r['verdict']:15s} {r['statistic']} = {_fmt(r['value'])}")
    for name, why in doc["ungraded"].items():
        print(f"{name}: not graded ({why})")
    out = Path(args.out)
    print(f"results sha256 {doc['provenance']['results_sha256']}")
    print(f"audit written to {out / 'audit.json'}, {out / 'report.md'}, {out / 'report.html'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
