"""What every chapter does first and last: load model and corpus, show provenance, guard results.

A chapter starts with ``ctx = start_chapter("vanishing")`` in a cell the page does not show: it
fixes torch's threads, resolves the model and corpus settings, displays the provenance banner and
returns the :class:`ChapterContext`, which also cuts the corpus windows (``ctx.windows(L)``) and
captures them (``ctx.captures(L)``). It ends with ``ctx.finish()``, which records the chapter's
execution time next to its ledger rows. Assertion cells use :func:`check` and
:func:`check_bound`, which raise ``AssertionError`` with a message that says what broke, so the
strict build fails; :func:`glue_all` glues a dictionary of numbers for the prose.

The banner never shows a path of the building machine: the corpus is named by its title, its
source (a URL, or a file's name) and its sha256; the model by its setting, size and source, with
the home folder and the repository's folder replaced by ``~`` and ``.`` (:func:`public_text`).
"""

from __future__ import annotations

import html
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import glued
from .corpus import Corpus, load_corpus
from .models import LoadedModel, load_model
from .settings import CACHE_ENV, configure_torch, window_count


@dataclass
class ChapterContext:
    """The model, corpus and window count a chapter runs on."""

    chapter: str
    loaded: LoadedModel
    corpus: Corpus
    window_count: int
    started: float = field(default_factory=time.perf_counter)
    #: seconds spent on one-time work whose result is cached for every later build (training the
    #: temperature runs, ...): recorded with the time, and not held against the chapter's budget
    one_time_seconds: float = 0.0
    #: seconds each replica of this chapter ran (its label -> seconds, less its one-time work):
    #: each replica is a separate run of the chapter, held to the budget on its own
    replica_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def model_label(self) -> str:
        """Short label for the ledger and captions, e.g. ``standin (0.9M params)``."""
        return public_text(f"{self.loaded.name} ({self.loaded.n_params / 1e6:.1f}M params)")

    def elapsed(self) -> float:
        """Seconds since the chapter started."""
        return time.perf_counter() - self.started

    def windows(self, length: int | None = None, count: int | None = None):
        """The chapter's corpus windows, LongTensor [count, length] (default: the model's whole
        context and the window-count setting)."""
        from .corpus import token_windows

        return token_windows(self.loaded, self.corpus, length or self.loaded.max_positions,
                             count or self.window_count)

    def captures(self, length: int | None = None, count: int | None = None):
        """One capture per window of :meth:`windows`, as an iterator of
        :class:`~normlimits.capture.WindowCapture`: one forward pass per window, shared by every
        chapter of a build through the capture cache (:mod:`normlimits.capture_cache`)."""
        from .capture import cached_captures

        return cached_captures(self.loaded, self.corpus, length or self.loaded.max_positions,
                               count or self.window_count)

    def one_time(self, seconds: float) -> None:
        """Count ``seconds`` of this execution as one-time work (a training whose result is now
        cached): :func:`normlimits.timings.over_budget` does not hold it against the budget."""
        if seconds < 0:
            raise ValueError(f"one-time seconds must be >= 0 (got {seconds})")
        self.one_time_seconds += float(seconds)

    def replica_ran(self, label: str, seconds: float) -> None:
        """Record that the replica ``label`` (the chapter re-executed on another model) ran
        ``seconds``, its one-time work excluded: :func:`normlimits.timings.over_budget` holds the
        replica and the chapter's own run to the budget separately."""
        if seconds < 0:
            raise ValueError(f"replica seconds must be >= 0 (got {seconds})")
        self.replica_seconds[label] = self.replica_seconds.get(label, 0.0) + float(seconds)

    def finish(self) -> float:
        """Record the chapter's execution time (seconds since it started, and the one-time part of
        it) beside its ledger rows, in ``<ledger dir>/<chapter>.timing.json``; returns it and glues
        ``chapter_seconds``."""
        from .cache import atomic_write_json
        from .ledger import writable_ledger_dir

        seconds = self.elapsed()
        atomic_write_json(writable_ledger_dir() / f"{self.chapter}.timing.json",
                          {"chapter": self.chapter, "seconds": seconds, "model": self.model_label,
                           "windows": self.window_count, "one_time_seconds": self.one_time_seconds,
                           "replica_seconds": self.replica_seconds})
        _glue("chapter_seconds", seconds)
        return seconds


def public_text(text: str) -> str:
    """``text`` with the building machine's folders hidden: a cache folder set by
    ``NORMLIMITS_CACHE`` becomes ``$NORMLIMITS_CACHE``, the repository's folder (the book root, or
    the current folder) ``.``, the home folder ``~``."""
    from .ledger import book_root

    root = book_root() or Path.cwd()
    folders = [(root.resolve(), "."), (Path.home().resolve(), "~")]
    if os.environ.get(CACHE_ENV, "").strip():
        folders.insert(0, (Path(os.environ[CACHE_ENV]).expanduser().resolve(), f"${CACHE_ENV}"))
    for folder, name in folders:
        text = re.sub(re.escape(str(folder)) + r"(?=/|\b|$)", name, text)
    return text


def corpus_label(corpus: Corpus) -> str:
    """The corpus in words, without a machine path: its title, where it is from, its size."""
    head = corpus.text[:5000].lower()
    # the title page, or the novel's first line when the text is stripped of its front matter
    known = ("war and peace", "tolstoy", "so genoa and lucca are now just family estates")
    title = ("Tolstoy, War and Peace" if any(k in head for k in known)
             else "a user-supplied text")
    where = corpus.source if corpus.source.startswith(("http://", "https://")) \
        else f"local file {Path(corpus.source).name}"
    return f"{title} ({where}, {corpus.n_bytes:,} bytes, sha256 {corpus.sha256})"


def provenance_lines(loaded: LoadedModel, corpus: Corpus, windows: int) -> list[str]:
    """The banner's facts as plain sentences (no path of the building machine)."""
    lines = [
        f"Model: {loaded.name}, {loaded.n_params:,} parameters, {loaded.n_layers} layers x "
        f"{loaded.n_heads} heads (d_head {loaded.d_head}), context {loaded.max_positions}; "
        f"from {loaded.source}; tokenizer {loaded.tokenizer_kind}.",
        f"Corpus: {corpus_label(corpus)}; {windows} windows.",
    ]
    if not loaded.is_paper_model:
        lines.append("This is not the paper's GPT-2 124M: the numbers below are not the paper's "
                     "setting. Set NORMLIMITS_MODEL=gpt2 where GPT-2 can be downloaded to rerun "
                     "on the paper's model.")
    lines.extend(note for note in loaded.notes if note not in lines and "not the paper's" not in note)
    return [public_text(line) for line in lines]


class ProvenanceBanner:
    """Rich display of the provenance (HTML admonition in the book and Lab, text elsewhere)."""

    def __init__(self, lines: list[str], paper_model: bool):
        self.lines = lines
        self.paper_model = paper_model

    def _repr_html_(self) -> str:
        kind = "note" if self.paper_model else "warning"
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self.lines)
        return (f'<div class="admonition {kind} provenance-banner" style="overflow-wrap: anywhere">'
                f'<p class="admonition-title">'
                f"Provenance of this chapter's numbers</p><ul>{items}</ul></div>")

    def __repr__(self) -> str:
        return "\n".join(self.lines)


def start_chapter(chapter: str, model: str | None = None, windows: int | None = None,
                  show: bool = True, offline: str | None = None,
                  offline_reason: str = "") -> ChapterContext:
    """Load model and corpus for ``chapter`` and display the provenance banner.

    ``offline``: the model this chapter runs on when the model setting is unset and GPT-2 cannot
    be had, instead of the book's offline default (the real pretrained model); ``offline_reason``
    says why, in the banner. A model setting that is set is always honoured as it is.

    In a Jupyter kernel it also keeps every value the chapter glues (``glued.install``), so that
    JupyterLab (``make lab``) shows the glued numbers in the prose as the book does.
    """
    from .ledger import writable_ledger_dir

    writable_ledger_dir()          # an unwritable ledger folder is named now, not at the end
    configure_torch()
    glued.install()
    torch.manual_seed(0)
    loaded = load_model(model, offline=offline, offline_reason=offline_reason)
    corpus = load_corpus()
    ctx = ChapterContext(chapter, loaded, corpus, window_count(windows))
    if show:
        from IPython.display import display

        display(ProvenanceBanner(provenance_lines(loaded, corpus, ctx.window_count), loaded.is_paper_model))
    return ctx


def other_models(ctx: ChapterContext) -> "object":
    """Replay this chapter on the book's control models and show the verdicts side by side.

    Call it after the chapter recorded its own verdicts (its ledger rows without a variant are
    compared). Runs :func:`normlimits.replicas.replicate` (the chapter re-executed in a child kernel per
    control model, rows recorded as variants), glues ``replica_words`` (a sentence: how many
    verdicts each other model shares, which differ) and ``replica_models`` (their names), and
    returns the table (a pandas DataFrame: one row per claim, "verdict (headline value)" per
    model). Inside a replica it runs nothing.
    """
    from .ledger import ledger_dir, read_rows
    from .replicas import agreement_frame, agreement_words, replicate

    own = [r for r in read_rows(ledger_dir() / f"{ctx.chapter}.json") if not r.get("variant")]
    runs = replicate(ctx)
    names = ", ".join(run.replica.label for run in runs) or "none"
    glue_all({"replica_words": agreement_words(own, runs), "replica_models": names})
    return agreement_frame(own, runs)


def check(condition, message: str) -> None:
    """Raise ``AssertionError(message)`` unless ``condition`` is true (the build then fails)."""
    if not bool(condition):
        raise AssertionError(message)


def check_bound(values, lower=None, upper=None, *, name: str, rtol: float = 1e-6, atol: float = 1e-9) -> int:
    """Assert ``lower <= values <= upper`` elementwise up to float tolerance; returns the count checked.

    ``values``, ``lower``, ``upper`` broadcast together (tensors or numbers). The error names the
    bound, the number of violations and the worst one.
    """
    values = torch.as_tensor(values, dtype=torch.float64)
    count = values.numel()
    for bound, sign, word in ((lower, 1, "below the lower"), (upper, -1, "above the upper")):
        if bound is None:
            continue
        bound = torch.as_tensor(bound, dtype=torch.float64)
        slack = sign * (values - bound) + atol + rtol * bound.abs()
        bad = slack < 0
        if bool(bad.any()):
            raise AssertionError(f"{name}: {int(bad.sum())} of {count} values lie {word} bound "
                                 f"(worst by {float(-slack.min()):.3g})")
    return count


def _glue(name: str, value) -> None:
    from myst_nb import glue

    glue(name, value, display=False)


def glue_all(values: dict) -> dict:
    """Glue every ``name: value`` for the prose; numpy and torch scalars become Python numbers (so
    numpy 2's repr does not leak into the text), strings stay strings; returns ``values``."""
    for name, value in values.items():
        if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
            value = value.item()
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise TypeError(f"glue_all: {name!r} is a {type(value).__name__}; glue numbers or "
                            "strings (format booleans and lists into words first)")
        _glue(name, value)
    return values
