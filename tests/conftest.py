"""Shared test set-up: offline hub, the shared corpus, a tiny GPT-2, and book tests run last."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from normlimits.book import execution_cache

ROOT = Path(__file__).resolve().parents[1]
SHARED_CORPUS = ROOT.parent / "shared" / "data" / "war-and-peace.txt"

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def worker_threads(workers: int, cores: int | None) -> int:
    """torch threads for each of ``workers`` test processes sharing ``cores`` (at least 1): the
    cores split between them, so two workers on 2 cores do not run 4 threads that spin against
    each other (the unit tier took 181 s with 2 threads each and 127 s with 1, against 196 s in
    one process)."""
    return max(1, (cores or 1) // max(1, workers))


if os.environ.get("PYTEST_XDIST_WORKER"):      # one of `make test`'s parallel workers
    from normlimits.core.settings import THREADS_ENV, available_cores

    _share = worker_threads(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), available_cores())
    torch.set_num_threads(_share)
    os.environ.setdefault(THREADS_ENV, str(_share))     # the package's own setting, and children's
if not os.environ.get("NORMLIMITS_CORPUS") and SHARED_CORPUS.is_file():
    os.environ["NORMLIMITS_CORPUS"] = str(SHARED_CORPUS)


#: the test tiers, one folder each, in the order they run: unit (pure, seconds), model (loads or
#: trains a model, runs the audit end to end), book (builds, browses or prints the book)
TIERS = ("unit", "model", "book")


def tier_of(path: Path) -> str | None:
    """The tier folder a test file lives in (None outside ``tests/<tier>/``)."""
    parts = Path(path).resolve().relative_to(ROOT / "tests").parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_collection_modifyitems(config, items):
    """Tiers in order (unit, model, book); every test of ``tests/book`` carries the ``book`` marker,
    and a test marked ``book`` or ``browser`` elsewhere is a collection error (so ``make test-fast``,
    the unit folder, never builds the book)."""
    misplaced = []
    for item in items:
        tier = tier_of(item.path)
        if tier == "book":
            item.add_marker(pytest.mark.book)
        elif item.get_closest_marker("book") or item.get_closest_marker("browser"):
            misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError("tests that build or browse the book belong in tests/book: "
                                + ", ".join(misplaced))
    items.sort(key=lambda item: TIERS.index(tier_of(item.path) or "unit"))


#: the record of the inputs the book's executed chapters were computed from (``make book``'s first
#: step writes it; :mod:`normlimits.book.execution_cache`)
INPUTS_RECORD = ROOT / execution_cache.DEFAULT_BUILD / execution_cache.FINGERPRINT_FILE


def _inputs_record() -> str | None:
    try:
        return INPUTS_RECORD.read_text()
    except OSError:
        return None


#: the strict builds of this session (the fixture ``built_book``), whose ``make book`` writes the
#: record legitimately: a test or module during which one ran is not checked
BOOK_BUILDS = {"count": 0}


def _keeps_the_inputs_record(who: str):
    before, builds = _inputs_record(), BOOK_BUILDS["count"]
    yield
    after = _inputs_record()
    if before is not None and after != before and BOOK_BUILDS["count"] == builds:
        pytest.fail(f"{who} {'removed' if after is None else 'changed'} {INPUTS_RECORD}: the next make "
                    "book would execute every chapter again", pytrace=False)


@pytest.fixture(autouse=True)
def the_book_executes_once(request):
    """No test may remove or change the build's record of the chapters' inputs: without it, or
    with other inputs in it, the next ``make book`` (``make pdf``, the next ``make test``) drops
    every executed chapter and executes the whole book again (issue 51: after a full ``make test``
    the record was gone, so a second run was not warm). The test that does it errors here, named.
    The strict build's own ``make book`` (the session fixture ``built_book``) is not counted."""
    yield from _keeps_the_inputs_record(f"the test {request.node.nodeid}")


@pytest.fixture(autouse=True, scope="module")
def the_book_executes_once_per_module(request):
    """The same for a test module's own fixtures (``make pdf`` runs in one), which are set up
    before a test's and so escape :func:`the_book_executes_once`."""
    yield from _keeps_the_inputs_record(f"a fixture of {request.node.nodeid}")


def make_tiny_gpt2(n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab=300, seed=0):
    """A tiny randomly initialised GPT-2 (eager attention), for fast structural tests."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_positions=n_positions,
                        vocab_size=vocab, bos_token_id=vocab - 1, eos_token_id=vocab - 1,
                        attn_implementation="eager")
    return GPT2LMHeadModel(config).eval()


def capture_parity(loaded, ids, atol=1e-6):
    """Assert that the captures of ``ids`` [windows, L] match ``loaded``'s own attentions (and a
    softmax recomputed from the captured queries and keys) within ``atol``, that the hidden states
    are the model's exactly and that masked keys get weight 0; returns the captured batch."""
    from normlimits.model.capture import capture_batch

    with torch.no_grad():
        out = loaded.model(ids, output_attentions=True, output_hidden_states=True)
    batch = capture_batch(loaded, ids)
    weights = batch.weights()
    length = ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    for layer, reference in enumerate(out.attentions):
        assert torch.allclose(weights[:, layer], reference, atol=atol), layer
        q, k = batch.queries[:, layer], batch.keys[:, layer]
        recomputed = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(~causal, float("-inf")).softmax(-1)
        assert torch.allclose(recomputed, reference, atol=atol), layer
        assert torch.equal(batch.hidden[:, layer], out.hidden_states[layer])
    assert bool((weights.triu(1) == 0).all()), "masked keys get weight exactly 0"
    return batch


def make_tiny_gemma3(layer_types=("sliding_attention", "full_attention", "sliding_attention"),
                     sliding_window=8, positions=64, vocab=300, seed=0):
    """A tiny randomly initialised Gemma 3 (eager attention, eval mode): one layer per entry of
    ``layer_types`` (sliding-window layers of ``sliding_window`` keys and global ones), 4 query
    heads sharing 1 key/value head of width 8, QK-norm, ``query_pre_attn_scalar`` scaling."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                              num_hidden_layers=len(layer_types), num_attention_heads=4,
                              num_key_value_heads=1, head_dim=8, query_pre_attn_scalar=8,
                              max_position_embeddings=positions, sliding_window=sliding_window,
                              layer_types=list(layer_types), pad_token_id=0, bos_token_id=vocab - 1,
                              eos_token_id=vocab - 1, attn_implementation="eager")
    return Gemma3ForCausalLM(config).eval()


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
    BOOK_BUILDS["count"] += 1
    return ROOT / "_build"


@pytest.fixture(scope="module")
def tiny_audit(tmp_path_factory):
    """One full audit (all four yardsticks) of a tiny byte-level GPT-2: (folder, audit.json)."""
    import json

    from normlimits.audit import command as audit
    from normlimits.model.pretrained import BYTE_TOKENIZER_FILE

    if not SHARED_CORPUS.is_file():
        pytest.skip("the shared corpus is absent")
    root = tmp_path_factory.mktemp("report")
    make_tiny_gpt2(n_positions=128).save_pretrained(root / "model")
    (root / "model" / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    out = root / "audit"
    assert audit.main(["--model", str(root / "model"), "--windows", "2", "--length", "64",
                       "--out", str(out), "--quiet"]) == 0
    return out, json.loads((out / "audit.json").read_text())


def audit_numbers(doc: dict) -> dict[str, list[str]]:
    """Per claim, every number its row shows: the headline value and every criterion's value."""
    return {r["id"]: [f"{v:.4g}" for v in [r["value"], *(c["value"] for c in r["criteria"])]
                      if v is not None] for r in doc["rows"]}


def audit_provenance_strings(doc: dict) -> list[str]:
    p = doc["provenance"]
    return [p["results_sha256"], p["windows"]["corpus_sha256"], p["command_line"],
            *(f["sha256"] for f in p["model_source"]["files"]),
            *(str(s) for s in p["windows"]["starts"]), p["libraries"]["torch"],
            p["libraries"]["transformers"], p["project"]["git"], p["attention_implementation"]]


REPOSITORY = "https://github.com/example-owner/normlimits-book"


def book_copy(tmp_path: Path, url: str) -> Path:
    """The book's sources (linked) under ``tmp_path/site`` with ``repository.url`` set to ``url``."""
    import yaml

    site = tmp_path / "site"
    site.mkdir(parents=True)
    (site / "book").symlink_to(ROOT / "book")
    (site / "_toc.yml").symlink_to(ROOT / "_toc.yml")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["repository"]["url"] = url
    (site / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return site


def check_language_model(loaded, max_bits_per_byte: float):
    """Held-out bits per byte of the real pretrained model ``loaded``, the stand-in (from the cache
    ``NORMLIMITS_CACHE`` names now) and the bigram baseline on the same four War and Peace texts,
    with the checks every real model passes (a broken load, e.g. the weights in the wrong order,
    gives ~8 bits or more); returns the three :class:`~normlimits.model.heldout.BitsPerByte`."""
    from normlimits.model.corpus import load_corpus
    from normlimits.model.heldout import bigram_bits_per_byte, bits_per_byte, held_out_texts
    from normlimits.model.load import load_model

    corpus = load_corpus()
    texts = held_out_texts(corpus.text, count=4)
    real = bits_per_byte(loaded, texts)
    standin = bits_per_byte(load_model("standin"), texts)
    bigram = bigram_bits_per_byte(corpus.text, texts)
    assert standin.bytes == bigram.bytes and abs(real.bytes - standin.bytes) <= 8 * len(texts)
    assert 3.0 < real.bytes_per_token < 6.0
    assert real.per_byte < max_bits_per_byte, real.per_byte
    assert real.per_byte < standin.per_byte - 1.0 and real.per_byte < bigram.per_byte - 1.5
    return real, standin, bigram
