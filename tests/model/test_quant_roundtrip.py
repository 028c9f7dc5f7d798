"""The 4-bit round trip: the reference file's types by role, which tensor gets which type, the
round trip itself against gguf's quantiser called directly, the comparison of both copies through
the audit's yardsticks, its cache, and the tables the stand-in page shows."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from conftest import make_tiny_gpt2
from normlimits.audit import quant_roundtrip as Q
from normlimits.core.cache import CacheError
from normlimits.model.corpus import Corpus
from normlimits.model.pretrained import LoadedModel, byte_decode, byte_encode

TEXT = ("Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. " * 60)
CORPUS = Corpus(TEXT, hashlib.sha256(TEXT.encode()).hexdigest(), "test text")
LENGTH = 64


def _gguf(path, tensors: dict):
    """A GGUF file at ``path`` holding ``tensors`` (name -> (float32 array, type name))."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    writer = GGUFWriter(str(path), "llama")
    # metadata of every kind the header reader must skip (strings, arrays of strings and numbers)
    writer.add_string("general.name", "test model")
    writer.add_uint32("llama.block_count", 1)
    writer.add_float32("llama.rope.freq_base", 1e5)
    writer.add_bool("tokenizer.ggml.add_bos_token", True)
    writer.add_int64("test.int64", -3)
    writer.add_array("tokenizer.ggml.tokens", ["a", "bc", "déf", ""] * 50)
    writer.add_array("tokenizer.ggml.scores", [0.5, -1.0] * 20)
    writer.add_array("tokenizer.ggml.token_type", [1, 2, 3])
    for name, (array, qtype) in tensors.items():
        if qtype == "F32":
            writer.add_tensor(name, array.astype(np.float32))
        else:
            kind = GGMLQuantizationType[qtype]
            writer.add_tensor(name, quantize(array.astype(np.float32), kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _plan(**kw) -> Q.TypePlan:
    fields = dict(matrices="Q4_1", token_embedding="Q8_0", output=None, vectors=("F32",),
                  source="test.gguf", tensors=4)
    return Q.TypePlan(**{**fields, **kw})


def _round_trip(array: np.ndarray, qtype: str) -> np.ndarray:
    """gguf's quantiser called directly: blocks along the last axis."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    kind = GGMLQuantizationType[qtype]
    return dequantize(quantize(np.ascontiguousarray(array, dtype=np.float32), kind), kind)


# ------------------------------------------------------------------------------ reference plan
def test_the_plan_is_read_from_the_files_own_tensor_types(tmp_path):
    rng = np.random.default_rng(0)
    path = _gguf(tmp_path / "tied.gguf", {
        "token_embd.weight": (rng.normal(size=(8, 64)), "Q8_0"),
        "blk.0.attn_q.weight": (rng.normal(size=(64, 64)), "Q4_1"),
        "blk.0.ffn_down.weight": (rng.normal(size=(64, 128)), "Q4_1"),
        "blk.0.attn_norm.weight": (np.ones(64), "F32")})
    plan = Q.reference_plan(path)
    assert (plan.matrices, plan.token_embedding, plan.output, plan.vectors) == ("Q4_1", "Q8_0", None, ("F32",))
    assert plan.tied and plan.tensors == 4 and plan.source == "tied.gguf"
    untied = _gguf(tmp_path / "untied.gguf", {
        "token_embd.weight": (rng.normal(size=(8, 64)), "Q4_0"),
        "output.weight": (rng.normal(size=(8, 64)), "Q8_0"),
        "blk.0.attn_q.weight": (rng.normal(size=(64, 64)), "Q4_0")})
    plan = Q.reference_plan(untied)
    assert (plan.matrices, plan.token_embedding, plan.output, plan.tied) == ("Q4_0", "Q4_0", "Q8_0", False)


def test_a_mixed_or_unusable_reference_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    mixed = _gguf(tmp_path / "mixed.gguf", {
        "token_embd.weight": (rng.normal(size=(8, 64)), "Q8_0"),
        "blk.0.attn_q.weight": (rng.normal(size=(64, 64)), "Q4_1"),
        "blk.0.ffn_down.weight": (rng.normal(size=(64, 64)), "Q8_0")})
    with pytest.raises(Q.RoundTripError, match=r"\['Q4_1', 'Q8_0'\], not one type"):
        Q.reference_plan(mixed)
    no_embedding = _gguf(tmp_path / "noemb.gguf", {"blk.0.attn_q.weight": (rng.normal(size=(64, 64)), "Q4_1")})
    with pytest.raises(Q.RoundTripError, match="no token_embd.weight"):
        Q.reference_plan(no_embedding)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(Q.RoundTripError, match="junk.gguf is not a readable GGUF file.*magic"):
        Q.reference_plan(junk)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(mixed.read_bytes()[:600])
    with pytest.raises(Q.RoundTripError, match="cut.gguf is not a readable GGUF file"):
        Q.reference_plan(cut)


def test_the_header_reader_agrees_with_ggufs_reader(tmp_path):
    from gguf import GGUFReader

    rng = np.random.default_rng(1)
    path = _gguf(tmp_path / "m.gguf", {
        "token_embd.weight": (rng.normal(size=(8, 64)), "Q8_0"),
        "blk.0.attn_k.weight": (rng.normal(size=(32, 64)), "Q4_1"),
        "blk.0.ffn_up.weight": (rng.normal(size=(96, 64)), "Q4_0"),
        "blk.0.ffn_norm.weight": (np.ones(64), "F32")})
    expected = [(t.name, len(t.shape), t.tensor_type.name) for t in GGUFReader(str(path)).tensors]
    assert Q.gguf_tensor_types(path) == expected
    assert [t[2] for t in expected] == ["Q8_0", "Q4_1", "Q4_0", "F32"]


def test_the_shipped_file_is_q4_1_with_an_8_bit_tied_embedding():
    """What the page's plan mirrors, read from the file the book's real model comes from."""
    from normlimits.model.gguf import GGUFError

    try:
        plan = Q.reference_plan()
    except GGUFError as exc:
        pytest.skip(f"the shipped SmolLM2 file is not installed: {exc}")
    assert (plan.matrices, plan.token_embedding, plan.tied, plan.vectors) == ("Q4_1", "Q8_0", True, ("F32",))
    assert plan.tensors == 272


# ------------------------------------------------------------------------------ which type where
def test_gpt2_types_conv1d_transposed_embedding_8_bit_vectors_and_positions_kept():
    model = make_tiny_gpt2(n_embd=32, n_layer=2)
    types = Q.tensor_types(model, _plan())
    inputs = model.get_input_embeddings().weight
    names = {name: p for name, p in model.named_parameters()}
    for name, spec in types.items():
        param = names[name]
        if param is inputs:
            assert (spec.qtype, spec.transpose, spec.role) == ("Q8_0", False, "token embedding")
        elif param.ndim == 1:
            assert (spec.qtype, spec.role) == ("F32", "vector")
        elif spec.role == "position table":
            assert spec.qtype == "F32" and param.shape == (64, 32)
        else:
            assert (spec.qtype, spec.transpose, spec.role) == ("Q4_1", True, "matrix"), name
    assert sum(s.role == "matrix" for s in types.values()) == 4 * 2
    assert len({s.kind for s in types.values() if s.role == "matrix"}) == 4, "layers share a kind"
    assert all("*" in s.kind for s in types.values() if s.role == "matrix")


def _tiny_llama(tied=True, hidden=32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=hidden, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, max_position_embeddings=128,
                                        tie_word_embeddings=tied, attn_implementation="eager")).eval()


def test_llama_types_linear_as_stored_and_tied_heads_must_match_the_reference():
    types = Q.tensor_types(_tiny_llama(), _plan())
    matrices = [s for s in types.values() if s.role == "matrix"]
    assert len(matrices) == 7 * 2 and all(s.qtype == "Q4_1" and not s.transpose for s in matrices)
    assert [s.role for s in types.values()].count("token embedding") == 1
    with pytest.raises(Q.RoundTripError, match="does not tie its output head.*test.gguf does:"):
        Q.tensor_types(_tiny_llama(tied=False), _plan())
    with pytest.raises(Q.RoundTripError, match="ties its output head.*does not:"):
        Q.tensor_types(_tiny_llama(), _plan(output="Q8_0"))
    untied = Q.tensor_types(_tiny_llama(tied=False), _plan(output="Q8_0", token_embedding="Q4_0"))
    roles = {s.role: s.qtype for s in untied.values()}
    assert roles["output head"] == "Q8_0" and roles["token embedding"] == "Q4_0"


def test_layouts_it_cannot_mirror_are_refused_naming_the_parameter():
    with pytest.raises(Q.RoundTripError, match="input dimension 48 is not a multiple of Q4_1's block of 32"):
        Q.tensor_types(make_tiny_gpt2(n_embd=48, n_head=4), _plan(token_embedding="Q4_1"))
    model = make_tiny_gpt2(n_embd=32)
    model.register_parameter("extra", torch.nn.Parameter(torch.zeros(2, 32)))
    with pytest.raises(Q.RoundTripError, match="extra: a \\(2, 32\\) parameter of a GPT2LMHeadModel"):
        Q.tensor_types(model, _plan())


# ------------------------------------------------------------------------------ the round trip
def test_round_trip_is_ggufs_quantiser_along_the_input_dimension():
    model = make_tiny_gpt2(n_embd=32, n_layer=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    types = Q.tensor_types(model, _plan())
    clone, records = Q.round_trip_weights(model, types)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), f"{name}: the original model must not change"
    params = dict(clone.named_parameters())
    old = dict(model.named_parameters())
    for name, spec in types.items():
        w = old[name].detach().numpy()
        got = params[name].detach().numpy()
        if spec.qtype == "F32":
            assert np.array_equal(got, w), name
        elif spec.transpose:
            assert np.array_equal(got, _round_trip(w.T, spec.qtype).T), name
            assert not np.array_equal(got, _round_trip(w, spec.qtype)), f"{name}: orientation matters"
        else:
            assert np.array_equal(got, _round_trip(w, spec.qtype)), name
    assert clone.get_output_embeddings().weight is clone.get_input_embeddings().weight, "ties kept"
    by_name = {r["name"]: r for r in records}
    assert set(by_name) == set(types)
    for name, r in by_name.items():
        diff = params[name].detach().double() - old[name].detach().double()
        assert r["error_sq"] == pytest.approx(float((diff ** 2).sum()), rel=1e-12, abs=1e-30)
        assert r["norm_sq"] == pytest.approx(float((old[name].detach().double() ** 2).sum()), rel=1e-12)
        assert (r["error_sq"] > 0) == (types[name].qtype != "F32"), name


def test_blocks_run_along_the_input_features_of_a_conv1d():
    """A Conv1D weight is [in, out]: blow up one output's weights, and only that output's blocks
    change; every other output column round-trips exactly as before."""
    model = make_tiny_gpt2(n_embd=32, n_layer=1)
    types = Q.tensor_types(model, _plan())
    name = next(n for n, s in types.items() if s.role == "matrix")
    _, base = Q.round_trip_weights(model, types)
    first = dict(Q.round_trip_weights(model, types)[0].named_parameters())[name].detach().clone()
    with torch.no_grad():
        dict(model.named_parameters())[name][:, 3] *= 1000.0
    second = dict(Q.round_trip_weights(model, types)[0].named_parameters())[name].detach()
    others = [j for j in range(second.shape[1]) if j != 3]
    assert torch.equal(second[:, others], first[:, others])
    assert not torch.allclose(second[:, 3], first[:, 3] * 1000.0, rtol=0, atol=0)


def test_weight_error_table_per_kind():
    model = make_tiny_gpt2(n_embd=32, n_layer=2)
    _, records = Q.round_trip_weights(model, Q.tensor_types(model, _plan()))
    table = Q.weight_error_table(records)
    kept = [k for k in table.index if k.startswith("not quantised")]
    assert len(kept) == 1 and table.loc[kept[0], "relative error"] == 0.0
    assert table.loc[kept[0], "parameters"] == sum(r["numel"] for r in records if r["qtype"] == "F32")
    for kind in table.index.drop(kept):
        chosen = [r for r in records if r["kind"] == kind]
        expected = np.sqrt(sum(r["error_sq"] for r in chosen) / sum(r["norm_sq"] for r in chosen))
        assert table.loc[kind, "relative error"] == pytest.approx(expected)
        assert table.loc[kind, "tensors"] == len(chosen)
    q4 = table[table["type"] == "Q4_1"]["relative error"]
    q8 = table[table["type"] == "Q8_0"]["relative error"]
    assert len(q4) == 4 and len(q8) == 1
    assert q8.max() < q4.min(), "8 bits round off less than 4"


# ------------------------------------------------------------------------------ both copies compared
@pytest.fixture(scope="module")
def tiny():
    return LoadedModel(model=make_tiny_gpt2(n_embd=32, n_positions=LENGTH), name="tiny",
                       source="test", encode=byte_encode, decode=byte_decode,
                       tokenizer_kind="bytes", is_paper_model=False)


@pytest.fixture(scope="module")
def capture_cache(tmp_path_factory):
    """This module's forward passes go to a capture cache of its own (not the book's)."""
    cache = tmp_path_factory.mktemp("captures")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMLIMITS_CAPTURE_CACHE", str(cache))
        yield cache


@pytest.fixture(scope="module")
def compared(tiny, capture_cache):
    return Q.compare(tiny, CORPUS, 1, _plan(), texts=[TEXT[:300], TEXT[500:900]]), capture_cache


def test_compare_runs_the_audits_yardsticks_on_both_copies(tiny, compared):
    from normlimits.audit import architectures as A
    from normlimits.model import heldout

    result, _ = compared
    assert json.loads(json.dumps(result)) == result, "the result is JSON-able as cached"
    assert result["models"]["original"]["name"] == "tiny"
    assert result["models"]["rounded"]["name"] == "tiny-q4_1"
    assert result["length"] == LENGTH and result["windows"] == 1
    expected = [c for claims in A.YARDSTICK_CLAIMS.values() for c in claims]
    for copy in ("original", "rounded"):
        assert [r["id"] for r in result["rows"][copy]] == expected
        assert all(r["model"] == result["models"][copy]["label"] for r in result["rows"][copy])
    # the original's rows are the survey's rows of the model alone (same windows, same rows)
    (alone,) = A.survey(["tiny"], CORPUS, 1, loader=lambda name: tiny)
    for a, b in zip(alone.rows(), result["rows"]["original"]):
        assert a["verdict"] == b["verdict"]
        assert [c["value"] for c in a["criteria"]] == [c["value"] for c in b["criteria"]]
    # the rounded copy's statistics really come from other weights
    values = lambda copy: [c["value"] for r in result["rows"][copy] for c in r["criteria"]]
    assert values("original") != values("rounded")
    texts = [TEXT[:300], TEXT[500:900]]
    assert result["bits_per_byte"]["original"]["per_byte"] == pytest.approx(
        heldout.bits_per_byte(tiny, texts).per_byte)
    assert result["bits_per_byte"]["original"]["bytes"] == result["bits_per_byte"]["rounded"]["bytes"]
    assert result["bits_per_byte"]["bigram"]["per_byte"] == pytest.approx(
        heldout.bigram_bits_per_byte(CORPUS.text, texts).per_byte)
    assert result["bits_per_byte"]["original"]["per_byte"] != result["bits_per_byte"]["rounded"]["per_byte"]


def test_the_copies_do_not_share_capture_cache_entries(compared):
    _, cache = compared
    keys = [json.loads(p.read_text()) for p in cache.glob("*/key.json")]
    assert sorted(k["model"] for k in keys) == ["tiny", "tiny-q4_1"]
    assert keys[0]["model_sha256"] != keys[1]["model_sha256"]


def test_statistic_table_and_summary_of_a_real_comparison(compared):
    result, _ = compared
    table = Q.statistic_table(result)
    rows = result["rows"]
    assert len(table) == sum(len(r["criteria"]) for r in rows["original"])
    for a, b in zip(rows["original"], rows["rounded"]):
        for ca, cb in zip(a["criteria"], b["criteria"]):
            line = table.loc[(a["id"], ca["key"])]
            assert line["verdict (original)"] == a["verdict"] and line["verdict (rounded)"] == b["verdict"]
            if ca["value"] is not None and cb["value"] is not None:
                assert line["difference"] == pytest.approx(cb["value"] - ca["value"])
    numbers = Q.summary(result)
    assert numbers["claims_compared"] == 7 and numbers["criteria_compared"] == len(table)
    assert numbers["bpb_change"] == pytest.approx(numbers["bpb_rounded"] - numbers["bpb_original"])
    assert 0 < numbers["embedding_error"] < numbers["matrix_error"] < 0.2
    assert numbers["verdicts_changed"] == len(Q.verdict_changes(result))


def _row(claim, verdict, criteria):
    return {"id": claim, "verdict": verdict, "rule": "a test rule", "headline": criteria[0][0],
            "outcomes": [["all", "confirmed"], ["else", "refuted"]],
            "criteria": [{"key": k, "statistic": f"stat {k}", "statistic_text": f"stat {k}",
                          "op": "between" if isinstance(t, list) else "<=", "threshold": t,
                          "kind": "measurement", "value": v, "passed": p}
                         for k, t, v, p in criteria]}


def test_tables_on_a_hand_made_result():
    result = {"plan": _plan().describe(), "weights": [
        {"role": "matrix", "error_sq": 9.0, "norm_sq": 100.0},
        {"role": "matrix", "error_sq": 7.0, "norm_sq": 300.0},
        {"role": "token embedding", "error_sq": 1.0, "norm_sq": 400.0}],
        "bits_per_byte": {"original": {"per_byte": 3.0}, "rounded": {"per_byte": 3.25}},
        "rows": {"original": [_row("A", "confirmed", [("x", 0.5, 0.4, True), ("y", [0, 1], None, None)]),
                              _row("B", "refuted", [("z", 1, 2.0, False)])],
                 "rounded": [_row("A", "refuted", [("x", 0.5, 0.6, False), ("y", [0, 1], 0.3, True)]),
                             _row("B", "refuted", [("z", 1, 2.5, False)])]}}
    table = Q.statistic_table(result)
    assert table.loc[("A", "x"), "difference"] == pytest.approx(0.2)
    assert np.isnan(table.loc[("A", "y"), "difference"])
    assert table.loc[("A", "y"), "rule"] == "in [0, 1]" and table.loc[("B", "z"), "rule"] == "≤ 1"
    assert table.loc[("A", "x"), "margin"] == pytest.approx(0.1)
    assert table.loc[("B", "z"), "margin"] == pytest.approx(1.0) and np.isnan(table.loc[("A", "y"), "margin"])
    assert Q.verdict_changes(result) == ["A: confirmed -> refuted"]
    numbers = Q.summary(result)
    assert numbers["matrix_error"] == pytest.approx(np.sqrt(16 / 400))
    assert numbers["embedding_error"] == pytest.approx(0.05)
    assert numbers["bpb_change"] == pytest.approx(0.25)
    assert numbers["verdicts_changed"] == 1 and numbers["verdict_changes"] == "A: confirmed -> refuted"
    assert numbers["criteria_flipped"] == 2
    assert numbers["largest_relative_move"] == pytest.approx(0.5) and numbers["largest_move_at"] == "A x"
    # A x moved 0.2 across a margin of 0.1 (ratio 0.5); B z moved 0.5 within a margin of 1 (ratio 2)
    assert numbers["closest_ratio"] == pytest.approx(0.5) and numbers["closest_at"] == "A x"
    result["rows"]["rounded"] = result["rows"]["rounded"][::-1]
    with pytest.raises(ValueError, match="different claims"):
        Q.statistic_table(result)


# ------------------------------------------------------------------------------ the cache
def test_the_study_is_cached_by_its_key_and_damage_is_named(isolated_cache, monkeypatch):
    import copy

    tiny = LoadedModel(model=make_tiny_gpt2(n_embd=32, n_positions=LENGTH), name="tiny",
                       source="test", encode=byte_encode, tokenizer_kind="bytes",
                       is_paper_model=False)
    calls = []

    def fake(loaded, corpus, window_count, plan, **kw):
        calls.append(window_count)
        return {"windows": window_count}

    monkeypatch.setattr(Q, "compare", fake)
    result, seconds = Q.round_trip_study(tiny, CORPUS, 2, _plan())
    assert result == {"windows": 2} and seconds > 0 and calls == [2]
    again, seconds = Q.round_trip_study(tiny, CORPUS, 2, _plan())
    assert again == result and seconds == 0.0 and calls == [2], "the second call reads the cache"
    Q.round_trip_study(tiny, CORPUS, 3, _plan())
    Q.round_trip_study(tiny, CORPUS, 2, _plan(token_embedding="Q4_1"))
    assert calls == [2, 3, 2], "another window count or plan is another entry"
    files = sorted((isolated_cache / Q.CACHE_KIND).glob("*.json"))
    assert len(files) == 3
    other = copy.deepcopy(tiny)
    with torch.no_grad():       # other weights: another entry
        next(other.model.parameters()).add_(1.0)
    Q.round_trip_study(other, CORPUS, 2, _plan())
    assert calls == [2, 3, 2, 2]
    path = next(p for p in files if json.loads(p.read_text())["key"]["windows"] == 3)
    entry = json.loads(path.read_text())
    entry["key"]["windows"] = 4
    path.write_text(json.dumps(entry))
    with pytest.raises(CacheError, match=f"{path}.*delete it to compute it again"):
        Q.round_trip_study(tiny, CORPUS, 3, _plan())
    path.write_text('{"key": ')
    with pytest.raises(CacheError, match=f"{path} is damaged"):
        Q.round_trip_study(tiny, CORPUS, 3, _plan())
