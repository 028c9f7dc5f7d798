"""The stand-in: deterministic training pieces, its evaluation, its cache, and its quality."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest
import torch

from conftest import capture_parity, make_tiny_gpt2
from normlimits.model import standin
from normlimits.model.standin import Phase


def test_split_holds_out_the_tail():
    ids = torch.arange(100)
    train, held = standin.split_corpus(ids, 0.1)
    assert torch.equal(train, torch.arange(90)) and torch.equal(held, torch.arange(90, 100))


def test_learning_rate_warms_up_then_decays_to_a_tenth():
    assert standin.learning_rate(0, 100, 1.0, warmup=10) == pytest.approx(0.1)
    assert standin.learning_rate(50, 100, 1.0, warmup=10) == pytest.approx(1.0)
    assert standin.learning_rate(10, 100, 1.0, warmup=10) == pytest.approx(1.0)
    assert standin.learning_rate(100, 100, 1.0, warmup=10) == pytest.approx(0.1)


def test_bigram_model_is_normalised_and_exact_on_a_deterministic_stream():
    ids = torch.tensor([0, 1] * 500)
    log_probs = standin.bigram_log_probs(ids, vocab=3, smoothing=1e-9)
    assert torch.allclose((2 ** log_probs).sum(1), torch.ones(3, dtype=torch.float64))
    windows = ids[:11][None]
    assert float(standin.bigram_bits_per_position(log_probs, windows).max()) < 1e-6


def test_bands_average_the_right_positions():
    bits = torch.cat([torch.zeros(1, 256), torch.ones(1, 256), 2 * torch.ones(1, 512)], dim=1)
    bands = standin.by_band(bits)
    assert bands == {"0-255": 0.0, "256-511": 1.0, "512-1023": 2.0, "all": 1.25}


def test_training_is_deterministic_and_lowers_the_loss():
    ids = torch.tensor(list(b"abcabcabd" * 200))
    phases = (Phase(16, 8, 12, random_offsets=True), Phase(32, 4, 4))
    runs = []
    for _ in range(2):
        model = make_tiny_gpt2(vocab=257)
        log = standin.train_language_model(model, ids, phases, lr=3e-3, seed=1,
                                           on_step=lambda step, loss, m: step)
        runs.append(log)
    assert runs[0].losses == runs[1].losses, "same seed, same threads: same losses"
    assert runs[0].extra == list(range(16))
    assert runs[0].losses[-1] < runs[0].losses[0] - 1.0


def test_phase_longer_than_the_position_table_is_refused():
    with pytest.raises(ValueError, match="n_positions"):
        standin.train_language_model(make_tiny_gpt2(vocab=257), torch.arange(200) % 250,
                                     (Phase(128, 1, 1),), lr=1e-3, seed=0)


def test_cache_key_tracks_corpus_and_recipe():
    a, b = standin.standin_key("a" * 64), standin.standin_key("b" * 64)
    assert a != b and a["phases"] == b["phases"]


#: Smallest gain over the bigram baseline accepted in any position band, in bits per byte. The
#: issue asks for "a clear margin"; recipe 9 measured 0.58 / 0.50 / 0.38 bits per byte in the bands
#: 0-255 / 256-511 / 512-1023 (recipe 8: 0.55 / 0.32 / 0.10; see standin.py's docstring), so 0.25
#: leaves room for run-to-run differences of thread scheduling while failing any regression
#: towards the bigram level (two rejected recipes sat at gain 0.00 beyond position 256).
MIN_GAIN_BITS = 0.25


@pytest.mark.parametrize("recipe", ["standin", "standin-rope"])
def test_standin_is_cached_and_beats_bigram_in_every_band(recipe):
    """Each trained stand-in (trained once per machine: the GPT-2 one ~10 min, the RoPE one ~3 min)
    beats the bigram baseline in every band."""
    import time

    start = time.perf_counter()
    loaded = standin.load_standin(recipe=recipe)
    report = standin.standin_report(recipe=recipe)
    assert loaded.n_heads * loaded.n_layers >= 16 and loaded.max_positions >= 1024
    assert loaded.encode("a") == [97]
    if recipe == "standin-rope":
        assert loaded.family == "llama" and loaded.n_kv_heads < loaded.n_heads, "RoPE with grouped-query attention"
    for band in ("0-255", "256-511", "512-1023"):
        gain = report["bigram_bits_per_byte"][band] - report["model_bits_per_byte"][band]
        assert gain > MIN_GAIN_BITS, f"{recipe}, band {band}: gain over bigram only {gain:.3f} bits/byte"
    assert math.isfinite(report["train_seconds"])
    assert report["phases"] == [asdict(p) for p in standin.resolve_recipe(recipe).phases]
    second = time.perf_counter()
    standin.load_standin(recipe=recipe)
    assert time.perf_counter() - second < 30, "a cached stand-in loads in seconds"


def test_captures_of_the_trained_standin_match_its_own_attentions():
    """Capture parity on the trained stand-in (two 256-token windows of the corpus). A model-tier
    test: on a new machine it is the first to need the stand-in, whose training (about 9 minutes)
    would otherwise make the unit tier slow."""
    from normlimits.model.corpus import load_corpus, token_windows

    loaded = standin.load_standin()
    ids = token_windows(loaded, load_corpus(), 256, 2)
    capture_parity(loaded, ids, atol=1e-5)


def test_position_table_extension_keeps_trained_rows_and_extrapolates_the_rest():
    model = make_tiny_gpt2(n_embd=32, n_positions=64, vocab=257)
    sinusoid = standin.sinusoidal_positions(64, 32, 0.02)
    learned = torch.randn(32) * 0.01
    with torch.no_grad():
        model.transformer.wpe.weight.copy_(sinusoid)
        model.transformer.wpe.weight[:16] += learned
    before = model.transformer.wpe.weight[:16].clone()
    standin.extend_position_table(model, 16, 0.02)
    table = model.transformer.wpe.weight
    assert torch.equal(table[:16], before)
    assert torch.allclose(table[16:], sinusoid[16:] + learned, atol=1e-7)


def test_sinusoidal_table_shape_and_scale():
    table = standin.sinusoidal_positions(1024, 192, 0.02)
    assert table.shape == (1024, 192)
    assert float(table.abs().max()) <= 0.02 + 1e-7
    assert torch.allclose(table[0, 1::2], torch.full((96,), 0.02))


# ------------------------------------------------------------------ the RoPE stand-in (recipe format)

def test_the_two_recipes_share_budget_phases_and_training_but_not_architecture():
    gpt2, rope = standin.GPT2_RECIPE.build(), standin.ROPE_RECIPE.build()
    n_gpt2, n_rope = (sum(p.numel() for p in m.parameters()) for m in (gpt2, rope))
    assert abs(n_rope / n_gpt2 - 1) < 0.15, (n_gpt2, n_rope)
    assert type(rope).__name__ == "LlamaForCausalLM" and not hasattr(rope.model, "wpe")
    assert rope.config.num_key_value_heads < rope.config.num_attention_heads, "grouped-query attention"
    assert rope.config.num_attention_heads * rope.config.num_hidden_layers == 16
    assert rope.config.max_position_embeddings == gpt2.config.max_position_embeddings == 1024
    assert [(p.positions, p.batch) for p in standin.ROPE_PHASES] == \
        [(p.positions, p.batch) for p in standin.STANDIN_PHASES], "same curriculum of window shapes"
    rope_steps, gpt2_steps = (sum(p.steps for p in r.phases) for r in (standin.ROPE_RECIPE, standin.GPT2_RECIPE))
    assert rope_steps < gpt2_steps, "the RoPE stand-in trains fewer steps (cold make test budget)"
    keys = [standin.standin_key("a" * 64, r) for r in (standin.GPT2_RECIPE, standin.ROPE_RECIPE)]
    assert keys[0] != keys[1] and keys[0] == standin.standin_key("a" * 64)
    assert standin.RECIPES == {"standin": standin.GPT2_RECIPE, "standin-rope": standin.ROPE_RECIPE}
    assert standin.resolve_recipe() is standin.resolve_recipe("standin") is standin.GPT2_RECIPE
    assert standin.resolve_recipe(standin.ROPE_RECIPE) is standin.resolve_recipe("standin-rope")


def test_training_a_tiny_llama_with_the_same_loop_is_deterministic():
    from transformers import LlamaConfig, LlamaForCausalLM

    ids = torch.tensor(list(b"abcabcabd" * 200))
    config = dict(vocab_size=257, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**config, attn_implementation="eager"))
        runs.append(standin.train_language_model(model, ids, (Phase(16, 8, 12), Phase(64, 2, 4)),
                                                 lr=3e-3, seed=1))
    assert runs[0].losses == runs[1].losses
    assert runs[0].losses[-1] < runs[0].losses[0] - 1.0
    assert model.config._attn_implementation == "eager", "the eager kernel is restored after training"


def test_a_cached_rope_standin_loads_by_its_setting(isolated_cache, tmp_path, monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    from normlimits.model.corpus import load_corpus
    from normlimits.model.load import load_model

    text = tmp_path / "text.txt"
    text.write_text("Well, Prince, so Genoa and Lucca are now just family estates. " * 400)
    monkeypatch.setenv("NORMLIMITS_CORPUS", str(text))
    corpus = load_corpus()
    tiny = LlamaForCausalLM(LlamaConfig(vocab_size=257, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, max_position_embeddings=128,
                                        attn_implementation="eager"))
    report = {"model_bits_per_byte": {"all": 2.0}, "bigram_bits_per_byte": {"all": 3.0},
              "train_seconds": 2.0, "corpus_sha256": corpus.sha256}
    standin.save_standin(tiny, report, standin.standin_dir(corpus, standin.ROPE_RECIPE))
    monkeypatch.setattr(standin, "train_standin", lambda *a: pytest.fail("training started"))
    loaded = load_model("standin-rope")
    assert loaded.name == "standin-rope" and loaded.family == "llama" and loaded.n_kv_heads == 2
    assert "rotary positions" in loaded.source
    assert standin.standin_report(recipe="standin-rope")["train_seconds"] == 2.0
    assert standin.cached_report(corpus, "standin-rope")["train_seconds"] == 2.0
    assert standin.cached_report(corpus) is None, "nothing trained, nothing reported (no training)"
    assert not standin.standin_dir(corpus).exists(), "the GPT-2 stand-in was not touched"


def test_report_table_puts_stand_ins_side_by_side_with_gains_per_band():
    def report(bits, bigram, steps):
        bands = ("0-255", "256-511", "512-1023")
        return {"model_bits_per_byte": dict(zip(bands, bits)), "bigram_bits_per_byte": dict(zip(bands, bigram)),
                "steps": steps, "train_seconds": 1.5, "n_params": 10}
    table = standin.report_table({"a": report((2.9, 3.0, 3.1), (3.5, 3.5, 3.5), 1000),
                                  "b": report((2.0, 2.5, 3.0), (3.4, 3.5, 3.6), 300)})
    assert list(table.index) == ["a", "b"]
    assert table.loc["a", "gain over bigram 512-1023"] == pytest.approx(0.4)
    assert table.loc["b", "gain over bigram 0-255"] == pytest.approx(1.4)
    assert table.loc["b", "bits/byte 256-511"] == 2.5 and table.loc["b", "steps"] == 300


def test_a_standin_trains_on_its_own_thread_count_whatever_the_setting(monkeypatch):
    """Inside a replica running beside another (NORMLIMITS_THREADS=1), the stand-in still trains
    on TRAINING_THREADS threads, as every cached one was: its weights depend on the count."""
    from normlimits.model.corpus import load_corpus

    seen = {}

    def fake_training(model, train_ids, phases, **kwargs):
        from normlimits.core.settings import configure_torch

        configure_torch()                           # as the real loop does first
        seen["threads"] = torch.get_num_threads()
        return standin.TrainingLog()

    monkeypatch.setenv("NORMLIMITS_THREADS", "1")
    monkeypatch.setattr(standin, "train_language_model", fake_training)
    monkeypatch.setattr(standin, "evaluate_standin", lambda model, train, held: {})
    torch.set_num_threads(1)
    _, report = standin.train_standin(load_corpus())
    assert seen["threads"] == report["threads"] == standin.TRAINING_THREADS == 2
    assert torch.get_num_threads() == 1
