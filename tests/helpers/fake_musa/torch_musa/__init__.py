"""A stand-in for torch_musa, for tests of MUSA detection without MUSA hardware.

It does what the real package does at import (registers ``torch.musa``, sets
``torch.version.musa``, injects ``torch.backends.mudnn``) with the API shapes of torch_musa
2.7.1 and two devices as an S4000 (arch 2.2) and an S5000 (arch 3.1) report them. It runs no
kernels. ``FAKE_MUSA_MODE`` picks the install to imitate:

- ``present`` (default): two devices, MCCL and muDNN;
- ``nodevice``: installed, no device visible (``is_available()`` False);
- ``driver_broken``: every device query raises, as with a driver/toolkit mismatch;
- ``import_broken``: importing raises (an ABI mismatch with torch);
- ``no_register``: imports but never registers ``torch.musa``;
- ``no_mccl``: present, built with USE_MCCL=0 (S80/S3000-class).
"""

import os
import types

import torch

MODE = os.environ.get("FAKE_MUSA_MODE", "present")
if MODE == "import_broken":
    raise RuntimeError("torch_musa/_MUSAC.so: undefined symbol: _ZN3c10fake (fake ABI mismatch)")

__version__ = "2.7.1+fake000"

_GIB = 2**30
_DEVICES = [
    {"name": "MTT S4000", "major": 2, "minor": 2, "total_memory": 48 * _GIB,
     "multi_processor_count": 128, "is_integrated": False, "is_multi_gpu_board": False},
    {"name": "MTT S5000", "major": 3, "minor": 1, "total_memory": 80 * _GIB,
     "multi_processor_count": 192, "is_integrated": False, "is_multi_gpu_board": False},
]


def _broken(*_a, **_k):
    raise RuntimeError("MUSA driver version is insufficient for MUSA runtime version (fake)")


def _count():
    return 0 if MODE == "nodevice" else len(_DEVICES)


musa = types.ModuleType("torch.musa")
musa.is_available = _broken if MODE == "driver_broken" else (lambda: _count() > 0)
musa.device_count = _broken if MODE == "driver_broken" else _count
musa.get_device_properties = _broken if MODE == "driver_broken" else (
    lambda i: types.SimpleNamespace(**_DEVICES[i]))
musa.get_device_name = lambda i=0: _DEVICES[i]["name"]
musa.get_arch_list = lambda: ["mp_22", "mp_31"]
musa.synchronize = lambda device=None: None
if MODE != "no_mccl":
    musa.mccl = types.SimpleNamespace(version=lambda: (2, 11, 4))

if MODE != "no_register":
    torch.musa = musa
    torch.version.musa = "4.2.0"
    torch.backends.mudnn = types.SimpleNamespace(version=lambda: 2800, allow_tf32=False)
