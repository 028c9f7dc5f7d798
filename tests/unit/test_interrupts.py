"""A Ctrl-C during the bench's or the audit's yardsticks is an interrupt, not a failure of the
yardstick that happened to be running (issue 50, item 9)."""

from __future__ import annotations

import pytest

from normlimits.core.streaming import Lockstep


def _stops_at_second_item(items):
    for k, _ in enumerate(items):
        if k == 1:
            raise KeyboardInterrupt
    return "done"


def test_a_ctrl_c_in_a_workload_is_raised_as_an_interrupt():
    with pytest.raises(KeyboardInterrupt):
        Lockstep({"vanishing": _stops_at_second_item, "other": lambda items: sum(items)}).run(range(3))


def test_a_workload_error_is_still_named():
    def broken(items):
        for _ in items:
            raise ValueError("bad input")

    with pytest.raises(RuntimeError, match="bench workload 'vanishing' failed: ValueError"):
        Lockstep({"vanishing": broken}).run(range(2))
