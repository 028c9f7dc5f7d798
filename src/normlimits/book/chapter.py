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

import torch

from normlimits.core import figure_data, forward_clock, glued, one_time
from normlimits.core.precision import dtype_rtol
from normlimits.model.corpus import Corpus, load_corpus
from normlimits.model.pretrained import LoadedModel
from normlimits.model.load import load_model
from normlimits.core.paths import public_text
from normlimits.model.corpus import corpus_label, token_windows
from normlimits.core.settings import MODEL_ENV, configure_torch, window_count
from normlimits.book.replicas import agreement_frame, agreement_words, replicate
from normlimits.claims.ledger import ledger_dir, read_rows, writable_ledger_dir
from normlimits.core.cache import atomic_write_json
from normlimits.model.capture_cache import cached_captures


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
    #: the process's one-time work (:func:`normlimits.core.one_time.spent`: trainings and model
    #: conversions the package itself times) when the chapter started; what it adds by the end is
    #: counted as one-time too
    one_time_at_start: float = field(default_factory=one_time.spent)
    #: the process's forward-pass seconds when the chapter started (:mod:`normlimits.core.forward_clock`)
    forward_at_start: float = field(default_factory=forward_clock.spent)
    #: forward-pass seconds of the replicas (each ran in its own kernel)
    replica_forward_seconds: float = 0.0
    #: seconds each replica of this chapter ran (its label -> seconds, less its one-time work):
    #: each replica is a separate run of the chapter, held to the budget on its own
    replica_seconds: dict[str, float] = field(default_factory=dict)
    #: the wall time of the replicas together, less their one-time work (they run side by side:
    #: :func:`normlimits.book.replicas.replicate`), None before any ran
    replica_wall_seconds: float | None = None

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
        return token_windows(self.loaded, self.corpus, length or self.loaded.max_positions,
                             count or self.window_count)

    def captures(self, length: int | None = None, count: int | None = None, shift: float = 0.0,
                 sliding: str = "cap"):
        """One capture per window of :meth:`windows`, as an iterator of
        :class:`~normlimits.model.capture.WindowCapture`: one forward pass per window, shared by every
        chapter of a build through the capture cache (:mod:`normlimits.model.capture_cache`).
        ``shift`` 0.5: as many windows halfway between those (the two sets together are the
        windows of twice the count). ``sliding="measure"``: windows up to the model's context
        (default length :attr:`~normlimits.model.pretrained.LoadedModel.context_positions`), each
        sliding-window layer captured over its own window; only for a consumer whose statistics
        use each row's visible keys (:func:`normlimits.metrics.vanishing.sweep_captures`). The
        default ``"cap"`` keeps every window within the sliding window."""
        default = self.loaded.positions(sliding)
        return cached_captures(self.loaded, self.corpus, length or default,
                               count or self.window_count, shift=shift, sliding=sliding)

    def one_time(self, seconds: float) -> None:
        """Count ``seconds`` of this execution as one-time work (a training whose result is now
        cached): :func:`normlimits.book.timings.over_budget` does not hold it against the budget."""
        if seconds < 0:
            raise ValueError(f"one-time seconds must be >= 0 (got {seconds})")
        self.one_time_seconds += float(seconds)

    def replica_ran(self, label: str, seconds: float, forward_seconds: float = 0.0) -> None:
        """Record that the replica ``label`` (the chapter re-executed on another model) ran
        ``seconds``, its one-time work excluded, of which ``forward_seconds`` in forward passes:
        :func:`normlimits.book.timings.over_budget` holds the replica and the chapter's own run to
        the budget separately."""
        if seconds < 0 or forward_seconds < 0:
            raise ValueError(f"replica seconds must be >= 0 (got {seconds}, forward {forward_seconds})")
        self.replica_seconds[label] = self.replica_seconds.get(label, 0.0) + float(seconds)
        self.replica_forward_seconds += float(forward_seconds)

    def replicas_took(self, seconds: float) -> None:
        """Record the wall time of this chapter's replicas, run side by side (less their one-time
        work): the chapter's own run is its time less this, not less the sum of the replicas'."""
        if seconds < 0:
            raise ValueError(f"replica wall seconds must be >= 0 (got {seconds})")
        self.replica_wall_seconds = (self.replica_wall_seconds or 0.0) + float(seconds)

    def finish(self) -> float:
        """Record the chapter's execution time (seconds since it started, and the one-time part of
        it: what :meth:`one_time` was given plus the package's own timed one-time work since the
        start; and the part spent in model forward passes, the replicas' included) beside its
        ledger rows, in ``<ledger dir>/<chapter>.timing.json``; returns it and glues
        ``chapter_seconds``."""
        seconds = self.elapsed()
        once = self.one_time_seconds + (one_time.spent() - self.one_time_at_start)
        forward = forward_clock.spent() - self.forward_at_start + self.replica_forward_seconds
        atomic_write_json(writable_ledger_dir() / f"{self.chapter}.timing.json",
                          {"chapter": self.chapter, "seconds": seconds, "model": self.model_label,
                           "windows": self.window_count, "one_time_seconds": once,
                           "forward_seconds": forward,
                           "replica_seconds": self.replica_seconds,
                           **({} if self.replica_wall_seconds is None
                              else {"replica_wall_seconds": self.replica_wall_seconds})})
        glued.glue("chapter_seconds", seconds)
        return seconds


def provenance_lines(loaded: LoadedModel, corpus: Corpus, windows: int) -> list[str]:
    """Every fact of the banner as plain sentences (no path of the building machine): the model's
    shape, source (with its cache folder), tokenizer and notes, the corpus with its sha256."""
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


def _first_clause(text: str) -> str:
    """``text`` up to its first ", " or "; " outside parentheses."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and text[i:i + 2] in (", ", "; "):
            return text[:i]
    return text


def model_kind(loaded: LoadedModel) -> str:
    """What the model is, in a few words: the paper's, pretrained elsewhere (and how its weights
    were stored), trained here (its recipe), or random weights; no cache folder or checksum."""
    source = public_text(loaded.source)
    if loaded.is_paper_model:
        return "the paper's model, pretrained by OpenAI"
    trained = re.match(r"project stand-in: (.*?), trained here", source)
    if trained:
        return f"a small model trained here on the corpus ({trained.group(1)})"
    if "random weights" in " ".join(loaded.notes).lower():
        return "random weights, for timings only"
    first = _first_clause(source)
    if loaded.quantisation:
        return f"a real pretrained model, {first}, its {loaded.quantisation} weights dequantised to float32"
    return f"a pretrained model ({first})"


def model_summary(loaded: LoadedModel) -> str:
    """The banner's first line: the model, its size and kind, and whether it is the paper's."""
    paper = "" if loaded.is_paper_model else " Not the paper's GPT-2 124M."
    return f"{loaded.name}, {loaded.n_params / 1e6:.1f}M parameters: {model_kind(loaded)}.{paper}"


def why_this_model(loaded: LoadedModel) -> str:
    """One line on why the chapter runs on this model: the setting that chose it, or why the
    unset setting fell back to it."""
    setting = os.environ.get(MODEL_ENV, "").strip()
    if setting:
        return f"Chosen by the setting {MODEL_ENV}={setting}."
    for note in loaded.notes:
        if note.startswith(f"{MODEL_ENV} is unset"):
            text = re.sub(rf"^{MODEL_ENV} is unset(, | and )", "", note)
            return public_text(text[:1].upper() + text[1:])
    return "The paper's own model." if loaded.is_paper_model else "The book's default model."


class ProvenanceBanner:
    """Rich display of the provenance (HTML in the book and Lab, text elsewhere): the model, its
    size and kind, the corpus and why this model, visible; every other fact (source and cache,
    shape, notes, settings) in a collapsed provenance block. The banner itself is a ``<details>``
    element, open; the site's script closes it on narrow screens (``book/_static/layout.js``)."""

    def __init__(self, lines: list[str], paper_model: bool, summary: str = "", corpus: str = "",
                 why: str = ""):
        self.lines = lines
        self.paper_model = paper_model
        self.summary = summary or (lines[0] if lines else "")
        self.corpus = corpus
        self.why = why

    def _repr_html_(self) -> str:
        kind = "note" if self.paper_model else "warning"
        facts = [("Corpus", self.corpus), ("Why this model", self.why)]
        items = "".join(f"<li><strong>{name}:</strong> {html.escape(text)}</li>" for name, text in facts if text)
        more = "".join(f"<li>{html.escape(line)}</li>" for line in self.lines)
        return (f'<details class="admonition {kind} provenance-banner" open>'
                f'<summary class="admonition-title">Model: {html.escape(self.summary)}</summary>'
                f'<ul class="provenance-facts">{items}</ul>'
                f'<details class="provenance-details"><summary>Provenance: source, cache, shape, '
                f"settings</summary><ul>{more}</ul></details></details>")

    def __repr__(self) -> str:
        return "\n".join([f"Model: {self.summary}", *(t for t in (self.corpus, self.why) if t), *self.lines])


#: settings whose values are shown in the banner's provenance block (the others are paths of the
#: building machine: only whether they are set is shown)
SHOWN_SETTINGS = ("NORMLIMITS_MODEL", "NORMLIMITS_WINDOWS", "NORMLIMITS_THREADS", "NORMLIMITS_DEVICE",
                  "NORMLIMITS_DTYPE", "NORMLIMITS_REPLICAS", "NORMLIMITS_REPLICA_OF")


def settings_line(environ=None) -> str:
    """The book's settings of this build in one sentence: the value of each of
    :data:`SHOWN_SETTINGS` that is set, "set" for the other ``NORMLIMITS_*`` variables (paths)."""
    environ = os.environ if environ is None else environ
    names = sorted(k for k in environ if k.startswith("NORMLIMITS_"))
    if not names:
        return "Settings: every NORMLIMITS_* setting at its default."
    shown = [f"{k}={environ[k]}" if k in SHOWN_SETTINGS else f"{k} set" for k in names]
    return "Settings: " + ", ".join(shown) + "; the rest at their defaults."


def banner(loaded: LoadedModel, corpus: Corpus, windows: int) -> ProvenanceBanner:
    """The chapter's provenance banner."""
    lines = provenance_lines(loaded, corpus, windows) + [settings_line()]
    return ProvenanceBanner(lines, loaded.is_paper_model, model_summary(loaded),
                            f"{corpus_label(corpus).split(' (')[0]}, {corpus.n_bytes:,} bytes; "
                            f"{windows} windows per measurement.", why_this_model(loaded))


def check_window_count(loaded, corpus, count: int, *, from_setting: bool = True) -> None:
    """Refuse, before any computing, a window count the corpus cannot hold at the chapters'
    longest window, ``min(MAX_LENGTH, the model's context)`` tokens (their sweeps end there):
    :class:`SettingError` naming ``NORMLIMITS_WINDOWS`` (``from_setting``) or the window count,
    with the largest count that fits."""
    from normlimits.core.protocol import MAX_LENGTH
    from normlimits.core.settings import WINDOWS_ENV, SettingError
    from normlimits.model.corpus import corpus_tokens

    length = min(MAX_LENGTH, int(loaded.max_positions))
    n_tokens = len(corpus_tokens(loaded, corpus))
    fits = n_tokens // length
    if count > max(fits, 1):
        named = f"{WINDOWS_ENV}={count}" if from_setting else f"the window count {count}"
        raise SettingError(f"{named}: {count:,} windows of L={length} tokens (the chapters' "
                           f"longest windows) do not fit in the corpus ({n_tokens:,} tokens): at "
                           f"most {fits:,} distinct windows fit. Set {WINDOWS_ENV} to {fits:,} or "
                           "fewer, or point NORMLIMITS_CORPUS at a longer text.")


def start_chapter(chapter: str, model: str | None = None, windows: int | None = None,
                  show: bool = True, offline: str | None = None,
                  offline_reason: str = "") -> ChapterContext:
    """Load model and corpus for ``chapter`` and display the provenance banner.

    ``offline``: the model this chapter runs on when the model setting is unset and GPT-2 cannot
    be had, instead of the book's offline default (the real pretrained model); ``offline_reason``
    says why, in the banner. A model setting that is set is always honoured as it is.

    In a Jupyter kernel it also keeps every value the chapter glues (``glued.install``), so that
    JupyterLab (``make lab``) shows the glued numbers in the prose as the book does, and makes
    every figure shown or glued carry the data it draws (``figure_data.install``), which the book
    offers under the figure as a CSV file.
    """
    writable_ledger_dir()          # an unwritable ledger folder is named now, not at the end
    configure_torch()
    glued.install()
    figure_data.install()
    torch.manual_seed(0)
    loaded = load_model(model, offline=offline, offline_reason=offline_reason)
    corpus = load_corpus()
    ctx = ChapterContext(chapter, loaded, corpus, window_count(windows))
    check_window_count(loaded, corpus, ctx.window_count, from_setting=windows is None)
    if show:
        from IPython.display import display

        display(banner(loaded, corpus, ctx.window_count))
    return ctx


def other_models(ctx: ChapterContext) -> "object":
    """Replay this chapter on the book's control models and show the verdicts side by side.

    Call it after the chapter recorded its own verdicts (its ledger rows without a variant are
    compared). Runs :func:`normlimits.book.replicas.replicate` (the chapter re-executed in a child kernel per
    control model, rows recorded as variants), glues ``replica_words`` (a sentence: how many
    verdicts each other model shares, which differ) and ``replica_models`` (their names), and
    returns the table (a pandas DataFrame: one row per claim, "verdict (headline value)" per
    model). Inside a replica it runs nothing.
    """
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
    bound, the number of violations and the worst one. ``rtol`` is raised to the working
    precision of the least precise float tensor among them (:func:`normlimits.core.precision.
    dtype_rtol`: 8 eps, 9.5e-7 for float32), never lowered: an ``rtol`` of 1e-9 on float32 values
    would count their rounding as violations.
    """
    rtol = dtype_rtol(rtol, values, lower, upper)
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


def glue_all(values: dict) -> None:
    """Glue every ``name: value`` for the prose; numpy and torch scalars become Python numbers (so
    numpy 2's repr does not leak into the text), strings stay strings. Returns None, so a cell that
    ends with it shows nothing (a returned dictionary was printed as a raw repr on the pages)."""
    for name, value in values.items():
        if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
            value = value.item()
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise TypeError(f"glue_all: {name!r} is a {type(value).__name__}; glue numbers or "
                            "strings (format booleans and lists into words first)")
        glued.glue(name, value)
