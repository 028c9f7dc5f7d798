"""The stand-ins: small byte-level language models the project trains on the corpus, for machines
without GPT-2.

Two recipes in one format (:class:`Recipe`), trained by the same code on the same split, cached
the same way and reported the same way (held-out bits per byte by position band next to a bigram
baseline):

- ``standin`` (:data:`GPT2_RECIPE`): a ``GPT2LMHeadModel`` (4 layers x 4 heads = 16 heads, width
  192, ``n_positions`` 1024, learned absolute positions, vocabulary 256 bytes + 1 special);
- ``standin-rope`` (:data:`ROPE_RECIPE`): a ``LlamaForCausalLM`` of the same budget (4 layers x 4
  query heads sharing 2 key/value heads, width 192, rotary positions, RMSNorm, SwiGLU), so that
  the architectures chapter compares learned absolute positions with RoPE + grouped-query
  attention at equal size and corpus (it trains for 30% of the GPT-2 stand-in's steps).

Both train deterministically (fixed seed, fixed threads) on 95% of the corpus in two phases:

1. 256-token windows, 16 a step (cheap steps): the model leaves the bigram plateau;
2. 1024-token windows, 4 a step, teach attention the long context. For GPT-2 the position table
   beyond 256 is first extrapolated (:func:`extend_position_table`); its learned table starts from
   a small sinusoidal table (:func:`sinusoidal_positions`). RoPE needs neither.

Every GPT-2 recipe tried before the current one, with what it measured, is recorded in
:mod:`normlimits.model.standin_diary` and shown on the book's page "How the stand-ins were trained".

Each is cached under a key of its recipe and the corpus sha256 (saved atomically, verified by
checksums on load).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from normlimits.core.cache import (
    CacheError, atomic_save_dir, cache_path, file_sha256, read_json_entry, writer_lock)
from normlimits.model.pretrained import (
    BYTE_TOKENIZER_FILE, LoadedModel, byte_encode, check_model_folder, load_pretrained)
from normlimits.model.errors import ModelError
from normlimits.core.one_time import one_time_work
from normlimits.core.settings import CORPUS_ENV, configure_torch, pinned_threads
from normlimits.model.corpus import load_corpus

VOCAB_SIZE = 257  # 256 bytes + one end-of-text special
EOT = 256
#: torch threads a stand-in trains on, whatever ``NORMLIMITS_THREADS`` says and wherever it trains
#: (a chapter, a replica running beside another on one thread, the tests): its weights depend on
#: the thread count through the reductions' order, and every cached stand-in so far was trained on 2
TRAINING_THREADS = 2
STANDIN_CONFIG = dict(vocab_size=VOCAB_SIZE, n_positions=1024, n_embd=192, n_layer=4, n_head=4,
                      bos_token_id=EOT, eos_token_id=EOT, resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0)
BANDS = ((0, 256), (256, 512), (512, 1024))
HELD_OUT_FRACTION = 0.05
RECIPE_VERSION = 9


@dataclass(frozen=True)
class Phase:
    """One training phase: ``steps`` steps of ``batch`` windows of ``positions`` tokens.

    With ``random_offsets`` each window is placed at a random offset of the position table, so
    positions up to ``n_positions`` are trained even by short windows. With ``extend_positions``
    the rows of the position table beyond the previous phase's length are extrapolated first
    (:func:`extend_position_table`).
    """

    positions: int
    batch: int
    steps: int
    random_offsets: bool = False
    extend_positions: bool = False


STANDIN_PHASES = (Phase(256, 16, 300), Phase(1024, 4, 700, extend_positions=True))
#: amplitude of the sinusoidal initialisation of the (trainable) position table; the scale of
#: GPT-2's own N(0, 0.02) initialisation. Measured here: at step 220 of the 256-position phase,
#: 3.44 bits per byte with it against 3.62 with GPT-2's random table (larger amplitudes, 0.1 and
#: 0.4, stuck at the unigram plateau, 4.6).
POSITION_INIT_AMPLITUDE = 0.02
STANDIN_LR = 1e-3
STANDIN_SEED = 0

#: the RoPE stand-in: Llama's architecture at the GPT-2 stand-in's budget (about 1.8M parameters
#: against 2.0M): width 192, 4 layers, 4 query heads of 48 sharing 2 key/value heads, SwiGLU of
#: 576, RMSNorm, rotary positions (theta 10,000), tied input and output embeddings as GPT-2's
ROPE_CONFIG = dict(vocab_size=VOCAB_SIZE, hidden_size=192, intermediate_size=576,
                   num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                   max_position_embeddings=1024, rope_theta=10000.0, rms_norm_eps=1e-5,
                   tie_word_embeddings=True, bos_token_id=EOT, eos_token_id=EOT,
                   attention_bias=False, mlp_bias=False)
#: the same two phases as the GPT-2 stand-in's, with 30% of its steps: RoPE learns far faster (the
#: 1000-step recipe took 615 s and beat the bigram by 1.62 / 1.69 / 1.71 bits per byte; see the
#: diary, :mod:`normlimits.model.standin_diary`), and cold ``make test`` must stay under 35 minutes
ROPE_PHASES = (Phase(256, 16, 100), Phase(1024, 4, 200))
ROPE_RECIPE_VERSION = 2


@dataclass(frozen=True)
class Recipe:
    """How one stand-in is built and trained: the model ``setting`` name that loads it, the
    ``architecture`` (``gpt2`` or ``llama``) and its transformers ``config``, the training
    ``phases``, peak learning rate ``lr``, ``seed``, the recipe ``version`` (raised whenever the
    training changes) and, for GPT-2, the amplitude of the sinusoidal initialisation of the learned
    position table (``position_init``)."""

    setting: str
    architecture: str
    config: dict
    phases: tuple
    lr: float
    seed: int
    version: int
    position_init: float | None = None
    summary: str = ""

    def key(self, corpus_sha256: str) -> dict:
        """Everything the trained stand-in depends on (its cache folder is named by a digest)."""
        key = {"config": self.config, "phases": [asdict(p) for p in self.phases], "lr": self.lr,
               "position_init": self.position_init, "seed": self.seed, "recipe": self.version,
               "corpus": corpus_sha256, "torch": torch.__version__.split("+")[0]}
        if self.architecture != "gpt2":
            key["architecture"] = self.architecture
        return key

    def build(self) -> torch.nn.Module:
        """The untrained model, seeded (eager attention; training switches to sdpa)."""
        torch.manual_seed(self.seed)
        if self.architecture == "gpt2":
            from transformers import GPT2Config, GPT2LMHeadModel

            model = GPT2LMHeadModel(GPT2Config(**self.config, attn_implementation="eager"))
            with torch.no_grad():
                model.transformer.wpe.weight.copy_(sinusoidal_positions(
                    self.config["n_positions"], self.config["n_embd"], self.position_init))
            return model
        if self.architecture == "llama":
            from transformers import LlamaConfig, LlamaForCausalLM

            return LlamaForCausalLM(LlamaConfig(**self.config, attn_implementation="eager"))
        raise ValueError(f"architecture={self.architecture!r}: choose 'gpt2' or 'llama'")


GPT2_RECIPE = Recipe("standin", "gpt2", STANDIN_CONFIG, STANDIN_PHASES, STANDIN_LR, STANDIN_SEED,
                     RECIPE_VERSION, POSITION_INIT_AMPLITUDE,
                     "byte-level GPT-2: learned absolute positions, 4 layers x 4 heads, width 192")
ROPE_RECIPE = Recipe("standin-rope", "llama", ROPE_CONFIG, ROPE_PHASES, STANDIN_LR, STANDIN_SEED,
                     ROPE_RECIPE_VERSION, None,
                     "byte-level Llama: rotary positions, 4 query heads sharing 2 key/value heads "
                     "(grouped-query attention), RMSNorm, SwiGLU, 4 layers, width 192")
#: the stand-ins by the model setting that loads them
RECIPES = {r.setting: r for r in (GPT2_RECIPE, ROPE_RECIPE)}


def resolve_recipe(recipe: "Recipe | str | None" = None) -> Recipe:
    """A :class:`Recipe`, its setting name (``standin``, ``standin-rope``), or None for the GPT-2
    stand-in's."""
    if recipe is None:
        return GPT2_RECIPE
    return RECIPES[recipe] if isinstance(recipe, str) else recipe


@dataclass
class TrainingLog:
    """Per-step training losses (nats per token), wall time, and what ``on_step`` collected."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    extra: list = field(default_factory=list)


def sinusoidal_positions(n_positions: int, width: int, amplitude: float) -> torch.Tensor:
    """Sinusoidal position table [n_positions, width] (Vaswani et al.) scaled by ``amplitude``.

    Used only to *initialise* the stand-in's learned position embeddings: a relative offset is a
    fixed rotation of such a table, so attention to the previous bytes is easy to learn early.
    """
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    freq = 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float32) / width)
    table = torch.zeros(n_positions, width)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)
    return amplitude * table


@torch.no_grad()
def extend_position_table(model: torch.nn.Module, trained: int, amplitude: float) -> None:
    """Extrapolate the learned position table beyond its first ``trained`` rows, in place.

    Row p >= trained becomes sinusoid(p) + the mean learned correction (row minus its sinusoidal
    initialisation) over rows trained/2..trained-1, i.e. "a typical late position at offset p".
    Rows near 0 are left out of the mean: they learn the start-of-window role.
    """
    table = model.transformer.wpe.weight
    sinusoid = sinusoidal_positions(table.shape[0], table.shape[1], amplitude).to(table)
    correction = (table[trained // 2:trained] - sinusoid[trained // 2:trained]).mean(dim=0)
    table[trained:] = sinusoid[trained:] + correction


def byte_tokens(text: str) -> torch.Tensor:
    """The UTF-8 bytes of ``text`` as a LongTensor [n_bytes]."""
    return torch.tensor(byte_encode(text), dtype=torch.long)


def split_corpus(ids: torch.Tensor, held_out_fraction: float = HELD_OUT_FRACTION):
    """Split a token stream into (train, held_out): the last ``held_out_fraction`` is held out."""
    cut = training_size(len(ids), held_out_fraction)
    return ids[:cut], ids[cut:]


def training_size(n_tokens: int, held_out_fraction: float = HELD_OUT_FRACTION) -> int:
    """How many of ``n_tokens`` :func:`split_corpus` puts in the training split (the rest is held out)."""
    return int(n_tokens * (1 - held_out_fraction))


def learning_rate(step: int, total: int, peak: float, warmup: int = 10, hold: float = 0.7) -> float:
    """Linear warm-up for ``warmup`` steps, constant ``peak`` until ``hold`` of ``total``, then
    cosine decay to 10% of ``peak`` at ``total`` (a constant rate is what leaves the bigram
    plateau fastest; the final decay settles the weights)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    start = int(hold * total)
    if step < start:
        return peak
    progress = (step - start) / max(1, total - start)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train_language_model(model: torch.nn.Module, train_ids: torch.Tensor, phases: tuple[Phase, ...],
                         *, lr: float, seed: int, description: str = "training",
                         on_step: Callable[[int, float, torch.nn.Module], object] | None = None,
                         ) -> TrainingLog:
    """Train ``model`` (a causal LM: GPT-2, Llama, ...) on random windows of ``train_ids`` [n_tokens].

    Deterministic for a given seed and thread count. ``on_step(step, loss, model)`` is called
    after every optimiser step (gradients still present); what it returns is kept in
    ``log.extra``. Returns the :class:`TrainingLog`.
    """
    from tqdm.auto import tqdm

    configure_torch()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    implementation = model.config._attn_implementation
    if implementation == "eager":  # same function, faster kernels; custom attention is kept
        model.set_attn_implementation("sdpa")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    total = sum(p.steps for p in phases)
    n_positions = int(model.config.max_position_embeddings)   # GPT-2: n_positions
    log = TrainingLog()
    start = time.perf_counter()
    step = 0
    trained_positions = 0
    with tqdm(total=total, desc=description, mininterval=2.0) as bar:
        for phase in phases:
            if phase.positions > n_positions:
                raise ValueError(f"phase of {phase.positions} positions exceeds n_positions={n_positions}")
            if phase.extend_positions and 0 < trained_positions < n_positions:
                extend_position_table(model, trained_positions, POSITION_INIT_AMPLITUDE)
            trained_positions = n_positions if phase.random_offsets else max(trained_positions, phase.positions)
            for _ in range(phase.steps):
                starts = torch.randint(0, len(train_ids) - phase.positions - 1, (phase.batch,),
                                       generator=generator)
                idx = starts[:, None] + torch.arange(phase.positions + 1)[None, :]
                chunk = train_ids[idx]
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate(step, total, lr)
                kwargs = {}
                if phase.random_offsets:
                    offsets = torch.randint(0, n_positions - phase.positions + 1, (phase.batch, 1),
                                            generator=generator)
                    kwargs["position_ids"] = offsets + torch.arange(phase.positions)[None, :]
                logits = model(input_ids=chunk[:, :-1], **kwargs).logits
                loss_t = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1))
                optimizer.zero_grad(set_to_none=True)
                loss_t.backward()
                optimizer.step()
                loss = float(loss_t.detach())
                log.losses.append(loss)
                if on_step is not None:
                    log.extra.append(on_step(step, loss, model))
                step += 1
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
    log.seconds = time.perf_counter() - start
    if model.config._attn_implementation != implementation:
        model.set_attn_implementation(implementation)
    model.eval()
    return log


# ----------------------------------------------------------------------------- evaluation

LN2 = math.log(2.0)


def held_out_windows(held_out_ids: torch.Tensor, length: int = 1024, max_windows: int = 32) -> torch.Tensor:
    """Non-overlapping windows of ``length + 1`` tokens from the held-out split, [W, length + 1]."""
    count = min(max_windows, (len(held_out_ids) - 1) // length)
    if count < 1:
        raise ValueError(f"the held-out split ({len(held_out_ids)} tokens) is shorter than one window")
    return torch.stack([held_out_ids[k * length: k * length + length + 1] for k in range(count)])


@torch.no_grad()
def model_bits_per_position(model: torch.nn.Module, windows: torch.Tensor, batch: int = 4) -> torch.Tensor:
    """Cross-entropy in bits of each next-token prediction, [W, length] (position p predicts p+1)."""
    out = []
    for chunk in windows.split(batch):
        logits = model(input_ids=chunk[:, :-1]).logits
        nats = torch.nn.functional.cross_entropy(logits.transpose(1, 2), chunk[:, 1:], reduction="none")
        out.append(nats / LN2)
    return torch.cat(out)


def bigram_log_probs(train_ids: torch.Tensor, vocab: int = VOCAB_SIZE, smoothing: float = 0.5) -> torch.Tensor:
    """Add-``smoothing`` bigram model from a token stream: log2 P(next | previous), [vocab, vocab]."""
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    counts.index_add_(0, train_ids[:-1] * vocab + train_ids[1:], torch.ones(len(train_ids) - 1, dtype=torch.float64))
    counts = counts.view(vocab, vocab) + smoothing
    return torch.log2(counts / counts.sum(dim=1, keepdim=True))


def bigram_bits_per_position(log_probs: torch.Tensor, windows: torch.Tensor) -> torch.Tensor:
    """Bigram cross-entropy in bits of each next-token prediction, [W, length]."""
    return -log_probs[windows[:, :-1], windows[:, 1:]].float()


def by_band(bits: torch.Tensor, bands=BANDS) -> dict[str, float]:
    """Mean bits per byte over each position band of [W, length] and overall."""
    result = {f"{lo}-{hi - 1}": float(bits[:, lo:hi].mean()) for lo, hi in bands if lo < bits.shape[1]}
    result["all"] = float(bits.mean())
    return result


def evaluate_standin(model: torch.nn.Module, train_ids: torch.Tensor, held_out_ids: torch.Tensor) -> dict:
    """Held-out bits per byte of ``model`` and of the bigram baseline, by position band."""
    windows = held_out_windows(held_out_ids)
    return {
        "held_out_windows": int(windows.shape[0]),
        "model_bits_per_byte": by_band(model_bits_per_position(model, windows)),
        "bigram_bits_per_byte": by_band(bigram_bits_per_position(bigram_log_probs(train_ids), windows)),
    }


# ----------------------------------------------------------------------------- cache and loading

def standin_key(corpus_sha256: str, recipe: Recipe | None = None) -> dict:
    """Everything the trained stand-in (default: the GPT-2 one) depends on."""
    return resolve_recipe(recipe).key(corpus_sha256)


REPORT_FILE = "standin_report.json"
#: what a report must hold to be complete (it is written last, with the files' checksums)
REPORT_KEYS = ("model_bits_per_byte", "bigram_bits_per_byte", "train_seconds", "corpus_sha256")
#: the estimate the training notice gives (measured: 588 s idle on 2 cores, up to 886 s under load)
TRAINING_ESTIMATE = "about 10 minutes on 2 cores"


def minimum_corpus_bytes(length: int = 1024) -> int:
    """The fewest bytes a corpus needs for the stand-in's recipe: the held-out tail
    (:data:`HELD_OUT_FRACTION`) must hold one evaluation window of ``length + 1`` bytes, and the
    training split then holds far more than the longest phase's window."""
    n = length + 1   # the held-out share grows with n (by 0 or 1 per byte): the first n that holds it
    while n - training_size(n) < length + 1:
        n += 1
    return n


def check_trainable(corpus) -> None:
    """Refuse, before any training, a corpus too short for the stand-in's recipe (names the
    corpus setting, its size and the minimum)."""
    need = minimum_corpus_bytes(STANDIN_CONFIG["n_positions"])
    have = corpus.n_bytes
    if have < need:
        raise CacheError(f"{CORPUS_ENV} ({corpus.source}) holds {have:,} bytes: too short to train the "
                         f"stand-in, which needs at least {need:,} (its held-out tail must hold one "
                         f"{STANDIN_CONFIG['n_positions']}-byte window). Point {CORPUS_ENV} at a longer "
                         "text, such as War and Peace.")


def train_standin(corpus, recipe: Recipe | None = None) -> tuple[torch.nn.Module, dict]:
    """Train a stand-in (default: the GPT-2 one) on ``corpus`` from scratch; returns (model, report)."""
    recipe = resolve_recipe(recipe)
    check_trainable(corpus)
    with pinned_threads(TRAINING_THREADS):
        model = recipe.build()
        ids = byte_tokens(corpus.text)
        train_ids, held_out_ids = split_corpus(ids)
        log = train_language_model(model, train_ids, recipe.phases, lr=recipe.lr, seed=recipe.seed,
                                   description=f"training {recipe.setting} (once per machine)")
        report = evaluate_standin(model, train_ids, held_out_ids)
    report.update({
        "train_seconds": log.seconds, "steps": len(log.losses), "n_params": sum(p.numel() for p in model.parameters()),
        "final_train_loss_bits": sum(log.losses[-20:]) / 20 / LN2, "corpus_sha256": corpus.sha256,
        "threads": TRAINING_THREADS, "phases": [asdict(p) for p in recipe.phases],
        "loss_curve_bits": [x / LN2 for x in log.losses], "architecture": recipe.architecture,
    })
    return model, report


def standin_dir(corpus, recipe: Recipe | None = None) -> Path:
    """Where the stand-in (default: the GPT-2 one) for ``corpus`` is (or will be) cached."""
    return cache_path("standin", standin_key(corpus.sha256, recipe))


def save_standin(model: torch.nn.Module, report: dict, directory: Path) -> Path:
    """Save the stand-in into ``directory`` atomically: ``save_pretrained``, the byte-tokenizer
    marker, then the report with every file's sha256 (``report["files"]``), written last."""
    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        (tmp / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}) + "\n")
        files = {p.name: file_sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / REPORT_FILE).write_text(json.dumps({**report, "files": files}, indent=2, sort_keys=True) + "\n")

    return atomic_save_dir(directory, fill)


def verify_standin_dir(directory: Path) -> dict:
    """Check a cached stand-in folder before it is used; returns its report.

    Complete means: the report (written last) parses and holds :data:`REPORT_KEYS`; config.json
    parses; the weights open; and every file the report lists has the recorded sha256 (reports
    written before checksums were recorded skip that step). Anything else raises
    :class:`CacheError` naming the folder and the remedy: delete it to retrain.
    """
    remedy = (f"delete the folder {directory} to retrain the stand-in ({TRAINING_ESTIMATE}), or "
              "copy a complete one in its place")

    def damaged(why: str) -> CacheError:
        return CacheError(f"the cached stand-in in {directory} is damaged: {why}; {remedy}.")

    report_path = directory / REPORT_FILE
    if not report_path.is_file():
        raise damaged(f"it has no {REPORT_FILE} (the report is written last, so the folder is "
                      "incomplete or was altered)")
    report = read_json_entry(report_path, "stand-in report", remedy)
    missing = [key for key in REPORT_KEYS if not isinstance(report, dict) or key not in report]
    if missing:
        raise damaged(f"{REPORT_FILE} lacks {', '.join(missing)}")
    config = directory / "config.json"
    if not config.is_file():
        raise damaged("config.json is missing")
    read_json_entry(config, "stand-in configuration", remedy)
    for name, digest in report.get("files", {}).items():
        path = directory / name
        if not path.is_file():
            raise damaged(f"{name} is missing")
        if file_sha256(path) != digest:
            raise damaged(f"{name} does not match the checksum recorded when it was trained")
    try:
        check_model_folder(directory, "standin")
    except ModelError as exc:
        raise damaged(str(exc).split(": ", 1)[-1]) from None
    return report


def load_standin(corpus=None, recipe: Recipe | str | None = None) -> LoadedModel:
    """A stand-in (``recipe``: a :class:`Recipe` or its setting name; default the GPT-2 one) for
    ``corpus`` (default: the corpus setting), trained once and cached.

    A cached copy is verified (:func:`verify_standin_dir`) and loads in seconds, without a lock,
    so a complete read-only cache is usable. When none is cached, a notice on stderr says that
    training starts, where it is cached and how long it takes; training holds a lock, so
    concurrent callers wait for one training instead of repeating it. A damaged cached copy is
    never retrained silently: it raises :class:`CacheError` naming its folder.
    """
    recipe = resolve_recipe(recipe)
    corpus = corpus if corpus is not None else load_corpus()
    directory = standin_dir(corpus, recipe)
    if not directory.exists():
        check_trainable(corpus)
        with writer_lock(directory, f"the stand-in {recipe.setting!r} for this corpus ({directory})"):
            if not directory.exists():
                print(f"normlimits: no trained {recipe.setting!r} is cached for this corpus; training "
                      f"it now ({TRAINING_ESTIMATE}, once per machine) into {directory}",
                      file=sys.stderr, flush=True)
                with one_time_work():      # cached for every later run (core.one_time)
                    model, report = train_standin(corpus, recipe)
                    save_standin(model, report, directory)
    report = verify_standin_dir(directory)
    try:
        loaded = load_pretrained(str(directory), setting=recipe.setting)
    except ModelError as exc:
        raise CacheError(f"the cached stand-in in {directory} could not be loaded ({exc}); delete "
                         f"the folder to retrain it ({TRAINING_ESTIMATE}).") from None
    loaded.name = recipe.setting
    loaded.source = (f"project stand-in: {recipe.summary}, trained here on the corpus in "
                     f"{report['train_seconds']:.0f} s (cache {directory})")
    loaded.notes.append("The stand-in is not the paper's GPT-2 124M: its numbers are not the "
                        "paper's setting.")
    return loaded


def standin_report(corpus=None, recipe: Recipe | str | None = None) -> dict:
    """The training report saved with a cached stand-in (default: the GPT-2 one): bits per byte by
    band, time, size; verified like the stand-in itself."""
    recipe = resolve_recipe(recipe)
    corpus = corpus if corpus is not None else load_corpus()
    return verify_standin_dir(standin_dir(corpus, recipe))


def cached_report(corpus=None, recipe: Recipe | str | None = None) -> dict | None:
    """The verified report of a stand-in (default: the GPT-2 one) when it is trained on this
    machine, else None (nothing is trained)."""
    corpus = corpus if corpus is not None else load_corpus()
    if not (standin_dir(corpus, recipe) / REPORT_FILE).is_file():
        return None
    return standin_report(corpus, recipe)


def report_table(reports: dict) -> "pd.DataFrame":
    """Stand-ins side by side, one row per name of ``reports`` (name -> report): held-out bits per
    byte and gain over the bigram in each position band, steps, training seconds, parameters."""
    import pandas as pd

    rows = {}
    for name, rep in reports.items():
        bands = [f"{lo}-{hi - 1}" for lo, hi in BANDS]
        rows[name] = {**{f"bits/byte {b}": rep["model_bits_per_byte"][b] for b in bands},
                      **{f"gain over bigram {b}": rep["bigram_bits_per_byte"][b] - rep["model_bits_per_byte"][b]
                         for b in bands},
                      "steps": rep["steps"], "training seconds": rep["train_seconds"],
                      "parameters": rep["n_params"]}
    return pd.DataFrame.from_dict(rows, orient="index")


def main(argv=None) -> int:
    """``python -m normlimits.model.standin [standin|standin-rope ...]``: train (or load) the named
    stand-ins (default: the GPT-2 one) and print their reports."""
    names = list(argv if argv is not None else sys.argv[1:]) or [GPT2_RECIPE.setting]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        print(f"unknown stand-in {unknown[0]!r}: choose from {', '.join(RECIPES)}", file=sys.stderr)
        return 2
    for name in names:
        load_standin(recipe=name)
        report = standin_report(recipe=name)
        print(json.dumps({name: {k: v for k, v in report.items()
                                 if k not in ("loss_curve_bits", "files")}}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
