"""Device and dtype settings: the CPU path fully; a CUDA path where a GPU is present (marked
``cuda``, skipped elsewhere). Bad values are in tests/unit/test_bad_inputs.py."""

from __future__ import annotations

import pytest
import torch

from conftest import make_tiny_gpt2
from normlimits.model.capture import capture_window
from normlimits.core.devices import Placement, placement
from normlimits.model.load import load_model

no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")


def test_defaults_are_the_cpu_and_float32(monkeypatch):
    """CPU by default even with a GPU present (the metric modules are not device-aware yet)."""
    monkeypatch.delenv("NORMLIMITS_DEVICE", raising=False)
    monkeypatch.delenv("NORMLIMITS_DTYPE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert placement() == Placement(device=torch.device("cpu"), dtype=torch.float32)


def test_auto_prefers_cuda_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert placement("auto").device == torch.device("cuda:0")
    assert placement("cuda:1", "bfloat16") == Placement(torch.device("cuda:1"), torch.bfloat16)
    assert placement("map").device_map == "auto"


def test_parameters_override_the_environment(monkeypatch):
    monkeypatch.setenv("NORMLIMITS_DEVICE", "gpu-that-does-not-exist")
    assert placement("cpu", "float32").device == torch.device("cpu")


def test_cpu_path_loads_float32_on_the_cpu_and_captures_there(monkeypatch, saved_gpt2):
    monkeypatch.setenv("NORMLIMITS_DEVICE", "cpu")
    monkeypatch.setenv("NORMLIMITS_DTYPE", "float32")
    loaded = load_model(str(saved_gpt2))
    assert loaded.placement == Placement(torch.device("cpu"), torch.float32)
    assert {(p.device.type, p.dtype) for p in loaded.model.parameters()} == {("cpu", torch.float32)}
    capture = capture_window(loaded, torch.arange(10))
    assert capture.queries.device.type == "cpu" and capture.logits().device.type == "cpu"


def test_gpt2_random_and_the_standin_path_follow_the_placement(monkeypatch):
    """Named models (not only folders) are placed: the stand-in path moves the loaded model."""
    from normlimits.model import load as models

    sentinel = models.LoadedModel(model=make_tiny_gpt2(), name="standin", source="s",
                                  encode=models.byte_encode, tokenizer_kind="bytes", is_paper_model=False)
    import normlimits.model.standin as standin

    monkeypatch.setattr(standin, "load_standin", lambda corpus=None, recipe=None: sentinel)
    loaded = models.load_model("standin", device="cpu")
    assert loaded.placement == Placement(torch.device("cpu"), torch.float32)


@pytest.mark.cuda
@no_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_capture_matches_the_cpu(saved_gpt2, dtype):
    cpu = load_model(str(saved_gpt2), device="cpu")
    gpu = load_model(str(saved_gpt2), device="cuda", dtype=dtype)
    ids = torch.randint(0, 300, (40,))
    a, b = capture_window(cpu, ids), capture_window(gpu, ids)
    assert b.queries.device.type == "cuda" and b.queries.dtype == getattr(torch, dtype)
    assert b.logits(rows=[39]).device.type == "cuda" and b.weights().dtype == torch.float32
    tolerance = 1e-4 if dtype == "float32" else 3e-2
    assert float((a.weights() - b.weights().cpu()).abs().max()) <= tolerance
    with torch.no_grad():
        out = gpu.model(ids[None].cuda(), output_attentions=True)
    for layer, reference in enumerate(out.attentions):
        assert float((b.weights()[layer] - reference[0].float()).abs().max()) <= tolerance


@pytest.mark.cuda
@no_cuda
def test_cuda_device_map_gathers_captures_on_the_first_device(saved_gpt2):
    loaded = load_model(str(saved_gpt2), device="map")
    capture = capture_window(loaded, torch.arange(16))
    assert capture.queries.device == torch.device("cuda:0") and capture.scale.device == torch.device("cuda:0")
