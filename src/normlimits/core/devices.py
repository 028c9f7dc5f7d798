"""Where the forward pass runs and in which precision: the device and dtype settings.

- ``NORMLIMITS_DEVICE``: ``cpu`` (the default), ``auto`` (CUDA if present, else the CPU),
  ``cuda``, ``cuda:N``, ``mps``, or ``map``: Hugging Face's ``device_map="auto"`` through
  Accelerate, which spreads a model too large for one device over every GPU, then the CPU.
  The default is the CPU, not ``auto``, because the chapters' metric modules still build some
  tensors on the CPU: the day they run where the captures are, :data:`DEFAULT_DEVICE` becomes
  ``auto``.
- ``NORMLIMITS_DTYPE``: the forward pass's floating-point type, ``float32`` (default),
  ``bfloat16`` or ``float16``. The half types are allowed on accelerators only: on the CPU they
  are slower than float32 and change every number, so they are refused there.

Both are read at call time and can be passed as parameters instead. Errors are
:class:`normlimits.core.settings.SettingError` naming the setting, the value and the remedy.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import torch

from normlimits.core.settings import SettingError

DEVICE_ENV = "NORMLIMITS_DEVICE"
DTYPE_ENV = "NORMLIMITS_DTYPE"
DEVICE_MAP = "map"
#: the device when NORMLIMITS_DEVICE is unset (see the module docstring for why not ``auto``)
DEFAULT_DEVICE = "cpu"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:\d+|mps|map)$")
_DEVICE_CHOICES = "auto, cpu, cuda, cuda:N, mps or map"


@dataclass(frozen=True)
class Placement:
    """Where a model is put: one ``device``, or ``device_map="auto"`` (then ``device`` is where
    its inputs go and where captures are gathered), and the forward pass's ``dtype``."""

    device: torch.device
    dtype: torch.dtype
    device_map: str | None = None

    @property
    def describe(self) -> str:
        where = f"device_map=auto (inputs on {self.device})" if self.device_map else str(self.device)
        return f"{where}, {str(self.dtype).removeprefix('torch.')}"


def _raw(value: str | None, env: str, default: str) -> tuple[str, str]:
    """(the value, how to name it in an error): a parameter, else the environment, else default."""
    if value is not None:
        return str(value).strip(), f"device/dtype argument {value!r}"
    raw = os.environ.get(env, "").strip()
    return (raw or default), (f"{env}={raw!r}" if raw else f"{env} (unset: {default})")


def _cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(value: str | None = None) -> tuple[torch.device, str | None]:
    """The device setting as ``(device, device_map)``; ``device_map`` is ``"auto"`` for ``map``.

    Raises :class:`SettingError` for an unknown name or a device this machine does not have.
    """
    raw, named = _raw(value, DEVICE_ENV, DEFAULT_DEVICE)
    text = raw.lower()
    if not _DEVICE.match(text):
        raise SettingError(f"{named} is not a device name; use one of {_DEVICE_CHOICES} "
                           f"(or unset {DEVICE_ENV} for {DEFAULT_DEVICE}).")
    cuda = _cuda_count()
    if text == "auto":
        return torch.device("cuda:0" if cuda else "cpu"), None
    if text == DEVICE_MAP:
        return torch.device("cuda:0" if cuda else "cpu"), "auto"
    if text == "cpu":
        return torch.device("cpu"), None
    if text == "mps":
        if not _mps_available():
            raise SettingError(f"{named}: this machine has no Apple MPS device; use cpu or auto.")
        return torch.device("mps"), None
    index = int(text.split(":")[1]) if ":" in text else 0
    if cuda == 0:
        raise SettingError(f"{named}: this machine has no CUDA device (torch "
                           f"{torch.__version__}); use cpu or auto.")
    if index >= cuda:
        raise SettingError(f"{named}: this machine has {cuda} CUDA device(s), numbered 0..{cuda - 1}; "
                           f"use one of those, or auto.")
    return torch.device(f"cuda:{index}"), None


def resolve_dtype(value: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """The dtype setting as a torch dtype; half types only where ``device`` is an accelerator."""
    if isinstance(value, torch.dtype):
        name = str(value).removeprefix("torch.")
        raw, named = name, f"dtype argument {name!r}"
    else:
        raw, named = _raw(value, DTYPE_ENV, "float32")
    dtype = DTYPES.get(raw.lower())
    if dtype is None:
        raise SettingError(f"{named} is not a dtype this project runs; use one of "
                           f"{', '.join(DTYPES)} (or unset {DTYPE_ENV} for float32).")
    if dtype != torch.float32 and device.type == "cpu":
        raise SettingError(f"{named} needs an accelerator, but the forward pass runs on the CPU "
                           f"(where half precision is slower than float32 and changes every number); "
                           f"use float32 on the CPU, or set {DEVICE_ENV} to a CUDA or MPS device.")
    return dtype


def placement(device: str | None = None, dtype: str | torch.dtype | None = None) -> Placement:
    """Both settings resolved (parameters first, then ``NORMLIMITS_DEVICE``/``NORMLIMITS_DTYPE``)."""
    where, device_map = resolve_device(device)
    return Placement(device=where, dtype=resolve_dtype(dtype, where), device_map=device_map)
