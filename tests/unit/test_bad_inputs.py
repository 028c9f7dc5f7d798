"""Bad inputs at the public boundary: each gets a clear error naming the setting or argument, the
value and the remedy, raised before any work starts. Fast: tiny models, no training.

Organised by area (add new cases under their area's heading):

- model folders (``NORMLIMITS_MODEL`` / ``--model``)
- token ids given to capture
- the bench's command line
- device and dtype settings
"""

from __future__ import annotations

import json

import pytest
import torch

from normlimits.model.capture import capture_batch, capture_window, iter_captures
from normlimits.model.errors import ModelError
from normlimits.model.load import load_model
from normlimits.core.settings import SettingError
from normlimits.core.validation import InputError


# ----------------------------------------------------------------------------- model folders
@pytest.mark.parametrize("damage", ["truncated", "random", "empty"])
def test_a_damaged_safetensors_file_is_named_with_the_remedy(saved_gpt2, damage):
    weights = saved_gpt2 / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncated": data[: len(data) // 3],
                         "random": torch.randint(0, 256, (4096,), dtype=torch.uint8).numpy().tobytes(),
                         "empty": b""}[damage])
    with pytest.raises(ModelError) as info:
        load_model(str(saved_gpt2))
    message = str(info.value)
    assert f"NORMLIMITS_MODEL='{saved_gpt2}'" in message
    assert str(weights) in message and "damaged" in message and "save_pretrained" in message


def test_a_folder_with_config_but_no_weights_is_not_called_a_hub_id(saved_gpt2):
    (saved_gpt2 / "model.safetensors").unlink()
    with pytest.raises(ModelError) as info:
        load_model(str(saved_gpt2))
    message = str(info.value)
    assert "config.json but no weights" in message and "model.safetensors" in message
    assert "hub" not in message and "save_pretrained" in message


def test_a_corrupt_config_is_named_with_the_folder(saved_gpt2):
    (saved_gpt2 / "config.json").write_text("{ not json")
    with pytest.raises(ModelError, match="could not load the model in") as info:
        load_model(str(saved_gpt2))
    assert str(saved_gpt2) in str(info.value) and "save_pretrained" in str(info.value)


def test_a_weight_index_naming_a_missing_shard(saved_gpt2):
    (saved_gpt2 / "model.safetensors").unlink()
    (saved_gpt2 / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"wte.weight": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(ModelError, match="model-00001-of-00002.safetensors.*missing"):
        load_model(str(saved_gpt2))


# ----------------------------------------------------------------------------- token ids
@pytest.mark.parametrize("ids, message", [
    (torch.zeros(0, dtype=torch.long), "L=0: a window needs at least one token"),
    (torch.tensor([1, 2, 300]), "token id 300, beyond the model's vocabulary \\(size 300"),
    (torch.tensor([1, -4, 2]), "negative token id \\(-4\\)"),
    (torch.tensor([1.0, 2.0, 3.0]), "dtype torch.float32: token ids must be integers"),
    ([1.5, 2.0], "dtype torch.float32: token ids must be integers"),
    (torch.tensor([True, False]), "dtype torch.bool"),
    (torch.tensor(5), "a single number"),
    ([[1, 2], [3]], "equal lengths"),
    (torch.zeros(65, dtype=torch.long), "L=65 is beyond the model's context \\(n_positions=64\\)"),
])
def test_capture_window_refuses_bad_token_ids(tiny_loaded, ids, message):
    with pytest.raises(InputError, match=message):
        capture_window(tiny_loaded, ids)


def test_float_ids_are_refused_by_every_capture_entry_point(tiny_loaded):
    floats = torch.rand(2, 8) * 10
    for call in (capture_batch, iter_captures):
        with pytest.raises(InputError, match="must be integers"):
            call(tiny_loaded, floats)


def test_capture_window_takes_one_window_and_iter_captures_checks_before_the_first_pass(tiny_loaded):
    with pytest.raises(InputError, match="one window \\[L\\]"):
        capture_window(tiny_loaded, torch.zeros(2, 8, dtype=torch.long))
    with pytest.raises(InputError, match="\\[W, L\\]"):
        iter_captures(tiny_loaded, torch.zeros(8, dtype=torch.long))   # raised on the call itself


# ----------------------------------------------------------------------------- bench command line
def test_bench_model_option_errors_name_the_option(tmp_path, capsys):
    from normlimits.experiments import bench

    missing = tmp_path / "no-such-model"
    with pytest.raises(SystemExit) as info:       # an argument error: exit 2 and the usage line
        bench.main(["--model", str(missing), "--windows", "1", "--quiet",
                    "--output", str(tmp_path / "bench.json")])
    assert info.value.code == 2
    message = capsys.readouterr().err
    assert "usage:" in message
    assert f"--model='{missing}'" in message and "NORMLIMITS_MODEL" not in message


# ----------------------------------------------------------------------------- device and dtype
@pytest.mark.parametrize("setting, value, message", [
    ("NORMLIMITS_DEVICE", "gpu", "NORMLIMITS_DEVICE='gpu' is not a device name; use one of auto, cpu"),
    ("NORMLIMITS_DEVICE", "cuda:x", "is not a device name"),
    ("NORMLIMITS_DTYPE", "float64", "NORMLIMITS_DTYPE='float64' is not a dtype this project runs"),
    ("NORMLIMITS_DTYPE", "half", "use one of float32, bfloat16, float16"),
])
def test_unknown_device_or_dtype_names(monkeypatch, setting, value, message):
    from normlimits.core.devices import placement

    monkeypatch.setenv(setting, value)
    with pytest.raises(SettingError, match=message):
        placement()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
@pytest.mark.parametrize("value", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_refused(monkeypatch, value):
    from normlimits.core.devices import placement

    monkeypatch.setenv("NORMLIMITS_DEVICE", value)
    with pytest.raises(SettingError, match=f"NORMLIMITS_DEVICE='{value}': this machine has no CUDA device.*use cpu or auto"):
        placement()


def test_a_gpu_index_beyond_the_machines_is_refused(monkeypatch):
    from normlimits.core.devices import placement

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(SettingError, match="has 2 CUDA device\\(s\\), numbered 0..1"):
        placement("cuda:2")


@pytest.mark.skipif(torch.cuda.is_available(), reason="on the CPU only")
def test_half_precision_on_the_cpu_is_refused_before_loading(monkeypatch, saved_gpt2):
    monkeypatch.setenv("NORMLIMITS_DEVICE", "cpu")
    monkeypatch.setenv("NORMLIMITS_DTYPE", "bfloat16")
    with pytest.raises(SettingError, match="NORMLIMITS_DTYPE='bfloat16' needs an accelerator.*use float32"):
        load_model(str(saved_gpt2))
