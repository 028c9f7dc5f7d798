"""Training at temperature: small byte-level GPT-2s whose attention logits are divided by T.

The paper asserts (§2.3, §4, guideline 3) that softmax's gradient sensitivity makes training hard
at low temperature, but measures no training. This module measures it: the same small
GPT-2-architecture model (same seed, so the same initial weights; the same batches; the same
optimiser and budget) is trained with ``alpha = softmax(q.k / (sqrt(d_head) T))`` for several T,
recording per step the training loss and the gradient norms of the attention parameters
(``W_Q``, ``W_K``, ``W_V`` of ``c_attn`` and ``W_O`` = ``c_proj``), and every few steps attention
statistics on a fixed probe batch (entropy, largest weight, the Jacobian spectral norm at the
model's own T). It reuses the stand-in's training loop, :func:`normlimits.standin.train_language_model`.

Temperature enters exactly where GPT-2 applies its ``1/sqrt(d_head)``: every attention module's
``scaling`` attribute (which GPT-2 passes to whichever attention kernel runs, eager or sdpa) is
set to ``d_head**-0.5 / T``, and T is recorded in the config as ``attention_temperature``. This
survives the training loop's switch to the sdpa kernel (a custom ``AttentionInterface`` function
would be silently replaced by it), keeps GPT-2's own causal mask, and gives the stock model
exactly at T = 1 (tested, with causality and the weights' ``softmax(q.k / (sqrt(d) T))`` form).
Saved and reloaded models lose T (``scaling`` is recomputed on construction): nothing here saves
models, only the measurements.

Results are cached as JSON (atomically, under a lock) keyed by the configuration, the recipe, the
temperatures and the corpus sha256, like the stand-in.
"""

from __future__ import annotations

import fcntl
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .cache import atomic_write_json, cache_path
from .normalizers import check_temperature
from .settings import configure_torch

TEMPERATURE_KEY = "attention_temperature"

#: The small model: 2 layers x 4 heads x 128 wide, 128 positions, byte vocabulary (+1 special).
TR_CONFIG = dict(vocab_size=257, n_positions=128, n_embd=128, n_layer=2, n_head=4, bos_token_id=256,
                 eos_token_id=256, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
TR_TEMPERATURES = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
TR_POSITIONS = 128
TR_BATCH = 16
TR_STEPS = 600
TR_LR = 1e-3
TR_SEED = 0
PROBE_EVERY = 25
RECIPE_VERSION = 1


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
    for layer, block in enumerate(model.transformer.h):
        block.attn.scaling = base_scaling(model, layer) / t
    setattr(model.config, TEMPERATURE_KEY, t)


def model_temperature(model) -> float:
    """The attention temperature of ``model`` (1 for a stock GPT-2); checks every block agrees."""
    temps = {round(base_scaling(model, i) / float(block.attn.scaling), 12)
             for i, block in enumerate(model.transformer.h)}
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

    Keys ``q``, ``k``, ``v`` (the three column blocks of ``c_attn.weight``), ``o``
    (``c_proj.weight``), ``attention`` (all four together) and ``total`` (every parameter).
    Call after ``backward()``; missing gradients count as 0.
    """
    sums = {"q": 0.0, "k": 0.0, "v": 0.0, "o": 0.0}
    width = model.config.n_embd
    for block in model.transformer.h:
        grad = block.attn.c_attn.weight.grad
        if grad is not None:
            for i, name in enumerate("qkv"):
                sums[name] += float(grad[:, i * width:(i + 1) * width].double().pow(2).sum())
        grad_o = block.attn.c_proj.weight.grad
        if grad_o is not None:
            sums["o"] += float(grad_o.double().pow(2).sum())
    total = sum(float(p.grad.double().pow(2).sum()) for p in model.parameters() if p.grad is not None)
    out = {name: math.sqrt(value) for name, value in sums.items()}
    out["attention"] = math.sqrt(sum(sums.values()))
    out["total"] = math.sqrt(total)
    return out


@torch.no_grad()
def attention_probe(model, probe_ids: torch.Tensor, rows: int = 32) -> dict[str, float]:
    """Attention statistics of ``model`` on ``probe_ids`` [B, L] at its own temperature.

    Queries and keys are captured with :func:`normlimits.capture.capture_batch` (whatever attention
    kernel the model runs), so the logits are ``scaling * q.k`` with the model's ``scaling``
    (which carries 1/T). Returns the mean over layers, heads, sequences and the last ``rows`` query
    positions of: the entropy (nats), the largest weight, the exact Jacobian spectral norm
    ``||(diag a - a a^T)/T||`` and the standard deviation of the logits ``q.k/(sqrt(d) T)`` over
    the visible keys.
    """
    from .capture import capture_batch
    from .jacobian import softmax_jacobian_norm
    from .models import LoadedModel, byte_encode

    was_training = model.training
    model.eval()
    try:
        loaded = LoadedModel(model=model, name="probe", source="temperature training", encode=byte_encode,
                             tokenizer_kind="bytes", is_paper_model=False)
        cap = capture_batch(loaded, probe_ids)
    finally:
        model.train(was_training)
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
    """One training run at temperature ``temperature``.

    ``losses``: training loss per step (bits per byte); ``grad_norms``: name -> per-step gradient
    norm (see :func:`attention_gradient_norms`); ``probe``: name -> values at ``probe_steps``
    (see :func:`attention_probe`); ``held_out_bits`` / ``bigram_bits``: held-out bits per byte of
    the trained model and of the bigram baseline on the same split; ``plateau_step``: first step at
    which the 25-step running mean of the training loss is 0.1 bits below the bigram baseline
    (``None`` if never); ``seconds``: wall time of the training.
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


@dataclass
class TemperatureStudy:
    """All runs of one study, plus what they share (configuration, recipe, corpus, cache path)."""

    runs: list[TemperatureRun]
    config: dict
    recipe: dict
    corpus_sha256: str
    path: str = ""
    from_cache: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def temperatures(self) -> list[float]:
        return [r.temperature for r in self.runs]

    def run(self, temperature: float) -> TemperatureRun:
        for r in self.runs:
            if math.isclose(r.temperature, temperature):
                return r
        raise KeyError(f"no run at T={temperature}; the study has {self.temperatures}")


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

    ``train_ids`` / ``held_out_ids``: byte token streams. The model, batches and optimiser depend on
    ``seed`` only, not on T.
    """
    from .standin import (Phase, bigram_bits_per_position, bigram_log_probs, held_out_windows,
                          model_bits_per_position, train_language_model)

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

    log = train_language_model(model, train_ids, (Phase(positions, batch, steps),), lr=lr, seed=seed,
                               description=f"training at T={t:g}", on_step=on_step)
    windows = held_out_windows(held_out_ids, length=positions, max_windows=64)
    held = float(model_bits_per_position(model, windows).mean())
    if bigram_bits is None:
        bigram_bits = float(bigram_bits_per_position(bigram_log_probs(train_ids), windows).mean())
    losses = [x / LN2 for x in log.losses]
    return TemperatureRun(temperature=t, losses=losses, grad_norms=grads, probe_steps=probe_steps,
                          probe=probe, held_out_bits=held, bigram_bits=float(bigram_bits),
                          plateau_step=plateau_step(losses, float(bigram_bits)), seconds=log.seconds)


def study_key(corpus_sha256: str, temperatures, steps: int, positions: int, batch: int, lr: float,
              seed: int) -> dict:
    """Everything a cached study depends on."""
    return {"config": TR_CONFIG, "temperatures": [float(t) for t in temperatures], "steps": steps,
            "positions": positions, "batch": batch, "lr": lr, "seed": seed, "probe_every": PROBE_EVERY,
            "recipe": RECIPE_VERSION, "corpus": corpus_sha256, "torch": torch.__version__.split("+")[0]}


def _from_json(data: dict, path: Path) -> TemperatureStudy:
    runs = [TemperatureRun(**r) for r in data["runs"]]
    return TemperatureStudy(runs=runs, config=data["config"], recipe=data["recipe"],
                            corpus_sha256=data["corpus_sha256"], path=str(path), from_cache=True,
                            extra=data.get("extra", {}))


def temperature_study(corpus=None, temperatures=TR_TEMPERATURES, *, steps: int = TR_STEPS,
                      positions: int = TR_POSITIONS, batch: int = TR_BATCH, lr: float = TR_LR,
                      seed: int = TR_SEED, recompute: bool = False) -> TemperatureStudy:
    """Train one model per temperature (or load the cached study) on ``corpus`` (default: the setting).

    Cached as JSON under ``<cache>/temperature-training/<digest>.json``, written atomically while
    holding a lock, so concurrent callers wait for one training. Takes about ``len(temperatures)``
    times 1-2 minutes on 2 cores the first time.
    """
    from .corpus import load_corpus
    from .standin import bigram_bits_per_position, bigram_log_probs, byte_tokens, held_out_windows, split_corpus

    configure_torch()
    temps = [check_temperature(t) for t in temperatures]
    if not temps:
        raise ValueError("at least one temperature is needed")
    corpus = corpus if corpus is not None else load_corpus()
    key = study_key(corpus.sha256, temps, steps, positions, batch, lr, seed)
    path = cache_path("temperature-training", key, ".json")
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file() and not recompute:
            return _from_json(json.loads(path.read_text()), path)
        start = time.perf_counter()
        train_ids, held_out_ids = split_corpus(byte_tokens(corpus.text))
        windows = held_out_windows(held_out_ids, length=positions, max_windows=64)
        bigram = float(bigram_bits_per_position(bigram_log_probs(train_ids), windows).mean())
        runs = [train_at_temperature(t, train_ids, held_out_ids, steps=steps, positions=positions,
                                     batch=batch, lr=lr, seed=seed, bigram_bits=bigram) for t in temps]
        recipe = {k: key[k] for k in ("steps", "positions", "batch", "lr", "seed", "probe_every")}
        study = TemperatureStudy(runs=runs, config=dict(TR_CONFIG), recipe=recipe, corpus_sha256=corpus.sha256,
                                 path=str(path), extra={"seconds": time.perf_counter() - start,
                                                        "threads": torch.get_num_threads()})
        atomic_write_json(path, {"runs": [asdict(r) for r in runs], "config": study.config,
                                 "recipe": recipe, "corpus_sha256": corpus.sha256, "extra": study.extra})
        return study


def running_mean(values, window: int = 25) -> list[float]:
    """Trailing running mean of a 1-D sequence (the first ``window - 1`` entries average what exists)."""
    x = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if window < 1:
        raise ValueError(f"window must be at least 1 (got {window})")
    c = torch.cat([torch.zeros(1, dtype=torch.float64), x.cumsum(0)])
    idx = torch.arange(1, len(x) + 1)
    lo = (idx - window).clamp_min(0)
    return ((c[idx] - c[lo]) / (idx - lo)).tolist()
