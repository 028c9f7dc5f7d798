"""The forward-pass clock (normlimits.core.forward_clock): outermost calls, once, not in training."""

from __future__ import annotations

import time

import pytest
import torch

from conftest import make_tiny_gpt2
from normlimits.core import forward_clock, one_time


class Slow(torch.nn.Module):
    """A module whose forward takes a known time and calls a slow inner module."""

    def __init__(self, seconds: float, fail: bool = False):
        super().__init__()
        self.seconds, self.fail = seconds, fail
        self.base_model = Inner(seconds)

    def forward(self, x):
        time.sleep(self.seconds)
        if self.fail:
            raise RuntimeError("forward failed")
        return self.base_model(x)


class Inner(torch.nn.Module):
    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return x


def test_outermost_forward_calls_are_timed_once_and_inner_calls_alone_count_too():
    model = Slow(0.02)
    forward_clock.time_forward_passes(model)
    forward_clock.time_forward_passes(model)          # hooking twice changes nothing
    before = forward_clock.spent()
    model(torch.zeros(1))                             # outer 0.02 + inner 0.02, counted once
    outer = forward_clock.spent() - before
    assert 0.04 <= outer < 0.2
    model.base_model(torch.zeros(1))                  # the capture calls the base model directly
    assert 0.02 <= forward_clock.spent() - before - outer < 0.15
    assert forward_clock._state["depth"] == 0


def test_a_failing_forward_counts_and_leaves_the_clock_usable():
    model = Slow(0.02, fail=True)
    forward_clock.time_forward_passes(model)
    before = forward_clock.spent()
    with pytest.raises(RuntimeError):
        model(torch.zeros(1))
    assert forward_clock.spent() - before >= 0.02
    assert forward_clock._state["depth"] == 0


def test_forward_passes_during_one_time_work_are_not_counted():
    model = Slow(0.02)
    forward_clock.time_forward_passes(model)
    before = forward_clock.spent()
    with one_time.one_time_work():                    # a stand-in's training
        model(torch.zeros(1))
    assert forward_clock.spent() == before


def test_every_loaded_model_is_timed(monkeypatch):
    from normlimits.model.pretrained import LoadedModel

    model = make_tiny_gpt2().eval()
    LoadedModel(model=model, name="tiny", source="test", encode=lambda text: [0],
                tokenizer_kind="bytes", is_paper_model=False)
    before = forward_clock.spent()
    with torch.no_grad():
        model(torch.zeros(1, 8, dtype=torch.long))
    assert forward_clock.spent() > before
