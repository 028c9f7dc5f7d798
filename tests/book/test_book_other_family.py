"""The whole book, built strictly on two other families: a tiny random Gemma 3 and a tiny Llama.

The book runs on any supported family (README). This build points the model setting at a tiny
Gemma 3 folder (QK-norm, one key/value head, sliding-window layers whose window is shorter than the
chapters' longest L beside a global layer) and replays the four paper chapters on a tiny Llama
folder (rotary positions, grouped-query attention with two key/value heads, RMSNorm, SwiGLU,
``o_proj``) through the replica mechanism, so a code path that reaches into GPT-2's module names
(``transformer.h``, ``c_attn``, ``c_proj``), assumes GPT-2's or Llama's configuration, or is blind
to sliding windows fails here. One build covers both families: the replicas of the tiny Llama cost
seconds, where a second whole build would cost the architectures chapter's surveys again. It builds
a copy of the book's pages in a temporary folder, every chapter executed afresh (no execution cache
shared with the main build, whose outputs must not mix with these models'), with its own ledger,
two windows, and without the replicas on the control models (the main build
runs those). The architectures chapter surveys the two tiny models alone
(``NORMLIMITS_ARCHITECTURES``), not the real families nor the stand-ins: the main build surveys
those, and surveying the real families again here cost about 550 of this build's 880 s
(2026-12-06) while checking nothing the main build does not; the stand-ins' surveys (their own and
their three other texts, which follow the first model surveyed) were most of the rest of the
chapter's 128 s. So the survey's own code runs on a Gemma 3 and a Llama here, and the chapter's
prose is built with every other model absent (it says "not surveyed" where their numbers would
be, and the architecture comparison records the reason it is not graded). Random weights make the
numbers meaningless; what is tested is that every chapter executes and records its claims on both
tiny models.
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


def tiny_gemma3_folder(folder: Path) -> Path:
    """A tiny random Gemma 3 saved with save_pretrained and the byte-tokenizer marker: a
    sliding-window layer of 256 keys, a global layer and another sliding one, 4 query heads sharing
    1 key/value head of width 16, 1024 positions (the chapters' longest L, four windows long)."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from normlimits.model.pretrained import BYTE_TOKENIZER_FILE

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=260, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                              query_pre_attn_scalar=16, max_position_embeddings=1024, sliding_window=256,
                              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                              bos_token_id=256, eos_token_id=257, pad_token_id=258)
    Gemma3ForCausalLM(config).save_pretrained(folder)
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


def _recorded_on(rows: list[dict], model: Path) -> set[str]:
    """The chapters with a row graded on ``model`` (a folder), as primary or as a replica."""
    def on(row):
        names = (row.get("model", ""), row.get("variant") or "")
        return any(str(model) in name or Path(name.split(" (")[0]).name == model.name for name in names)

    return {r["chapter"] for r in rows if on(r)}


def test_the_whole_book_builds_strictly_on_a_tiny_gemma3_with_a_tiny_llama_replica(tmp_path):
    from normlimits.claims import ledger

    gemma = tiny_gemma3_folder(tmp_path / "tiny-gemma3")
    llama = tiny_llama_folder(tmp_path / "tiny-llama")
    book = _copy_book(tmp_path / "book-copy")
    env = {**os.environ, "NORMLIMITS_MODEL": str(gemma), "NORMLIMITS_WINDOWS": "2",
           "NORMLIMITS_REPLICAS": str(llama), "NORMLIMITS_LEDGER_DIR": str(tmp_path / "ledger"),
           "NORMLIMITS_ARCHITECTURES": f"{gemma},{llama}",
           # the book's own capture cache: its entries are keyed by each model's weights, so the
           # tiny models' entries never mix with the main build's, and each of their windows is
           # captured once for every chapter (no real model or stand-in is captured here)
           "NORMLIMITS_CAPTURE_CACHE": str(ROOT / "_build" / "captures"), "HF_HUB_OFFLINE": "1"}
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    start = time.perf_counter()
    # as make book does: the chapters executed side by side into the execution cache, then Sphinx
    executed = subprocess.run([sys.executable, "-m", "normlimits", "execute-chapters"], cwd=book, env=env,
                              capture_output=True, text=True)
    result = executed if executed.returncode else subprocess.run(
        [str(jupyter_book), "build", str(book), "--builder", "html", "-W", "-n", "--keep-going"],
        cwd=book, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = ROOT / "_build" / "build-tiny-families.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text(executed.stdout + executed.stderr + "\n--- jupyter-book ---\n" + result.stdout
                   + "\n--- stderr ---\n" + result.stderr)
    assert result.returncode == 0, (f"the strict build on a tiny Gemma 3 and Llama failed (exit "
                                    f"{result.returncode}); log in {log}:\n"
                                    + (result.stdout + result.stderr)[-6000:])
    print(f"book built on a tiny Gemma 3 with a tiny Llama replica in {seconds:.0f} s")
    assert "Executing notebook" not in result.stdout + result.stderr, (
        f"Sphinx executed a chapter itself: the chapters executed ahead of it were not matched in "
        f"the execution cache (log in {log})")
    rows = ledger.read_ledger_json(book / "_build" / "ledger.json")
    on_gemma, on_llama = _recorded_on(rows, gemma), _recorded_on(rows, llama)
    for chapter in ("vanishing", "distances", "separability", "gradients", "alternatives", "architectures"):
        assert chapter in on_gemma, f"{chapter} recorded no verdict on the tiny Gemma 3 ({sorted(on_gemma)})"
    for chapter in ("vanishing", "distances", "separability", "gradients", "architectures"):
        assert chapter in on_llama, f"{chapter} recorded no verdict on the tiny Llama replica ({sorted(on_llama)})"
    # without the stand-ins the architecture comparison is not graded, and its row says why
    (arch,) = [r for r in rows if r["id"] == "ARCH" and not r.get("variant")]
    assert arch["verdict"] == "not testable" and "NORMLIMITS_ARCHITECTURES" in arch["reason"], arch
    for row in rows:
        ledger.validate_row(row)
