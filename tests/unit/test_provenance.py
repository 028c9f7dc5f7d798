"""The provenance block (normlimits.audit.provenance): hashes, versions, git state, the model's files,
the tokenizer and the windows."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import SHARED_CORPUS, make_tiny_gpt2
from normlimits.audit import provenance as P
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE, LoadedModel, byte_encode

ROOT = Path(__file__).resolve().parents[2]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _loaded(model, name: str, kind: str = "bytes (UTF-8)") -> LoadedModel:
    return LoadedModel(model=model, name=name, source="test", encode=byte_encode,
                       tokenizer_kind=kind, is_paper_model=False)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny GPT-2 saved with save_pretrained, and the same model loaded back from it."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("saved")
    make_tiny_gpt2().save_pretrained(folder)
    (folder / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    return folder, AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")


def test_canonical_json_and_the_results_hash():
    rows = [{"b": 1.0, "a": "é", "c": [None, True]}]
    assert P.canonical_json(rows) == '[{"a":"é","b":1.0,"c":[null,true]}]'.encode()
    assert P.results_sha256(rows) == hashlib.sha256(P.canonical_json(rows)).hexdigest()
    assert P.results_sha256([{"c": [None, True], "a": "é", "b": 1.0}]) == P.results_sha256(rows)
    nudged = [{**rows[0], "b": float(torch.nextafter(torch.tensor(1.0, dtype=torch.float64),
                                                    torch.tensor(2.0, dtype=torch.float64)))}]
    assert P.results_sha256(nudged) != P.results_sha256(rows), "one ulp changes the hash"
    with pytest.raises(ValueError):
        P.canonical_json([float("nan")])


def test_the_command_is_recorded_as_given_and_quoted():
    info = P.command_info(["--model", "my model", "--windows", "2"], "normlimits audit")
    assert info["command"] == ["normlimits", "audit", "--model", "my model", "--windows", "2"]
    assert info["command_line"] == "normlimits audit --model 'my model' --windows 2"


def test_project_version_names_this_checkouts_commit():
    found = P.project_version()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    if head.returncode != 0:
        pytest.skip("this copy of the project is not a git checkout")
    assert found["git_commit"] == head.stdout.strip() and isinstance(found["git_dirty"], bool)
    assert found["git"].startswith(f"commit {found['git_commit']}")
    assert found["version"] != "" and found["name"] == "normlimits"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.email=t@example.org", "-c", "user.name=t",
                    *args], check=True, capture_output=True)


def test_project_version_in_and_out_of_a_checkout(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    outside = tmp_path / "copy" / "normlimits"
    outside.mkdir(parents=True)
    assert P.project_version(outside)["git"] == P.NOT_A_CHECKOUT
    assert P.project_version(outside)["git_commit"] is None
    # an installed copy inside another repository is not this project's checkout
    other = tmp_path / "other"
    (other / "lib" / "normlimits").mkdir(parents=True)
    (other / "lib" / "normlimits" / "x.py").write_text("x = 1\n")
    _git(other, "init", "-q")
    _git(other, "add", ".")
    _git(other, "commit", "-q", "-m", "x")
    assert P.project_version(other / "lib" / "normlimits")["git"] == P.NOT_A_CHECKOUT
    # a checkout: the commit, then the same commit with uncommitted changes
    repo = tmp_path / "repo"
    package = repo / "src" / "normlimits"
    package.mkdir(parents=True)
    (package / "x.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "x")
    clean = P.project_version(package)
    assert clean["git_dirty"] is False and len(clean["git_commit"]) == 40
    assert clean["git"] == f"commit {clean['git_commit']}"
    (package / "x.py").write_text("x = 2\n")
    dirty = P.project_version(package)
    assert dirty["git_dirty"] is True and dirty["git"].endswith("with uncommitted changes")


def test_library_versions():
    from importlib import metadata

    found = P.library_versions(("torch", "transformers", "no-such-library-xyz"))
    assert found == {"torch": metadata.version("torch"), "transformers": metadata.version("transformers"),
                     "no-such-library-xyz": None}
    assert set(P.LIBRARIES) <= set(P.environment()["libraries"])


def test_placement_info_on_the_cpu(tiny_loaded):
    info = P.placement_info(tiny_loaded)
    assert info == {"device": "cpu", "device_name": None, "device_map": None, "dtype": "float32",
                    "attention_implementation": "eager"}


def test_model_source_of_a_folder_lists_every_file_with_its_sha256(saved):
    folder, model = saved
    source = P.model_source(_loaded(model, str(folder)))
    assert source["kind"] == "folder" and source["path"] == str(folder.resolve())
    files = {Path(f["name"]).name: f for f in source["files"]}
    assert set(files) == {"config.json", "model.safetensors"}
    for name, f in files.items():
        assert f["sha256"] == _sha(folder / name) and f["bytes"] == (folder / name).stat().st_size


def test_model_source_of_the_standins_random_weights_and_a_gguf_file(saved, tmp_path):
    from normlimits.model.load import GPT2_RANDOM, RANDOM_WEIGHTS_SEED

    folder, model = saved
    standin = P.model_source(_loaded(model, "standin"))
    assert standin["kind"] == "standin" and len(standin["files"]) == 2
    random = P.model_source(_loaded(make_tiny_gpt2(), GPT2_RANDOM))
    assert random == {"kind": "random", "setting": GPT2_RANDOM, "init_seed": RANDOM_WEIGHTS_SEED,
                      "files": []}
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(200)))
    source = P.model_source(_loaded(model, str(gguf)))
    assert source["kind"] == "gguf" and source["gguf"]["sha256"] == _sha(gguf)
    assert source["gguf"]["bytes"] == 204 and source["path"] == str(folder.resolve())
    assert {Path(f["name"]).name for f in source["files"]} == {"config.json", "model.safetensors"}


def test_model_source_of_a_hub_id_gives_the_revision_and_the_snapshot_files(tmp_path):
    """A hub model read from the Hugging Face cache (a cache laid out as the hub client does)."""
    from transformers import AutoModelForCausalLM

    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someone--tiny"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    make_tiny_gpt2().save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    model = AutoModelForCausalLM.from_pretrained("someone/tiny", cache_dir=tmp_path / "hub",
                                                 attn_implementation="eager")
    source = P.model_source(_loaded(model, "someone/tiny"), hub_cache=tmp_path / "hub")
    assert source["kind"] == "hub" and source["hub_id"] == "someone/tiny"
    assert source["revision"] == revision and Path(source["path"]) == snapshot
    assert {Path(f["name"]).name: f["sha256"] for f in source["files"]} == {
        "config.json": _sha(snapshot / "config.json"),
        "model.safetensors": _sha(snapshot / "model.safetensors")}


def test_tokenizer_info(saved, tmp_path):
    folder, model = saved
    assert P.tokenizer_info(_loaded(model, str(folder))) == {
        "kind": "bytes (UTF-8)", "vocab_size": 256, "model_vocab_size": 300}
    bpe = SHARED_CORPUS.parent / "gpt2-bpe"
    if not bpe.is_dir():
        pytest.skip("GPT-2's BPE files (../shared/data/gpt2-bpe) are absent")
    from transformers import GPT2Tokenizer

    vocab = json.loads((bpe / "encoder.json").read_text())
    merges = [tuple(line.split()) for line in (bpe / "vocab.bpe").read_text(encoding="utf-8")
              .splitlines()[1:] if line.strip()]
    GPT2Tokenizer(vocab=vocab, merges=merges).save_pretrained(tmp_path / "tok")
    model.name_or_path = str(tmp_path / "tok")
    assert P.tokenizer_info(_loaded(model, "x", kind="GPT2Tokenizer (BPE)"))["vocab_size"] == 50257
    model.name_or_path = str(tmp_path / "nothing-here")
    assert P.tokenizer_info(_loaded(model, "x", kind="GPT2Tokenizer (BPE)"))["vocab_size"] is None
    model.name_or_path = str(folder)


def test_window_positions_are_where_the_windows_were_cut(tiny_loaded):
    from normlimits.model.corpus import Corpus, corpus_tokens, token_windows

    text = "Well, Prince, so Genoa and Lucca are now just family estates. " * 40
    corpus = Corpus(text, hashlib.sha256(text.encode()).hexdigest(), "test text")
    found = P.window_positions(tiny_loaded, corpus, 32, 3)
    windows = token_windows(tiny_loaded, corpus, 32, 3)
    tokens = corpus_tokens(tiny_loaded, corpus)
    assert found["corpus_sha256"] == corpus.sha256 and found["corpus_tokens"] == len(tokens)
    assert found["length"] == 32 and len(found["starts"]) == 3 and found["starts"][0] == 0
    for start, window in zip(found["starts"], windows):
        assert torch.equal(tokens[start:start + 32], window)
