"""The time a process spends in model forward passes: the physical floor of the book's work.

:func:`time_forward_passes` hooks a ``torch.nn.Module`` (and its ``base_model``, which the capture
calls directly) so that the wall time of every outermost forward call is added to one process-wide
total, :func:`spent`. Nested calls (the language model calling its base model) count once; a call
that raises still counts (the hooks run with ``always_call``). Forward passes made during one-time
work (:mod:`normlimits.core.one_time`: a stand-in's training) are not counted: they are training,
not the measurement a chapter reruns. A chapter reads :func:`spent` at its start and at its end
(:class:`normlimits.book.chapter.ChapterContext`) and records the difference beside its wall time,
so the build can say how far above its forward passes it runs (``normlimits timings``).
"""

from __future__ import annotations

import time

from normlimits.core import one_time

__all__ = ["time_forward_passes", "spent"]

_state = {"seconds": 0.0, "depth": 0, "started": 0.0}
#: the attribute that marks a module as hooked (hooking twice would count nothing twice, but it is
#: wasted work)
_MARK = "_normlimits_forward_clock"


def _before(module, args) -> None:
    if _state["depth"] == 0:
        _state["started"] = time.perf_counter()
    _state["depth"] += 1


def _after(module, args, output) -> None:
    _state["depth"] = max(0, _state["depth"] - 1)
    if _state["depth"] == 0 and not one_time.busy():
        _state["seconds"] += time.perf_counter() - _state["started"]


def time_forward_passes(module) -> None:
    """Hook ``module`` (and its ``base_model`` where it has another one) once, so its forward
    passes add to :func:`spent`."""
    targets = [module]
    base = getattr(module, "base_model", None)
    if base is not None and base is not module:
        targets.append(base)
    for target in targets:
        if getattr(target, _MARK, False):
            continue
        target.register_forward_pre_hook(_before)
        target.register_forward_hook(_after, always_call=True)
        setattr(target, _MARK, True)


def spent() -> float:
    """Seconds this process has spent in hooked forward passes outside one-time work."""
    return _state["seconds"]
