"""The whole book, built strictly on another family: a tiny random Llama made in the test.

The book runs on any supported family (README). This build points the model setting at a tiny
Llama folder (rotary positions, grouped-query attention, RMSNorm, SwiGLU, ``o_proj``), so a code
path that reaches into GPT-2's module names (``transformer.h``, ``c_attn``, ``c_proj``) or assumes
GPT-2's configuration fails here. It builds a copy of the book's pages in a temporary folder,
every chapter executed afresh (no execution cache shared with the main build, whose outputs must
not mix with this model's), with its own ledger and capture cache, two windows, and without the
replicas on the control models (the main build runs those). The architectures chapter surveys its
default list (the stand-ins and SmolLM2-135M, about 2.5 minutes): its prose pastes all three
models' numbers, so a survey of the tiny Llama alone fails the strict build (found in a CI run;
the chapter's handling of a shorter NORMLIMITS_ARCHITECTURES list is left for its own issue).
Random weights make the numbers
meaningless; what is tested is that every chapter executes and records its claims on this model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[2]
#: the pages the build needs (MathJax is linked, not copied: 24 MB)
BOOK_FILES = ("_config.yml", "_toc.yml", "book")


def tiny_llama_folder(folder: Path) -> Path:
    """A tiny random Llama saved with save_pretrained and the byte-tokenizer marker: 2 layers, 4
    query heads sharing 2 key/value heads of width 16, 1024 positions (the chapters' longest L)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from normlimits.model.pretrained import BYTE_TOKENIZER_FILE

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=260, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         bos_token_id=256, eos_token_id=257, pad_token_id=258)
    LlamaForCausalLM(config).save_pretrained(folder)
    (folder / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    return folder


def _copy_book(target: Path) -> Path:
    target.mkdir(parents=True)
    for name in BOOK_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("_mathjax"))
        else:
            shutil.copy2(source, target / name)
    mathjax = ROOT / "book" / "_mathjax"
    if not mathjax.is_dir():
        pytest.fail("book/_mathjax is missing: run `make book` (or `make test`) first, which "
                    "copies MathJax into the book", pytrace=False)
    (target / "book" / "_mathjax").symlink_to(mathjax, target_is_directory=True)
    return target


def test_the_whole_book_builds_strictly_on_a_tiny_llama(tmp_path):
    from normlimits.claims import ledger

    model = tiny_llama_folder(tmp_path / "tiny-llama")
    book = _copy_book(tmp_path / "book-copy")
    env = {**os.environ, "NORMLIMITS_MODEL": str(model), "NORMLIMITS_WINDOWS": "2",
           "NORMLIMITS_REPLICAS": "off", "NORMLIMITS_LEDGER_DIR": str(tmp_path / "ledger"),
           "NORMLIMITS_CAPTURE_CACHE": str(tmp_path / "captures"), "HF_HUB_OFFLINE": "1"}
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    start = time.perf_counter()
    result = subprocess.run([str(jupyter_book), "build", str(book), "--builder", "html", "-W", "-n",
                             "--keep-going"], cwd=book, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = ROOT / "_build" / "build-tiny-llama.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    assert result.returncode == 0, (f"the strict build on a tiny Llama failed (exit "
                                    f"{result.returncode}); log in {log}:\n"
                                    + (result.stdout + result.stderr)[-6000:])
    print(f"book built on a tiny Llama in {seconds:.0f} s")
    rows = ledger.read_ledger_json(book / "_build" / "ledger.json")
    own = [r for r in rows if str(model) in r["model"] or Path(r["model"].split(" (")[0]).name == model.name]
    chapters = {r["chapter"] for r in own}
    for chapter in ("vanishing", "distances", "separability", "gradients", "alternatives"):
        assert chapter in chapters, f"{chapter} recorded no verdict on the tiny Llama ({sorted(chapters)})"
    for row in rows:
        ledger.validate_row(row)
