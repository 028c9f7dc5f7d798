"""Resumable audits: the forward passes of an unfinished audit, kept until it finishes.

An audit runs one forward pass per window and streams each window's capture to the yardsticks
(:func:`normlimits.audit.command.run_audit`). :class:`Resume` keeps every capture in a checksummed folder
beside the output, ``.OUT.resume-<key>`` (the format of the book's capture cache,
:mod:`normlimits.model.capture_cache`: one safetensors file per window and, beside it, the sha256 of its
bytes, both written atomically, the checksum last; a file whose bytes do not match is computed
again, never used). An audit that is interrupted (killed, out of memory, a failing yardstick, the
machine going down) leaves that folder; the next audit with the same ``--out`` reads the windows
it finished from there instead of running their forward passes again, computes the rest, and
removes the folder once the output is committed.

What is reused is each finished window's forward pass (the captured queries, keys, values and
hidden states, bit for bit). The yardsticks keep no state on disk between windows: they run again
over every window, from the same captures with the same seeds, so a resumed audit's rows, and its
``results_sha256``, are those of an uninterrupted one.

``<key>`` is a digest of everything the captures depend on (:func:`normlimits.model.capture_cache.
capture_key`: the model's weights as loaded, its device type and dtype, the corpus's sha256, the
window length and count, the torch and transformers versions and this package's sources); a
folder of another key, left by an interrupted audit of other settings into the same ``--out``, is
removed when a new audit starts (it holds the output's lock, so no other audit is using it).
Disk: one window of GPT-2 124M at L = 1024 takes about 150 MB; ``--no-resume`` keeps nothing. A
disk beside ``--out`` without room for the windows is refused before the first is stored, naming
``--out`` and ``--no-resume`` (:func:`normlimits.model.capture_cache.serve`).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Callable, Iterator

from torch import Tensor
from normlimits.core.cache import key_digest
from normlimits.model.capture_cache import serve

__all__ = ["RESUME_INFIX", "Resume", "resume_dir"]

#: the resume folder of output ``OUT`` is ``.OUT<RESUME_INFIX><key digest>`` beside it
RESUME_INFIX = ".resume-"
#: what to do when the disk beside ``--out`` has no room for the resume cache
ROOM_REMEDY = "pass an --out on a disk with room, or --no-resume to keep no resume cache beside it"


def resume_dir(target: Path, key: dict) -> Path:
    """The resume folder of the output folder ``target`` for captures of ``key``."""
    target = Path(target)
    return target.parent / f".{target.name}{RESUME_INFIX}{key_digest(key)}"


class Resume:
    """The resume cache of one audit into ``target`` (``key``: what its captures depend on; None:
    disabled, every window computed and nothing kept).

    :meth:`captures` serves the windows' captures (from the folder where an earlier run finished
    them, else by a forward pass, stored as it goes) and records which were reused
    (:attr:`reused`) and which computed (:attr:`computed`); :meth:`finish` removes the folder
    once the audit's output is committed.
    """

    def __init__(self, target: Path, key: dict | None, say: Callable[[str], None] = lambda m: None):
        self.folder = resume_dir(target, key) if key is not None else None
        self.key = key
        self.say = say
        self.reused: list[int] = []
        self.computed: list[int] = []
        if self.folder is None:
            return
        for stale in self.folder.parent.glob(f".{Path(target).name}{RESUME_INFIX}*"):
            if stale != self.folder and stale.is_dir():
                say(f"removing {stale.name}: the resume cache of an interrupted audit of other "
                    "settings into the same folder")
                shutil.rmtree(stale, ignore_errors=True)
        try:
            self.folder.mkdir(exist_ok=True)
        except OSError as exc:
            warnings.warn(f"audit: cannot create the resume cache {self.folder} ({exc.strerror}); "
                          "the audit runs without one (an interrupted run will start over).",
                          stacklevel=2)
            self.folder = None

    @property
    def enabled(self) -> bool:
        return self.folder is not None

    def captures(self, loaded, windows: Tensor, names: str = "") -> Iterator:
        """One capture per row of ``windows`` [W, L], each from the cache or a forward pass;
        ``names`` (the yardsticks) goes into the progress lines."""
        count = len(windows)

        def told(index: int, reused: bool) -> None:
            (self.reused if reused else self.computed).append(index)
            how = ("read from the resume cache (finished by an earlier, interrupted run)" if reused
                   else "forward pass")
            self.say(f"window {index + 1}/{count}: {how}" + (f"; {names}" if names else ""))

        return serve(loaded, windows, self.folder, self.key, on_window=told, remedy=ROOM_REMEDY)

    def describe(self) -> dict:
        """The provenance's ``resume`` block: the folder (None when disabled), the windows reused
        and the windows computed in this run."""
        return {"cache": str(self.folder) if self.folder is not None else None,
                "reused_windows": list(self.reused), "computed_windows": list(self.computed)}

    def finish(self) -> None:
        """Remove the folder (the audit it served is committed)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
