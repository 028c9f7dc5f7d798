"""Training at temperature: small byte-level GPT-2s whose attention logits are divided by T.

The paper asserts (Sec. 2.3, Sec. 4, guideline 3) that softmax's gradient sensitivity makes
training hard at low temperature, but measures no training. This module measures it: the same
small GPT-2-architecture model (2 layers x 4 heads x width 128, 0.45M parameters) is trained with
``alpha = softmax(q.k / (sqrt(d_head) T))`` for several T and several seeds (a seed fixes the
initial weights and the batches; a temperature changes neither), recording per step the training
loss and the gradient norms of the attention parameters (``W_Q``, ``W_K``, ``W_V``
and ``W_O``), and every few steps attention statistics on a fixed probe batch
(entropy, largest weight, the Jacobian spectral norm at the model's own T, the logit spread). It
reuses the stand-in's training loop, :func:`normlimits.model.standin.train_language_model`.
:func:`summarise_study` pairs the seeds across temperatures; :func:`summary_intervals` gives the
Student t intervals over them that TR is graded with.

Temperature enters exactly where GPT-2 applies its ``1/sqrt(d_head)``: every attention module's
``scaling`` attribute (which GPT-2 passes to whichever attention kernel runs, eager or sdpa) is
set to ``d_head**-0.5 / T``, and T is recorded in the config as ``attention_temperature``. This
survives the training loop's switch to the sdpa kernel (a custom ``AttentionInterface`` function
would be silently replaced by it), keeps GPT-2's own causal mask, and gives the stock model
exactly at T = 1 (tested, with causality and the weights' ``softmax(q.k / (sqrt(d) T))`` form).
Saved and reloaded models lose T (``scaling`` is recomputed on construction): nothing here saves
models, only the measurements.

Each run's measurements are cached as JSON (atomically, under a per-run lock) keyed by the model
configuration, the recipe, T, the seed, the corpus sha256 and torch's version, like the stand-in.
"""

from __future__ import annotations

import math
from copy import deepcopy
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from normlimits.core.cache import (
    CacheError, atomic_write_json, cache_path, read_json_entry, writer_lock)
from normlimits.model.capture import attention_modules, capture_batch, projection_gradients
from normlimits.metrics.normalizers import check_temperature
from normlimits.core.protocol import TR_SEEDS, TR_TEMPERATURES
from normlimits.core.settings import configure_torch, pinned_threads, thread_count
from normlimits.metrics.jacobian import softmax_jacobian_norm
from normlimits.model.corpus import load_corpus
from normlimits.model.pretrained import byte_encode, LoadedModel
from normlimits.model.standin import (
    bigram_bits_per_position, bigram_log_probs, byte_tokens, held_out_windows, split_corpus)

TEMPERATURE_KEY = "attention_temperature"

#: The small model: 2 layers x 4 heads x 128 wide, 128 positions, byte vocabulary (+1 special).
TR_CONFIG = dict(vocab_size=257, n_positions=128, n_embd=128, n_layer=2, n_head=4, bos_token_id=256,
                 eos_token_id=256, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
TR_POSITIONS = 128
TR_BATCH = 16
TR_STEPS = 600
TR_LR = 1e-3
TR_SEED = 0
PROBE_EVERY = 25
#: torch threads while training: one (the small model's kernels do not profit from a second
#: thread, and a fixed count makes the runs reproducible bit for bit)
TR_THREADS = 1
RECIPE_VERSION = 3


# --------------------------------------------------------------------------- temperature

def base_scaling(model, layer: int) -> float:
    """GPT-2's own factor on ``q.k`` in ``layer`` (``1/sqrt(d_head)``, divided by ``layer + 1`` with
    ``scale_attn_by_inverse_layer_idx``; 1 without ``scale_attn_weights``)."""
    config = model.config
    scale = 1.0
    if config.scale_attn_weights:
        scale = (config.n_embd // config.n_head) ** -0.5
    if config.scale_attn_by_inverse_layer_idx:
        scale /= float(layer + 1)
    return scale


def set_temperature(model, temperature: float) -> None:
    """Set the attention temperature T of a GPT-2 model: ``scaling = base / T`` in every block.

    ``alpha = softmax(q.k * base / T)`` with GPT-2's own ``base = 1/sqrt(d_head)``; T = 1 restores
    the stock model exactly. Records T as ``model.config.attention_temperature``.
    """
    t = check_temperature(temperature)
    for layer, module in enumerate(attention_modules(model)):
        module.scaling = base_scaling(model, layer) / t
    setattr(model.config, TEMPERATURE_KEY, t)


def model_temperature(model) -> float:
    """The attention temperature of ``model`` (1 for a stock GPT-2); checks every block agrees."""
    temps = {round(base_scaling(model, i) / float(module.scaling), 12)
             for i, module in enumerate(attention_modules(model))}
    if len(temps) != 1:
        raise ValueError(f"the blocks of this model have different temperatures {sorted(temps)}")
    return temps.pop()


def make_temperature_model(temperature: float, seed: int = TR_SEED, **overrides):
    """A freshly initialised ``GPT2LMHeadModel`` (:data:`TR_CONFIG` with ``overrides``, eager
    attention) at temperature T; the same seed gives the same weights whatever T is."""
    from transformers import GPT2Config, GPT2LMHeadModel

    t = check_temperature(temperature)
    config = GPT2Config(**{**TR_CONFIG, **overrides}, attn_implementation="eager")
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    set_temperature(model, t)
    return model


# --------------------------------------------------------------------------- measurements

def attention_gradient_norms(model) -> dict[str, float]:
    """Frobenius norms of the gradients of the attention parameters, pooled over layers.

    Keys ``q``, ``k``, ``v``, ``o`` (the weights of W_Q, W_K, W_V, W_O, found by
    :func:`normlimits.model.capture.projection_gradients`), ``attention`` (all four together) and
    ``total`` (every parameter).
    Call after ``backward()``; missing gradients count as 0.
    """
    sums = {"q": 0.0, "k": 0.0, "v": 0.0, "o": 0.0}
    for layer in projection_gradients(model):
        for name, grad in layer.items():
            if grad is not None:
                sums[name] += float(grad.double().pow(2).sum())
    total = sum(float(p.grad.double().pow(2).sum()) for p in model.parameters() if p.grad is not None)
    out = {name: math.sqrt(value) for name, value in sums.items()}
    out["attention"] = math.sqrt(sum(sums.values()))
    out["total"] = math.sqrt(total)
    return out


@torch.no_grad()
def attention_probe(model, probe_ids: torch.Tensor, rows: int = 32) -> dict[str, float]:
    """Attention statistics of ``model`` on ``probe_ids`` [B, L] at its own temperature.

    Queries and keys are captured with :func:`normlimits.model.capture.capture_batch` (whatever attention
    kernel the model runs), so the logits are ``scaling * q.k`` with the model's ``scaling``
    (which carries 1/T). Returns the mean over layers, heads, sequences and the last ``rows`` query
    positions of: the entropy (nats), the largest weight, the exact Jacobian spectral norm
    ``||(diag a - a a^T)/T||`` and the standard deviation of the logits ``q.k/(sqrt(d) T)`` over
    the visible keys.
    """
    # a float64 copy: at low T the logits are large, and float32 rounding alone moves the weights
    # by more than the capture's float32 check allows (1e-5); the training model is untouched
    copy = deepcopy(model).double().eval()
    loaded = LoadedModel(model=copy, name="probe", source="temperature training", encode=byte_encode,
                         tokenizer_kind="bytes", is_paper_model=False)
    cap = capture_batch(loaded, probe_ids)
    t = model_temperature(model)
    length = probe_ids.shape[-1]
    row_index = torch.arange(max(0, length - rows), length)
    logits = cap.logits(row_index).double()                      # [B, layers, H, R, L], carries 1/T
    weights = torch.softmax(logits, -1)
    entropy = -(weights * weights.clamp_min(1e-300).log()).sum(-1)
    visible = torch.isfinite(logits)
    finite = torch.where(visible, logits, torch.zeros_like(logits))
    count = visible.sum(-1)
    mean = finite.sum(-1, keepdim=True) / count.unsqueeze(-1)
    spread = ((((finite - mean) * visible) ** 2).sum(-1) / count).sqrt()
    return {"entropy": float(entropy.mean()), "max_weight": float(weights.amax(-1).mean()),
            "jacobian_norm": float(softmax_jacobian_norm(weights, t).mean()),
            "logit_std": float(spread.mean())}


@dataclass
class TemperatureRun:
    """One training run at temperature ``temperature`` from seed ``seed``.

    ``losses``: training loss per step (bits per byte); ``grad_norms``: name -> per-step gradient
    norm (see :func:`attention_gradient_norms`); ``probe``: name -> values at ``probe_steps``
    (see :func:`attention_probe`); ``held_out_bits`` / ``bigram_bits``: held-out bits per byte of
    the trained model and of the bigram baseline on the same split; ``plateau_step``: first step at
    which the 25-step running mean of the training loss is 0.1 bits below the bigram baseline
    (``None`` if never); ``seconds``: wall time of the training; ``from_cache``: loaded, not
    trained, in this process.
    """

    temperature: float
    losses: list[float]
    grad_norms: dict[str, list[float]]
    probe_steps: list[int]
    probe: dict[str, list[float]]
    held_out_bits: float
    bigram_bits: float
    plateau_step: int | None
    seconds: float
    seed: int = TR_SEED
    from_cache: bool = False

    def qk_gradient(self) -> list[float]:
        """Per-step gradient norm of the query and key weights together, ``sqrt(|dW_Q|^2 + |dW_K|^2)``."""
        return [math.hypot(q, k) for q, k in zip(self.grad_norms["q"], self.grad_norms["k"])]


@dataclass
class TemperatureStudy:
    """All runs of one study (every temperature x seed), plus what they share."""

    runs: list[TemperatureRun]
    config: dict
    recipe: dict
    corpus_sha256: str
    extra: dict = field(default_factory=dict)

    @property
    def temperatures(self) -> list[float]:
        """The study's temperatures, in increasing order."""
        return sorted({r.temperature for r in self.runs})

    @property
    def seeds(self) -> list[int]:
        return sorted({r.seed for r in self.runs})

    @property
    def from_cache(self) -> bool:
        """True when every run was loaded from the cache."""
        return all(r.from_cache for r in self.runs)

    @property
    def trained_seconds(self) -> float:
        """Wall time the runs took when they were trained (cached runs: as recorded then)."""
        return float(sum(r.seconds for r in self.runs))

    def at(self, temperature: float) -> list[TemperatureRun]:
        """The runs at ``temperature`` (one per seed), by seed."""
        runs = sorted((r for r in self.runs if math.isclose(r.temperature, temperature)), key=lambda r: r.seed)
        if not runs:
            raise KeyError(f"no run at T={temperature}; the study has {self.temperatures}")
        return runs

    def run(self, temperature: float, seed: int | None = None) -> TemperatureRun:
        """One run at ``temperature`` (the first seed unless ``seed`` is given)."""
        runs = self.at(temperature)
        if seed is None:
            return runs[0]
        for r in runs:
            if r.seed == seed:
                return r
        raise KeyError(f"no run at T={temperature} with seed {seed}; seeds {[r.seed for r in runs]}")


LN2 = math.log(2.0)


def plateau_step(losses_bits, baseline_bits: float, margin: float = 0.1, window: int = 25) -> int | None:
    """First step whose ``window``-step running mean of ``losses_bits`` is ``margin`` below baseline."""
    x = torch.as_tensor(losses_bits, dtype=torch.float64)
    if len(x) < window:
        return None
    running = x.unfold(0, window, 1).mean(-1)
    below = (running < baseline_bits - margin).nonzero()
    return int(below[0]) + window - 1 if len(below) else None


def train_at_temperature(temperature: float, train_ids: torch.Tensor, held_out_ids: torch.Tensor, *,
                         steps: int = TR_STEPS, positions: int = TR_POSITIONS, batch: int = TR_BATCH,
                         lr: float = TR_LR, seed: int = TR_SEED, probe_every: int = PROBE_EVERY,
                         bigram_bits: float | None = None, config_overrides: dict | None = None,
                         ) -> TemperatureRun:
    """Train one small GPT-2 at temperature T with the stand-in's loop; returns its :class:`TemperatureRun`.

    ``train_ids`` / ``held_out_ids``: byte token streams. The model's initial weights, the batches
    and the optimiser depend on ``seed`` only, not on T.
    """
    from normlimits.model.standin import (
        Phase, bigram_bits_per_position, bigram_log_probs, held_out_windows, model_bits_per_position,
        train_language_model)

    t = check_temperature(temperature)
    if steps < 1:
        raise ValueError(f"steps must be at least 1 (got {steps})")
    model = make_temperature_model(t, seed, **(config_overrides or {}))
    if positions > model.config.n_positions:
        raise ValueError(f"positions={positions} exceeds the model's n_positions={model.config.n_positions}")
    probe_ids = held_out_ids[: 2 * positions].reshape(2, positions)
    grad_names = ("q", "k", "v", "o", "attention", "total")
    grads: dict[str, list[float]] = {name: [] for name in grad_names}
    probe_steps: list[int] = []
    probe: dict[str, list[float]] = {}

    def record(step_probe: int) -> None:
        probe_steps.append(step_probe)
        for name, value in attention_probe(model, probe_ids).items():
            probe.setdefault(name, []).append(value)

    record(0)

    def on_step(step: int, loss: float, m) -> None:
        for name, value in attention_gradient_norms(m).items():
            grads[name].append(value)
        if (step + 1) % probe_every == 0 or step + 1 == steps:
            record(step + 1)

    with pinned_threads(TR_THREADS):
        log = train_language_model(model, train_ids, (Phase(positions, batch, steps),), lr=lr, seed=seed,
                                   description=f"training at T={t:g}, seed {seed}", on_step=on_step)
        windows = held_out_windows(held_out_ids, length=positions, max_windows=64)
        held = float(model_bits_per_position(model, windows).mean())
    if bigram_bits is None:
        bigram_bits = float(bigram_bits_per_position(bigram_log_probs(train_ids), windows).mean())
    losses = [x / LN2 for x in log.losses]
    return TemperatureRun(temperature=t, losses=losses, grad_norms=grads, probe_steps=probe_steps,
                          probe=probe, held_out_bits=held, bigram_bits=float(bigram_bits),
                          plateau_step=plateau_step(losses, float(bigram_bits)), seconds=log.seconds,
                          seed=int(seed))


def run_key(corpus_sha256: str, temperature: float, seed: int, steps: int, positions: int,
            batch: int, lr: float, config: dict | None = None) -> dict:
    """Everything one cached run depends on (the cache file is named by its digest)."""
    return {"config": dict(config or TR_CONFIG), "temperature": float(temperature), "seed": int(seed),
            "steps": steps, "positions": positions, "batch": batch, "lr": lr,
            "probe_every": PROBE_EVERY, "recipe": RECIPE_VERSION, "corpus": corpus_sha256,
            "threads": TR_THREADS, "torch": torch.__version__.split("+")[0]}


def _cached_run(path: Path, temperature: float, seed: int) -> TemperatureRun:
    """The run cached at ``path``; a damaged file raises :class:`~normlimits.core.cache.CacheError`
    naming it (delete it to train the run again)."""
    what = f"temperature run (T={temperature}, seed {seed})"
    data = read_json_entry(path, what, "delete it to train the run again")
    try:
        fields = {k: v for k, v in data.items() if k in TemperatureRun.__dataclass_fields__}
        return TemperatureRun(**{**fields, "from_cache": True})
    except (AttributeError, TypeError) as exc:
        raise CacheError(f"the cached {what} {path} is damaged ({exc}); delete it to train the "
                         "run again.") from None


def training_workers(missing: int, requested: int | None = None) -> int:
    """How many runs train at once: ``requested``, by default the build's threads
    (``NORMLIMITS_THREADS``) over each run's :data:`TR_THREADS`; at most ``missing``, at least 1."""
    wanted = thread_count() // TR_THREADS if requested is None else int(requested)
    return max(1, min(int(missing), wanted))


def _train_and_cache(path: Path, temperature: float, seed: int, *, split, config: dict, steps: int,
                     positions: int, batch: int, lr: float, recompute: bool) -> TemperatureRun:
    """Train one run and cache it at ``path`` atomically, holding its lock (another build training
    the same run is waited for and its file read); in this process or a worker. ``split`` is
    ``(train_ids, held_out_ids, bigram_bits)``; ``config`` the model configuration (passed, not
    read from :data:`TR_CONFIG`, so a worker process builds the same model)."""
    with writer_lock(path, f"the temperature run T={temperature}, seed {seed}"):
        if path.is_file() and not recompute:
            return _cached_run(path, temperature, seed)
        run = train_at_temperature(temperature, split[0], split[1], steps=steps, positions=positions,
                                   batch=batch, lr=lr, seed=seed, bigram_bits=split[2],
                                   config_overrides=config)
        atomic_write_json(path, {k: v for k, v in asdict(run).items() if k != "from_cache"})
        return run


def temperature_study(corpus=None, temperatures=TR_TEMPERATURES, seeds=TR_SEEDS, *,
                      steps: int = TR_STEPS, positions: int = TR_POSITIONS, batch: int = TR_BATCH,
                      lr: float = TR_LR, recompute: bool = False,
                      workers: int | None = None) -> TemperatureStudy:
    """One model per (temperature, seed), trained or loaded from the cache, on ``corpus``.

    Runs not in the cache train side by side in ``workers`` processes (default
    :func:`training_workers`: one per :data:`TR_THREADS` threads the build may use); each run
    trains on :data:`TR_THREADS` threads whichever process it is in, so the numbers are the same
    bit for bit as one after the other (tested).

    Each run is cached on its own as JSON under ``<cache>/temperature-training/<digest>.json``
    (digest of :func:`run_key`: model configuration, recipe, T, seed, corpus sha256, torch
    version), written atomically while holding a per-run lock, so concurrent builds wait for one
    training and a new seed or temperature trains only what is missing. Cost when nothing is
    cached: about ``len(temperatures) * len(seeds) * steps`` training steps (the chapter reports
    the recorded seconds).
    """
    configure_torch()
    temps = [check_temperature(t) for t in temperatures]
    seed_list = [int(s) for s in seeds]
    if not temps or not seed_list:
        raise ValueError(f"at least one temperature and one seed are needed (got temperatures="
                         f"{list(temperatures)}, seeds={list(seeds)})")
    corpus = corpus if corpus is not None else load_corpus()
    jobs = [(t, seed, cache_path("temperature-training",
                                 run_key(corpus.sha256, t, seed, steps, positions, batch, lr), ".json"))
            for t in temps for seed in seed_list]
    runs: dict[tuple[float, int], TemperatureRun] = {}
    missing = []
    for t, seed, path in jobs:
        if path.is_file() and not recompute:    # complete: entries appear atomically
            runs[(t, seed)] = _cached_run(path, t, seed)
        else:
            missing.append((t, seed, path))
    if missing:
        train_ids, held_out_ids = split_corpus(byte_tokens(corpus.text))
        windows = held_out_windows(held_out_ids, length=positions, max_windows=64)
        bigram = float(bigram_bits_per_position(bigram_log_probs(train_ids), windows).mean())
        common = dict(split=(train_ids, held_out_ids, bigram), config=dict(TR_CONFIG), steps=steps,
                      positions=positions, batch=batch, lr=lr, recompute=recompute)
        count = training_workers(len(missing), workers)
        if count == 1:
            trained = [_train_and_cache(path, t, seed, **common) for t, seed, path in missing]
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = [pool.submit(_train_and_cache, path, t, seed, **common) for t, seed, path in missing]
                trained = [f.result() for f in futures]
        for (t, seed, _), run in zip(missing, trained):
            runs[(t, seed)] = run
    ordered = [runs[(t, seed)] for t, seed, _ in jobs]
    recipe = {"steps": steps, "positions": positions, "batch": batch, "lr": lr,
              "probe_every": PROBE_EVERY}
    return TemperatureStudy(runs=ordered, config=dict(TR_CONFIG), recipe=recipe,
                            corpus_sha256=corpus.sha256, extra={"threads": torch.get_num_threads()})


@dataclass(frozen=True)
class StudySummary:
    """What the TR verdict rests on, from a :class:`TemperatureStudy`.

    ``table``: one row per temperature (mean, min, max and range over seeds of the held-out bits
    per byte; median query/key gradient ratio to T = ``base``; final raw logit spread);
    ``spread``: the seed spread, the larger range over seeds at ``low`` and at ``base``;
    ``differences``: per seed that ran at both temperatures (paired: a seed fixes the initial
    weights and the batches), held-out bits at ``low`` minus at ``base``; ``difference``: their
    mean (the mean at ``low`` minus the mean at ``base`` when every seed ran at both);
    ``in_spreads``: that difference over the spread (descriptive); ``ratios``: per paired seed,
    the ratio of the median per-step query/key gradient norms at ``low`` and ``base``;
    ``gradient_ratio``: their geometric mean; ``largest_range``: the largest seed range at any
    temperature; ``learned``: the bigram baseline's held-out bits minus the mean at ``base`` (how
    far the budget trained the stock model past the bigram plateau); ``base_bits``: the
    held-out bits at ``base`` of the paired seeds.
    """

    table: object
    low: float
    base: float
    spread: float
    difference: float
    in_spreads: float
    gradient_ratio: float
    largest_range: float
    learned: float
    differences: tuple[float, ...] = ()
    ratios: tuple[float, ...] = ()
    base_bits: tuple[float, ...] = ()


def _gradient_ratio(run: TemperatureRun, base: TemperatureRun) -> float:
    """The median per-step query/key gradient norm of ``run`` over that of ``base`` (same seed)."""
    import numpy as np

    return float(np.median(run.qk_gradient()) / np.median(base.qk_gradient()))


def _in_spreads(difference: float, spread: float) -> float:
    """``difference`` in units of ``spread`` (+-inf for a difference with no spread, 0 for none)."""
    return difference / spread if spread > 0 else math.copysign(math.inf, difference) if difference else 0.0


def summarise_study(study: TemperatureStudy, low: float | None = None, base: float = 1.0) -> StudySummary:
    """Seed-aware comparison of the lowest temperature (or ``low``) with ``base`` (T = 1): the
    table per temperature, and the paired per-seed differences and gradient ratios TR grades."""
    import numpy as np
    import pandas as pd

    temps = study.temperatures
    low = temps[0] if low is None else float(low)
    base_runs = {r.seed: r for r in study.at(base)}
    rows = []
    for t in temps:
        runs = study.at(t)
        bits = np.array([r.held_out_bits for r in runs])
        ratios = [_gradient_ratio(r, base_runs[r.seed]) for r in runs if r.seed in base_runs]
        rows.append({"T": t, "seeds": len(runs), "held-out bits (mean)": float(bits.mean()),
                     "min": float(bits.min()), "max": float(bits.max()),
                     "seed range": float(bits.max() - bits.min()),
                     "qk-gradient ratio to T=1": float(np.median(ratios)) if ratios else float("nan"),
                     "raw logit spread": float(np.mean([r.probe["logit_std"][-1] * t for r in runs]))})
    table = pd.DataFrame(rows).set_index("T")
    spread = float(max(table.loc[low, "seed range"], table.loc[base, "seed range"]))
    low_runs = {r.seed: r for r in study.at(low)}
    paired = sorted(set(low_runs) & set(base_runs))
    differences = tuple(float(low_runs[s].held_out_bits - base_runs[s].held_out_bits) for s in paired)
    ratios = tuple(_gradient_ratio(low_runs[s], base_runs[s]) for s in paired)
    difference = (float(np.mean(differences)) if differences else
                  float(table.loc[low, "held-out bits (mean)"] - table.loc[base, "held-out bits (mean)"]))
    return StudySummary(table=table, low=low, base=base, spread=spread, difference=difference,
                        in_spreads=_in_spreads(difference, spread),
                        gradient_ratio=(float(np.exp(np.mean(np.log(ratios)))) if ratios
                                        else float("nan")),
                        largest_range=float(table["seed range"].max()),
                        learned=float(study.runs[0].bigram_bits - table.loc[base, "held-out bits (mean)"]),
                        differences=differences, ratios=ratios,
                        base_bits=tuple(float(base_runs[s].held_out_bits) for s in paired))


def summary_intervals(study: TemperatureStudy, summary: StudySummary, *, level: float | None = None) -> dict:
    """Student t intervals over the seeds of the TR criteria (key -> Interval, unit ``seed``,
    :data:`normlimits.core.bootstrap.T_METHOD`).

    A seed fixes the initial weights and the batches at every temperature, so the seeds are
    paired, and each criterion is a mean over them: ``harder`` and ``easier``, the mean paired
    difference of held-out bits (``summary.differences``); ``gradients``, the geometric mean of
    the paired gradient ratios (t interval of their logarithms); ``learned``, the bigram baseline
    minus the held-out bits at ``base``. With 3 seeds a percentile bootstrap can only recombine
    them (10 distinct resamples: little more than their range, not a 95% interval); the t
    interval's coverage holds at n = 3 for differences spread about normally, at the price of
    t = 4.30 standard errors (2 degrees of freedom). Empty when fewer than two seeds ran at both
    temperatures. ``level`` defaults to :data:`normlimits.core.bootstrap.LEVEL`."""
    from normlimits.core import bootstrap as B

    if len(summary.differences) < 2:
        return {}
    options = dict(unit="seed", level=B.LEVEL if level is None else level)
    bigram = study.runs[0].bigram_bits
    difference = B.t_interval(summary.differences, **options)
    return {"harder": difference, "easier": difference,
            "gradients": B.t_interval(summary.ratios, log=True, **options),
            "learned": B.t_interval([bigram - b for b in summary.base_bits], **options)}


def seeds_to_decide(differences, level: float | None = None, most: int = 100_000) -> int | None:
    """Roughly how many paired seeds would put the t interval of the mean difference clear of 0,
    were the mean and standard deviation of ``differences`` what they are now: the smallest
    ``n >= 2`` with ``t_{(1+level)/2, n-1} sd / sqrt(n) < |mean|``. ``len(differences)`` when
    they already decide it; None when the mean is 0 or more than ``most`` seeds would be needed.
    ValueError for fewer than 2 differences."""
    import numpy as np
    from scipy.stats import t as student_t

    from normlimits.core import bootstrap as B

    x = np.asarray(differences, dtype=float)
    if x.size < 2:
        raise ValueError(f"seeds_to_decide needs at least 2 paired differences (got {x.size})")
    level = B.LEVEL if level is None else level
    mean, sd = abs(float(x.mean())), float(x.std(ddof=1))
    if mean == 0:
        return None
    if sd == 0:
        return int(x.size)

    def decides(n: int) -> bool:
        return float(student_t.ppf((1 + level) / 2, n - 1)) * sd / math.sqrt(n) < mean

    if decides(x.size):
        return int(x.size)
    if not decides(most):
        return None
    lo, hi = x.size, most                     # decides(hi), not decides(lo): bisect
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return hi


def interval_sentence(summary: StudySummary, intervals: dict, seconds_per_run: float | None = None) -> str:
    """The chapter's sentence on TR's intervals over seeds (:func:`summary_intervals`), with how
    many seeds would decide the sign of the difference and, given ``seconds_per_run``, what they
    would cost to train (both temperatures); or why there are none."""
    if not intervals:
        return ("With a single seed at both temperatures there is nothing to resample: TR is graded "
                "on its values and carries no interval.")
    from normlimits.core.bootstrap import level_words

    harder, gradients, learned = intervals["harder"], intervals["gradients"], intervals["learned"]
    n = harder.n
    text = (f"Over the {n} seeds, paired across temperatures, {harder.level:.0%} Student t intervals "
            f"({n - 1} degrees of freedom, {n} seeds each) give: the difference {summary.difference:+.3f} "
            f"[{harder.low:+.3f}, {harder.high:+.3f}] bits per byte, the gradient ratio "
            f"{summary.gradient_ratio:.2f} [{gradients.low:.2f}, {gradients.high:.2f}] (geometric mean), "
            f"the gap to the bigram baseline {summary.learned:.3f} [{learned.low:.3f}, {learned.high:.3f}] bits.")
    needed = seeds_to_decide(summary.differences, harder.level)
    if needed is None:
        return text + " No number of seeds would decide the sign of a mean difference of zero."
    if needed <= n:
        return text + f" The {n} seeds decide the sign of the difference."
    cost = (f", about {needed * 2 * seconds_per_run / 3600:.1f} hours of training for both temperatures "
            f"at this study's pace" if seconds_per_run else "")
    return (text + f" To decide its sign, were the differences' mean and spread to stay as they are, "
            f"would take about {needed:,} seeds{cost}.")


def running_mean(values, window: int = 25) -> list[float]:
    """Trailing running mean of a 1-D sequence (the first ``window - 1`` entries average what exists)."""
    x = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if window < 1:
        raise ValueError(f"window must be at least 1 (got {window})")
    c = torch.cat([torch.zeros(1, dtype=torch.float64), x.cumsum(0)])
    idx = torch.arange(1, len(x) + 1)
    lo = (idx - window).clamp_min(0)
    return ((c[idx] - c[lo]) / (idx - lo)).tolist()


def plot_study(study: TemperatureStudy, window: int = 25):
    """The study in three panels, one colour per temperature, one line per seed: training loss
    (running mean over ``window`` steps) against the bigram baseline, the query/key gradient norm
    (running median) and the raw logit spread ``T * std(l/T)`` on the probe batch."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(7.2, 9), sharex=True)
    temps = study.temperatures
    palette = plt.cm.viridis(np.linspace(0, 0.9, len(temps)))
    for colour, t in zip(palette, temps):
        for k, r in enumerate(study.at(t)):
            label = f"T = {t:g}" if k == 0 else None
            ax1.plot(running_mean(r.losses, window), color=colour, lw=1, label=label)
            ax2.plot(pd.Series(r.qk_gradient()).rolling(window, min_periods=1).median().values,
                     color=colour, lw=1)
            ax3.plot(r.probe_steps, np.array(r.probe["logit_std"]) * t, color=colour, lw=1,
                     marker=".", ms=3)
    ax1.axhline(study.runs[0].bigram_bits, color="k", ls="--", lw=1, label="bigram (held-out)")
    ax1.set(ylabel="bits per byte", title="training loss", ylim=(1.5, 6.5))
    ax2.set(ylabel=r"$\|\nabla W_Q, \nabla W_K\|$", yscale="log",
            title="query/key gradient norm")
    ax3.set(xlabel="step", ylabel=r"std of $q^\top k/\sqrt{d}$", yscale="log", title="raw logit spread")
    ax1.legend()
    fig.tight_layout()
    return fig
