"""Shared test set-up: offline hub, the shared corpus, a tiny GPT-2, and book tests run last."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED_CORPUS = ROOT.parent / "shared" / "data" / "war-and-peace.txt"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if not os.environ.get("NORMLIMITS_CORPUS") and SHARED_CORPUS.is_file():
    os.environ["NORMLIMITS_CORPUS"] = str(SHARED_CORPUS)


def pytest_collection_modifyitems(config, items):
    """Unit tests first; tests that build or browse the book last (they take minutes)."""
    def slow(item):
        return 1 if (item.get_closest_marker("book") or item.get_closest_marker("browser")) else 0

    items.sort(key=slow)


def make_tiny_gpt2(n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab=300, seed=0):
    """A tiny randomly initialised GPT-2 (eager attention), for fast structural tests."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_positions=n_positions,
                        vocab_size=vocab, bos_token_id=vocab - 1, eos_token_id=vocab - 1,
                        attn_implementation="eager")
    return GPT2LMHeadModel(config).eval()


def with_value(doc, path, value):
    """A deep copy of the JSON document ``doc`` with the field at ``path`` (keys and indices) set
    to ``value`` (the schema tests change one field's type with it)."""
    import copy

    changed = copy.deepcopy(doc)
    parent = changed
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return changed


@pytest.fixture
def tiny_loaded():
    """A tiny GPT-2 wrapped as a LoadedModel with the byte tokenizer."""
    from normlimits.model.pretrained import LoadedModel, byte_encode

    return LoadedModel(model=make_tiny_gpt2(), name="tiny", source="test", encode=byte_encode,
                       tokenizer_kind="bytes", is_paper_model=False)


@pytest.fixture
def saved_gpt2(tmp_path):
    """A tiny GPT-2 saved with save_pretrained and the byte tokenizer marker; returns the folder."""
    import json

    from normlimits.model.pretrained import BYTE_TOKENIZER_FILE

    make_tiny_gpt2().save_pretrained(tmp_path)
    (tmp_path / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    return tmp_path


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    """Point the project's cache at a temporary folder."""
    monkeypatch.setenv("NORMLIMITS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def built_book():
    """Build the book strictly, once per session, exactly as ``make book`` does; returns _build/.

    The build executes every chapter (on the stand-in offline); any failing cell or any Sphinx
    warning (nitpicky references included) fails it.
    """
    import subprocess
    import time

    start = time.perf_counter()
    result = subprocess.run(["make", "--no-print-directory", "book"], cwd=ROOT, capture_output=True, text=True)
    log = ROOT / "_build" / "build.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    if result.returncode != 0:
        pytest.fail(f"strict book build failed (exit {result.returncode}); full log in {log}:\n"
                    + (result.stdout + result.stderr)[-6000:], pytrace=False)
    print(f"book built in {time.perf_counter() - start:.0f} s")
    return ROOT / "_build"
