"""The shared capture cache: same tensors as a fresh forward pass, one pass per window per build,
keyed by everything the captures depend on, damaged entries recomputed, dropped with the book's
execution cache."""

from __future__ import annotations

import hashlib
import warnings

import pytest
import torch

from normlimits.model import capture_cache as cc
from normlimits.book import execution_cache
from normlimits.model.capture_cache import cached_captures
from normlimits.model.capture import iter_captures
from normlimits.model.corpus import Corpus, token_windows

TEXT = "Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. " * 8


def _corpus(text: str = TEXT) -> Corpus:
    return Corpus(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), source="test")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "captures"
    monkeypatch.setenv(cc.CAPTURE_CACHE_ENV, str(folder))
    return folder


@pytest.fixture
def passes(monkeypatch):
    """Counts the forward passes the cache runs."""
    count = []
    original = cc.capture_window
    monkeypatch.setattr(cc, "capture_window", lambda loaded, ids: count.append(1) or original(loaded, ids))
    return count


def _same(a, b) -> bool:
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in cc.FIELDS)


def test_cached_captures_equal_fresh_ones_and_run_each_pass_once(tiny_loaded, cache_dir, passes):
    corpus = _corpus()
    first = list(cached_captures(tiny_loaded, corpus, 32, 3))
    assert len(passes) == 3
    again = list(cached_captures(tiny_loaded, corpus, 32, 3))
    assert len(passes) == 3, "the second chapter of a build runs no forward pass"
    fresh = list(iter_captures(tiny_loaded, token_windows(tiny_loaded, corpus, 32, 3)))
    assert all(_same(a, b) and _same(a, c) for a, b, c in zip(first, again, fresh))
    assert len(list(cache_dir.glob("*/window-*.safetensors"))) == 3
    assert again[0].queries.dtype == torch.float32, "stored as computed (float32), not rounded"


def test_a_reused_capture_lies_in_memory_as_a_computed_one(tiny_loaded, cache_dir):
    """Loaded tensors are copied into torch's allocator (contiguous, 64-byte aligned) like a
    computed capture: safetensors leaves them at offsets that vary from load to load, and a CPU
    kernel's last bits can depend on where its input lies (a float64 product, as the metrics
    compute, on the same numbers 8 bytes off gave other bits on the machines of 2026-12-04; on
    others, e.g. 2026-12-05's, the kernel is alignment-blind: a property of the processor and the
    BLAS build, so it is not asserted here). What is asserted is the layout itself."""
    corpus = _corpus()
    list(cached_captures(tiny_loaded, corpus, 32, 2))
    for capture in cached_captures(tiny_loaded, corpus, 32, 2):
        for name in cc.FIELDS:
            tensor = getattr(capture, name)
            assert tensor.is_contiguous() and tensor.data_ptr() % 64 == 0, (name, tensor.data_ptr() % 64)


def test_the_key_follows_weights_scales_corpus_length_and_count(tiny_loaded, cache_dir):
    corpus = _corpus()
    base = cc.capture_key(tiny_loaded, corpus, 32, 2)
    assert cc.capture_key(tiny_loaded, corpus, 32, 2) == base
    assert cc.capture_key(tiny_loaded, corpus, 16, 2) != base
    assert cc.capture_key(tiny_loaded, corpus, 32, 3) != base
    assert cc.capture_key(tiny_loaded, _corpus(TEXT + "!"), 32, 2) != base
    assert cc.capture_key(tiny_loaded, corpus, 32, 2, 0.0) == base and "shift" not in base
    assert cc.capture_key(tiny_loaded, corpus, 32, 2, 0.5) == {**base, "shift": 0.5}
    with torch.no_grad():
        tiny_loaded.model.transformer.h[1].mlp.c_fc.weight[0, 0] += 1e-3
    assert cc.capture_key(tiny_loaded, corpus, 32, 2)["model_sha256"] != base["model_sha256"]
    tiny_loaded.model.transformer.h[0].attn.scaling *= 0.5          # temperature, not weights
    assert cc.capture_key(tiny_loaded, corpus, 32, 2)["scales"] != base["scales"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "other window"])
def test_a_damaged_entry_is_recomputed_with_a_warning(tiny_loaded, cache_dir, passes, damage):
    corpus = _corpus()
    first = list(cached_captures(tiny_loaded, corpus, 32, 2))
    [entry] = list(cache_dir.iterdir())
    target = entry / "window-0000.safetensors"
    data = target.read_bytes()
    other = (entry / "window-0001.safetensors").read_bytes()
    target.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"\x07" * 999, "empty": b"",
                        "other window": other}[damage])
    with pytest.warns(UserWarning, match="window-0000.safetensors"):
        again = list(cached_captures(tiny_loaded, corpus, 32, 2))
    assert len(passes) == 3 and all(_same(a, b) for a, b in zip(first, again))
    assert target.read_bytes() == data, "the damaged file is replaced"


def test_an_unwritable_cache_still_gives_correct_captures(tiny_loaded, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(cc.CAPTURE_CACHE_ENV, str(blocker / "captures"))
    corpus = _corpus()
    with pytest.warns(UserWarning, match="without caching"):
        got = list(cached_captures(tiny_loaded, corpus, 32, 2))
    fresh = list(iter_captures(tiny_loaded, token_windows(tiny_loaded, corpus, 32, 2)))
    assert all(_same(a, b) for a, b in zip(got, fresh))


def test_off_caches_nothing(tiny_loaded, tmp_path, monkeypatch, passes):
    monkeypatch.setenv(cc.CAPTURE_CACHE_ENV, "off")
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(cached_captures(tiny_loaded, _corpus(), 32, 2))
        list(cached_captures(tiny_loaded, _corpus(), 32, 2))
    assert len(passes) == 4 and not list(tmp_path.rglob("*.safetensors"))


def test_default_location_is_the_books_build_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(cc.CAPTURE_CACHE_ENV, raising=False)
    (tmp_path / "_config.yml").write_text("title: t\n")
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    (tmp_path / "book").mkdir()
    monkeypatch.chdir(tmp_path / "book")                 # chapters execute in book/
    assert cc.capture_cache_dir() == tmp_path / "_build" / "captures"
    monkeypatch.chdir(tmp_path.parent)
    assert cc.capture_cache_dir() is None


def test_dropped_together_with_the_execution_cache(tmp_path):
    """``make book``'s first step drops _build/captures whenever the chapters' inputs change;
    the cache's own location setting is not such an input."""
    assert cc.BUILD_SUBDIR in execution_cache.DERIVED
    build = tmp_path / "_build"
    execution_cache.refresh(build, {"settings": {"NORMLIMITS_MODEL": "standin"}})
    (build / cc.BUILD_SUBDIR / "abc").mkdir(parents=True)
    assert execution_cache.refresh(build, {"settings": {"NORMLIMITS_MODEL": "standin"}}) is None
    assert (build / cc.BUILD_SUBDIR / "abc").is_dir(), "kept while nothing changed"
    reason = execution_cache.refresh(build, {"settings": {"NORMLIMITS_MODEL": "gpt2-random"}})
    assert reason and not (build / cc.BUILD_SUBDIR).exists()
    env = {"NORMLIMITS_MODEL": "standin", cc.CAPTURE_CACHE_ENV: "/elsewhere"}
    assert execution_cache.inputs(env)["settings"] == {"NORMLIMITS_MODEL": "standin"}


def test_kv_repeat_finds_the_largest_exact_group_of_equal_neighbouring_heads():
    g = torch.Generator().manual_seed(0)
    kv = torch.randn(2, 3, 5, 4, generator=g)                       # [layers, KV, L, d]
    grouped = kv.repeat_interleave(4, dim=-3)                         # 12 query heads
    assert cc.kv_repeat(grouped, grouped.clone()) == 4
    assert cc.kv_repeat(kv, kv) == 1, "distinct heads: no group"
    tiled = kv.repeat(1, 2, 1, 1)                                     # heads 0,1,2,0,1,2: not neighbours
    assert cc.kv_repeat(tiled, tiled) == 1
    nudged = grouped.clone()
    nudged[1, 5, 2, 3] = torch.nextafter(nudged[1, 5, 2, 3], torch.tensor(9.0))
    assert cc.kv_repeat(nudged, grouped) == 1, "one bit off in head 5: no group holds"
    nudged[1, 4, 2, 3] = nudged[1, 5, 2, 3]
    assert cc.kv_repeat(nudged, grouped) == 2, "heads 4 and 5 now differ from 6 and 7 alike"
    assert cc.kv_repeat(grouped, kv.repeat_interleave(2, dim=-3).repeat_interleave(2, dim=-3)) == 4
    assert cc.kv_repeat(grouped, torch.randn(2, 12, 5, 4, generator=g)) == 1, "values decide too"


def test_grouped_query_captures_are_stored_once_per_group_and_served_bit_for_bit(cache_dir, passes):
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from normlimits.model.pretrained import LoadedModel, byte_encode

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=257, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=64,
                                         attn_implementation="eager")).eval()
    loaded = LoadedModel(model=model, name="tiny-llama", source="test", encode=byte_encode,
                         tokenizer_kind="bytes", is_paper_model=False)
    corpus = _corpus()
    first = list(cached_captures(loaded, corpus, 32, 2))
    again = list(cached_captures(loaded, corpus, 32, 2))
    fresh = list(iter_captures(loaded, token_windows(loaded, corpus, 32, 2)))
    assert len(passes) == 2, "the second reading came from the cache"
    assert all(_same(a, b) and _same(a, c) for a, b, c in zip(first, again, fresh))
    assert again[0].keys.shape[-3] == 4 and again[0].keys.is_contiguous()
    stored = load_file(next(cache_dir.glob("*/window-0000.safetensors")))
    assert stored["keys"].shape[-3] == stored["values"].shape[-3] == 2
    assert int(stored["kv_repeat"]) == 2 and stored["queries"].shape[-3] == 4


def test_a_new_entry_drops_the_entries_of_other_package_digests(tiny_loaded, cache_dir, monkeypatch, passes):
    """Entries keyed by another package digest can never be served again: writing a new entry
    deletes them. The current package's other entries, and folders without a readable key, stay;
    reading an existing entry deletes nothing."""
    corpus = _corpus()
    monkeypatch.setattr(cc, "package_digest", lambda: "old")
    list(cached_captures(tiny_loaded, corpus, 32, 2))
    (old,) = list(cache_dir.iterdir())
    foreign = cache_dir / "not-an-entry"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("kept")
    monkeypatch.setattr(cc, "package_digest", lambda: "new")
    list(cached_captures(tiny_loaded, corpus, 32, 1))
    list(cached_captures(tiny_loaded, corpus, 32, 2))
    assert not old.exists(), "the old package's entry is gone"
    assert foreign.is_dir() and len([d for d in cache_dir.iterdir() if d != foreign]) == 2
    assert len(passes) == 2 + 1 + 2
    list(cached_captures(tiny_loaded, corpus, 32, 2))
    assert len(passes) == 5 and len(list(cache_dir.iterdir())) == 3, "a reading prunes nothing"
    assert cc.prune_other_packages(cache_dir / "missing", "new") == []
