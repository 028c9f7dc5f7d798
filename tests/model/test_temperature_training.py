"""Tests for training at temperature: the temperature mechanism (stock model at T = 1, causality,
the weights' form under eager and sdpa), the measurements, and the cached study."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
import torch

from normlimits.experiments import temperature_training as TT
from normlimits.model.capture import capture_batch
from normlimits.model.pretrained import LoadedModel, byte_encode

TINY = dict(n_positions=32, n_embd=32, n_layer=2, n_head=4)


def tiny(temperature: float, seed: int = 0):
    return TT.make_temperature_model(temperature, seed, **TINY).eval()


def stock_copy(model):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(**{**TT.TR_CONFIG, **TINY}, attn_implementation="eager")
    stock = GPT2LMHeadModel(config).eval()
    stock.load_state_dict(model.state_dict())
    return stock


def ids(batch=2, length=24, seed=0):
    return torch.randint(0, 256, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_temperature_one_is_the_stock_model_exactly():
    model = tiny(1.0)
    stock = stock_copy(model)
    x = ids()
    with torch.no_grad():
        assert torch.equal(model(x).logits, stock(x).logits)
        out_t, out_s = model(x, output_attentions=True), stock(x, output_attentions=True)
    for a, b in zip(out_t.attentions, out_s.attentions):
        assert torch.equal(a, b)


def test_temperature_one_keeps_gpt2s_per_layer_scaling():
    """With ``scale_attn_by_inverse_layer_idx`` GPT-2 divides layer i's q.k by i + 1: T = 1 must keep
    that (set_temperature rewrites every block's scaling), so the model stays the stock one."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(**{**TT.TR_CONFIG, **TINY, "n_layer": 3}, scale_attn_by_inverse_layer_idx=True,
                        attn_implementation="eager")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    stock = [float(block.attn.scaling) for block in model.transformer.h]
    assert len(set(stock)) == 3, "the layers' own scalings differ"
    TT.set_temperature(model, 1.0)
    assert [float(block.attn.scaling) for block in model.transformer.h] == stock
    assert TT.model_temperature(model) == 1.0
    TT.set_temperature(model, 0.5)
    assert [float(block.attn.scaling) for block in model.transformer.h] == [2 * s for s in stock]


def test_same_seed_same_weights_whatever_the_temperature():
    a, b = tiny(0.1), tiny(3.0)
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(pa, pb)
    assert TT.model_temperature(a) == pytest.approx(0.1) and TT.model_temperature(b) == pytest.approx(3.0)


@pytest.mark.parametrize("temperature", [0.1, 0.3, 3.0])
def test_weights_are_softmax_of_logits_over_t_and_causal(temperature):
    model = tiny(temperature)
    x = ids()
    with torch.no_grad():
        out = model(x, output_attentions=True)
    loaded = LoadedModel(model=model, name="tiny", source="test", encode=byte_encode,
                         tokenizer_kind="bytes", is_paper_model=False)
    cap = capture_batch(loaded, x)                       # raw q, k of every layer, as the model computes them
    d = cap.queries.shape[-1]
    raw = cap.queries @ cap.keys.transpose(-1, -2) / math.sqrt(d)
    future = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
    expected = torch.softmax(raw.masked_fill(future, float("-inf")) / temperature, -1)
    got = torch.stack(out.attentions, 1)                 # [B, layers, H, L, L]
    assert torch.allclose(got, expected, atol=2e-6)
    assert float(got.triu(1).abs().max()) == 0.0         # no weight on future keys
    # the capture's own logits carry the model's scaling, 1/(sqrt(d) T)
    assert torch.allclose(torch.softmax(cap.logits(), -1), expected, atol=2e-6)


@pytest.mark.parametrize("temperature", [0.1, 3.0])
def test_future_tokens_do_not_change_the_past(temperature):
    model = tiny(temperature)
    x = ids(length=30)
    later = x.clone()
    later[:, 15:] = (later[:, 15:] + 11) % 256
    with torch.no_grad():
        assert torch.equal(model(x).logits[:, :15], model(later).logits[:, :15])
        assert not torch.equal(model(x).logits[:, 15:], model(later).logits[:, 15:])


def test_temperature_changes_the_output_and_survives_the_sdpa_kernel():
    model = tiny(0.2)
    x = ids()
    with torch.no_grad():
        eager = model(x).logits
        model.set_attn_implementation("sdpa")
        sdpa = model(x).logits
        model.set_attn_implementation("eager")
        TT.set_temperature(model, 1.0)
        at_one = model(x).logits
    assert torch.allclose(eager, sdpa, atol=1e-5)
    assert not torch.allclose(eager, at_one, atol=1e-3)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_bad_temperature_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="temperature T must be > 0"):
        TT.make_temperature_model(bad, **TINY)
    with pytest.raises(ValueError, match="temperature T must be > 0"):
        TT.set_temperature(tiny(1.0), bad)


def test_attention_gradient_norms_match_a_direct_computation():
    model = tiny(0.5)
    model.train()
    x = ids()
    logits = model(input_ids=x).logits
    torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)).backward()
    norms = TT.attention_gradient_norms(model)
    width = model.config.n_embd
    q = math.sqrt(sum(float(b.attn.c_attn.weight.grad[:, :width].pow(2).sum()) for b in model.transformer.h))
    o = math.sqrt(sum(float(b.attn.c_proj.weight.grad.pow(2).sum()) for b in model.transformer.h))
    total = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters()))
    assert norms["q"] == pytest.approx(q, rel=1e-6) and norms["o"] == pytest.approx(o, rel=1e-6)
    assert norms["total"] == pytest.approx(total, rel=1e-6)
    assert norms["attention"] == pytest.approx(math.sqrt(sum(norms[k] ** 2 for k in "qkvo")), rel=1e-9)


def test_attention_probe_respects_the_jacobian_bound():
    for t in (0.05, 1.0):
        model = tiny(t)
        stats = TT.attention_probe(model, ids(length=32), rows=8)
        assert set(stats) == {"entropy", "max_weight", "jacobian_norm", "logit_std"}
        assert all(math.isfinite(v) for v in stats.values())
        assert 0 < stats["jacobian_norm"] <= 1 / (2 * t)
        assert 0 <= stats["entropy"] <= math.log(32)


def test_attention_probe_runs_in_float64_and_leaves_the_model_alone():
    """The probe captures a float64 copy (at low T float32 rounding of large logits can exceed the
    capture's float32 weight check); the capture must then check a float64 model in float64."""
    model = tiny(0.01)
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.weight.mul_(40)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    stats = TT.attention_probe(model, ids(length=32), rows=8)
    assert all(math.isfinite(v) for v in stats.values())
    assert 0 < stats["jacobian_norm"] <= 1 / (2 * 0.01)
    assert model.training and next(model.parameters()).dtype == torch.float32
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_plateau_step_and_running_mean():
    losses = [4.0] * 30 + [3.0] * 30
    assert TT.plateau_step(losses, 3.5, margin=0.1, window=5) == 33  # mean of 4 threes + a four
    assert TT.plateau_step([4.0] * 40, 3.5) is None
    assert TT.plateau_step([1.0] * 3, 3.5) is None
    assert TT.running_mean([1, 2, 3, 4], 2) == pytest.approx([1, 1.5, 2.5, 3.5])
    with pytest.raises(ValueError):
        TT.running_mean([1.0], 0)


def _toy_corpus():
    from normlimits.model.corpus import Corpus

    text = ("It was in July 1805, and the speaker was the well-known Anna Pavlovna Scherer. " * 200)
    return Corpus(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), source="test")


def test_train_at_temperature_is_deterministic_and_keeps_t():
    corpus = _toy_corpus()
    from normlimits.model.standin import byte_tokens, split_corpus

    train_ids, held = split_corpus(byte_tokens(corpus.text))
    kwargs = dict(steps=6, positions=32, batch=2, probe_every=3, config_overrides=TINY)
    a = TT.train_at_temperature(0.3, train_ids, held, **kwargs)
    b = TT.train_at_temperature(0.3, train_ids, held, **kwargs)
    c = TT.train_at_temperature(1.0, train_ids, held, **kwargs)
    assert a.losses == b.losses and a.losses != c.losses
    assert len(a.losses) == 6 and all(len(v) == 6 for v in a.grad_norms.values())
    assert a.probe_steps == [0, 3, 6]
    assert math.isfinite(a.held_out_bits) and math.isfinite(a.bigram_bits)


def test_temperature_study_caches_each_run_atomically(isolated_cache, monkeypatch):
    corpus = _toy_corpus()
    monkeypatch.setattr(TT, "TR_CONFIG", {**TT.TR_CONFIG, **TINY})
    kwargs = dict(steps=4, positions=32, batch=2)
    first = TT.temperature_study(corpus, (0.5, 2.0), (0, 1), **kwargs)
    assert not first.from_cache and first.temperatures == [0.5, 2.0] and first.seeds == [0, 1]
    files = sorted((isolated_cache / "temperature-training").glob("*.json"))
    assert len(files) == 4                                   # one file per (T, seed)
    assert not list((isolated_cache / "temperature-training").glob(".*tmp-*"))
    second = TT.temperature_study(corpus, (0.5, 2.0), (0, 1), **kwargs)
    assert second.from_cache
    assert [r.losses for r in second.runs] == [r.losses for r in first.runs]
    assert second.run(2.0, seed=1).seed == 1 and second.run(2.0, seed=1).temperature == 2.0
    # seeds differ (initial weights and batches), and a new seed trains only what is missing
    assert first.run(0.5, 0).losses != first.run(0.5, 1).losses
    third = TT.temperature_study(corpus, (0.5, 2.0), (0, 1, 2), **kwargs)
    assert [r.from_cache for r in third.at(0.5)] == [True, True, False]
    assert len(list((isolated_cache / "temperature-training").glob("*.json"))) == 6
    assert json.loads(files[0].read_text())["seed"] in (0, 1)
    with pytest.raises(KeyError):
        second.run(1.0)
    with pytest.raises(KeyError, match="seed 7"):
        second.run(0.5, seed=7)
    with pytest.raises(ValueError, match="temperature"):
        TT.temperature_study(corpus, (0.0,), steps=4)
    with pytest.raises(ValueError, match="seeds"):
        TT.temperature_study(corpus, (1.0,), (), steps=4)


def _fake_run(t, seed, bits, grad):
    return TT.TemperatureRun(temperature=t, losses=[5.0, 4.0], grad_norms={"q": [grad, grad], "k": [0.0, 0.0]},
                             probe_steps=[0, 2], probe={"logit_std": [1.0, 2.0]}, held_out_bits=bits,
                             bigram_bits=3.5, plateau_step=None, seconds=1.0, seed=seed)


def test_summarise_study_pairs_the_seeds():
    runs = [_fake_run(1.0, s, b, 1.0) for s, b in enumerate((3.00, 3.02, 3.04))]
    runs += [_fake_run(0.03, s, b, g) for s, (b, g) in enumerate(((3.20, 3.0), (3.25, 5.0), (3.30, 4.0)))]
    study = TT.TemperatureStudy(runs=runs, config={}, recipe={}, corpus_sha256="x")
    summary = TT.summarise_study(study)
    assert summary.low == 0.03 and summary.base == 1.0
    assert summary.spread == pytest.approx(0.10)              # the larger range: 3.20..3.30
    assert summary.differences == pytest.approx((0.20, 0.23, 0.26))   # same seed, paired
    assert summary.difference == pytest.approx(0.23)         # their mean = 3.25 - 3.02
    assert summary.in_spreads == pytest.approx(2.3)
    assert summary.ratios == pytest.approx((3.0, 5.0, 4.0))
    assert summary.gradient_ratio == pytest.approx(60 ** (1 / 3))   # geometric mean of 3, 5, 4
    assert summary.base_bits == pytest.approx((3.00, 3.02, 3.04))
    assert summary.learned == pytest.approx(3.5 - 3.02)      # bigram minus the mean at T = 1
    assert summary.table.loc[1.0, "seed range"] == pytest.approx(0.04)
    assert summary.table.loc[0.03, "raw logit spread"] == pytest.approx(2.0 * 0.03)
    # a difference inside the spread stays inside it
    close = [_fake_run(0.03, s, b, 1.0) for s, b in enumerate((3.01, 3.05, 2.99))]
    near = TT.summarise_study(TT.TemperatureStudy(runs=runs[:3] + close, config={}, recipe={}, corpus_sha256="x"))
    assert abs(near.in_spreads) < 1


def _study(low_bits, base_bits=(3.00, 3.02, 3.04), ratios=(3.0, 5.0, 4.0)):
    runs = [_fake_run(1.0, s, b, 1.0) for s, b in enumerate(base_bits)]
    runs += [_fake_run(0.03, s, b, g) for s, (b, g) in enumerate(zip(low_bits, ratios))]
    return TT.TemperatureStudy(runs=runs, config={}, recipe={}, corpus_sha256="x")


def test_summary_intervals_are_t_intervals_over_the_paired_seeds():
    """TR's intervals are Student t intervals over the seeds (2 degrees of freedom for 3): of the
    paired differences, of the log gradient ratios (exponentiated) and of the bigram gap."""
    from scipy.stats import t as student_t

    from normlimits import claims
    from normlimits.core import bootstrap as B

    study = _study((3.20, 3.25, 3.30))
    summary = TT.summarise_study(study)
    got = TT.summary_intervals(study, summary)
    assert set(got) == {"harder", "easier", "gradients", "learned"}
    assert all(iv.unit == "seed" and iv.n == 3 and iv.method == B.T_METHOD for iv in got.values())
    t2 = float(student_t.ppf(0.975, 2))
    half = t2 * 0.03 / math.sqrt(3)                       # differences 0.20, 0.23, 0.26: sd 0.03
    assert (got["harder"].low, got["harder"].high) == pytest.approx((0.23 - half, 0.23 + half))
    assert got["easier"] == got["harder"]
    logs = np.log([3.0, 5.0, 4.0])
    g_half = t2 * logs.std(ddof=1) / math.sqrt(3)
    assert (got["gradients"].low, got["gradients"].high) == pytest.approx(
        (math.exp(logs.mean() - g_half), math.exp(logs.mean() + g_half)))
    values = {"harder": summary.difference, "easier": summary.difference,
              "gradients": summary.gradient_ratio, "learned": summary.learned}
    # consistently harder by 0.2 bits, gradients 3 to 5 times larger: both decided
    assert got["harder"].low > 0 and got["gradients"].low > 2
    assert claims.claim("TR").rule.grade(values, got) == "confirmed"
    # gradient ratios 1.5, 5, 4: the interval reaches below 2, so confirmed or corrected
    wide = TT.summarise_study(_study((3.20, 3.25, 3.30), ratios=(1.5, 5.0, 4.0)))
    wide_ivs = TT.summary_intervals(_study((3.20, 3.25, 3.30), ratios=(1.5, 5.0, 4.0)), wide)
    wide_values = {**values, "gradients": wide.gradient_ratio}
    assert claims.claim("TR").rule.possible_verdicts(wide_values, wide_ivs) == {"confirmed", "corrected"}
    sentence = TT.interval_sentence(summary, got, seconds_per_run=60.0)
    assert "Student t" in sentence and "3 seeds" in sentence and "decide the sign" in sentence
    assert "single seed" in TT.interval_sentence(summary, {}) and "$" not in sentence
    one_seed = TT.TemperatureStudy(runs=[study.runs[0], study.runs[3]], config={}, recipe={}, corpus_sha256="x")
    assert TT.summary_intervals(one_seed, TT.summarise_study(one_seed)) == {}


def test_a_small_effect_within_the_seeds_noise_is_inconclusive_not_not_reproduced():
    """The issue's case: a difference about 20 times smaller than the seeds' spread. Its value
    alone would read 'easier' (refuted); its t interval over the 3 seeds straddles 0, so the
    verdict is inconclusive, and the sentence says how many seeds would decide it and what
    they would cost."""
    from normlimits import claims

    study = _study((3.30, 2.60, 3.06), base_bits=(3.00, 3.02, 3.04), ratios=(30.0, 28.0, 33.0))
    summary = TT.summarise_study(study)
    assert summary.difference == pytest.approx(-0.0333, abs=1e-3)
    got = TT.summary_intervals(study, summary)
    values = {"harder": summary.difference, "easier": summary.difference,
              "gradients": summary.gradient_ratio, "learned": summary.learned}
    rule = claims.claim("TR").rule
    assert rule.grade(values) == "refuted"                     # the value alone
    assert rule.grade(values, got) == "inconclusive"
    needed = TT.seeds_to_decide(summary.differences)
    assert needed is not None and needed > 100
    sentence = TT.interval_sentence(summary, got, seconds_per_run=60.0)
    assert f"about {needed:,} seeds" in sentence and "hours of training" in sentence


def test_seeds_to_decide_is_the_smallest_count_whose_t_interval_clears_zero():
    from scipy.stats import t as student_t

    diffs = [0.1, -0.05, 0.2]
    n = TT.seeds_to_decide(diffs)
    mean, sd = float(np.mean(diffs)), float(np.std(diffs, ddof=1))
    clears = lambda k: student_t.ppf(0.975, k - 1) * sd / math.sqrt(k) < mean
    assert clears(n) and not clears(n - 1)
    assert TT.seeds_to_decide([0.20, 0.23, 0.26]) == 3        # already decided
    assert TT.seeds_to_decide([0.1, -0.1]) is None             # mean 0
    with pytest.raises(ValueError, match="at least 2"):
        TT.seeds_to_decide([0.1])


def test_runs_trained_side_by_side_equal_runs_trained_one_after_the_other(isolated_cache, monkeypatch, tmp_path):
    """Two worker processes (spawned: the patched configuration reaches them as an argument) give
    the runs bit for bit as one process does, each run on TR_THREADS threads."""
    corpus = _toy_corpus()
    monkeypatch.setattr(TT, "TR_CONFIG", {**TT.TR_CONFIG, **TINY})
    kwargs = dict(steps=4, positions=32, batch=2)
    side = TT.temperature_study(corpus, (0.5, 2.0), (0,), workers=2, **kwargs)
    assert not side.from_cache and len(list((isolated_cache / "temperature-training").glob("*.json"))) == 2
    monkeypatch.setenv("NORMLIMITS_CACHE", str(tmp_path / "another-cache"))
    one = TT.temperature_study(corpus, (0.5, 2.0), (0,), workers=1, **kwargs)
    assert not one.from_cache
    for a, b in zip(side.runs, one.runs):
        assert (a.temperature, a.seed) == (b.temperature, b.seed)
        assert a.losses == b.losses and a.grad_norms == b.grad_norms and a.probe == b.probe
        assert a.held_out_bits == b.held_out_bits


def test_training_workers_follow_the_thread_setting(monkeypatch):
    monkeypatch.setenv("NORMLIMITS_THREADS", "1")
    assert TT.training_workers(6) == 1
    monkeypatch.setenv("NORMLIMITS_THREADS", "2")
    from normlimits.core.settings import available_cores

    assert TT.training_workers(6) == min(2, available_cores()) // TT.TR_THREADS
    assert TT.training_workers(1) == 1
