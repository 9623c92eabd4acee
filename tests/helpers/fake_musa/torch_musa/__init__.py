"""A stand-in for torch_musa, for tests of MUSA detection without MUSA hardware.

It does what torch_musa 2.7.1 does at import, as its source shows (``torch_musa/__init__.py``,
``core/device.py``, ``core/mccl.py``, ``core/module_attrs.py``, ``_dynamo/__init__.py``,
``csrc/core/Module.cpp``, ``csrc/core/MCCL.cpp``), with two devices as an S4000 (arch 2.2) and
an S5000 (arch 3.1) report them. It runs no kernels. What it imitates:

- the ``torch.backends`` entry point ``torch_musa = torch_musa:_autoload`` (the dist-info next
  to this package declares it), so a process with this directory on its path loads the fake
  when it imports torch, and a fake that raises makes ``import torch`` itself raise;
- ``torch.musa`` (is_available, a cached device_count, properties, Event, synchronize, the
  allocator's counters), ``torch.version.musa``, ``torch.backends.mudnn``,
  ``ProfilerActivity.MUSA`` as an alias of ``PrivateUse1``, ``torch.distributed.is_mccl_available``
  (patched in: a constant True, as torch_musa's patched torch has it) and the ``mccl`` process-group
  backend (registered only when built with MCCL);
- poison_fork: every device count goes through ``_MUSAC._musa_getDeviceCount``, which is
  recorded (``calls``; and, when ``FAKE_MUSA_CALL_LOG`` names a file, one line per call with the
  pid) and marks every child forked afterwards as a bad fork (``_is_in_bad_fork``), where the
  first device initialisation raises; importing the package counts devices, as torch_musa's
  ``_dynamo/__init__.py`` does (``for i in range(torch.musa.device_count())``).

Not imitated: ``torch.utils.rename_privateuse1_backend("musa")`` (it can run once per process
and would change the test process for good). :func:`_undo` takes back what the import
registered. ``FAKE_MUSA_MODE`` picks the install to imitate:

- ``present`` (default): two devices, MCCL and muDNN;
- ``nodevice``: installed, no device visible (``is_available()`` False);
- ``driver_broken``: every device query raises, as with a driver/toolkit mismatch;
- ``import_broken``: importing raises (an ABI mismatch with torch);
- ``no_register``: imports but never registers ``torch.musa``;
- ``no_mccl``: present, built with USE_MCCL=0 (S80/S3000-class): ``torch.musa.mccl`` still
  imports, its version() raises, no ``mccl`` backend is registered;
- ``s80``: present, one device of arch 2.1 (an MTT S80), built with USE_MCCL=0.
"""

import functools
import os
import time
import types

import torch
import torch.distributed as _dist

MODE = os.environ.get("FAKE_MUSA_MODE", "present")
if MODE == "import_broken":
    raise RuntimeError("torch_musa/_MUSAC.so: undefined symbol: _ZN3c10fake (fake ABI mismatch)")

__version__ = "2.7.1+fake000"


def _autoload():
    """The entry point torch calls after importing this package (it does nothing, as upstream)."""


_GIB = 2**30
_DEVICES = [
    {"name": "MTT S4000", "major": 2, "minor": 2, "total_memory": 48 * _GIB,
     "multi_processor_count": 128, "is_integrated": False, "is_multi_gpu_board": False},
    {"name": "MTT S5000", "major": 3, "minor": 1, "total_memory": 80 * _GIB,
     "multi_processor_count": 192, "is_integrated": False, "is_multi_gpu_board": False},
]
if MODE == "s80":
    _DEVICES = [{"name": "MTT S80", "major": 2, "minor": 1, "total_memory": 16 * _GIB,
                 "multi_processor_count": 32, "is_integrated": False,
                 "is_multi_gpu_board": False}]
USE_MCCL = MODE not in ("no_mccl", "s80")

calls = []  # one pid per _musa_getDeviceCount call in this process
_CALL_LOG = os.environ.get("FAKE_MUSA_CALL_LOG")
_state = {"poisoned": False, "bad_fork": False, "initialized": False}


def _forked_child():
    if _state["poisoned"]:  # Module.cpp forked_child(): registered by poison_fork()
        _state["bad_fork"] = True
        _state["initialized"] = False


os.register_at_fork(after_in_child=_forked_child)


def _broken(*_a, **_k):
    raise RuntimeError("MUSA driver version is insufficient for MUSA runtime version (fake)")


def _get_device_count():
    calls.append(os.getpid())
    if _CALL_LOG:
        with open(_CALL_LOG, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
    _state["poisoned"] = True  # poison_fork(): children forked from now on are bad forks
    if MODE == "driver_broken":
        _broken()
    return 0 if MODE == "nodevice" else len(_DEVICES)


def _mccl_version_suffix():
    if not USE_MCCL:
        raise RuntimeError("torch_musa built without MCCL support")
    return b""


_MUSAC = types.SimpleNamespace(
    _musa_getDeviceCount=_get_device_count,
    _musa_isInBadFork=lambda: _state["bad_fork"],
    _mccl_version=lambda: ((2 << 32) | (11 << 16) | 4) if USE_MCCL else 0,
    _mccl_version_suffix=_mccl_version_suffix,
    _musa_version="4.2.0",
    _mudnn_version=lambda: 2800,
)


def _lazy_init():
    if _state["bad_fork"]:
        raise RuntimeError("Cannot re-initialize MUSA in forked subprocess. To use MUSA with "
                           "multiprocessing, you must use the 'spawn' start method")
    _state["initialized"] = True


def is_available():
    return _MUSAC._musa_getDeviceCount() > 0


@functools.lru_cache(maxsize=1)
def device_count():
    return _MUSAC._musa_getDeviceCount()


def get_device_properties(device=None):
    _lazy_init()
    i = 0 if device is None else int(device)
    if i < 0 or i >= device_count():
        raise AssertionError("Invalid device id")
    return types.SimpleNamespace(**_DEVICES[i])


def get_device_capability(device=None):
    p = get_device_properties(device)
    return p.major, p.minor


def get_arch_list():
    if not is_available():
        return []
    return ["mp_21"] if MODE == "s80" else ["mp_22", "mp_31"]


class Event:
    """torch_musa.core.stream.Event: record() on a stream, elapsed_time() in milliseconds. The
    fake has no device clock: it stamps the host clock when recorded."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self._t = None

    def record(self, stream=None):
        _lazy_init()
        self._t = time.perf_counter()

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, end_event):
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._t is None or end_event._t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._t - self._t) * 1000.0


_mem = {"allocated": 0, "peak_allocated": 0, "reserved": 0, "peak_reserved": 0}


def _fake_alloc(nbytes):
    """Test hook: the allocator hands out (positive) or frees (negative) ``nbytes``; reserved
    memory grows in 2 MiB blocks and is kept, as a caching allocator keeps it."""
    _mem["allocated"] += nbytes
    _mem["peak_allocated"] = max(_mem["peak_allocated"], _mem["allocated"])
    block = 2 * 2**20
    _mem["reserved"] = max(_mem["reserved"], -(-_mem["allocated"] // block) * block)
    _mem["peak_reserved"] = max(_mem["peak_reserved"], _mem["reserved"])


def reset_peak_memory_stats(device=None):
    _mem["peak_allocated"], _mem["peak_reserved"] = _mem["allocated"], _mem["reserved"]


musa = types.ModuleType("torch.musa")
musa._MUSAC = _MUSAC
musa.is_available = _broken if MODE == "driver_broken" else is_available
musa.device_count = device_count
musa.get_device_properties = _broken if MODE == "driver_broken" else get_device_properties
musa.get_device_capability = get_device_capability
musa.get_device_name = lambda i=0: get_device_properties(i).name
musa.get_arch_list = get_arch_list
musa.synchronize = lambda device=None: _lazy_init()
musa.set_device = lambda device: _lazy_init()
musa.is_initialized = lambda: _state["initialized"] and not _state["bad_fork"]
musa._is_in_bad_fork = _MUSAC._musa_isInBadFork
musa.Event = Event
musa.memory_allocated = lambda device=None: _mem["allocated"]
musa.max_memory_allocated = lambda device=None: _mem["peak_allocated"]
musa.memory_reserved = lambda device=None: _mem["reserved"]
musa.max_memory_reserved = lambda device=None: _mem["peak_reserved"]
musa.reset_peak_memory_stats = reset_peak_memory_stats


def _mccl_version():
    """core/mccl.py: the packed integer decoded, plus the suffix when there is one."""
    ver = _MUSAC._mccl_version()
    major, minor, patch = ver >> 32, (ver >> 16) & 65535, ver & 65535
    suffix = _MUSAC._mccl_version_suffix().decode("utf-8")
    return (major, minor, patch) if suffix == "" else (major, minor, patch, suffix)


musa.mccl = types.SimpleNamespace(version=_mccl_version)  # always there (`from .core import mccl`)

_saved = {}


def _undo():
    """Take back what the import registered in torch (tests call it after each use)."""
    for obj, attr in ((torch, "musa"), (torch.version, "musa"), (torch.backends, "mudnn"),
                      (torch._C._profiler.ProfilerActivity, "MUSA"),
                      (_dist, "is_mccl_available"), (_dist.Backend, "MCCL")):
        if attr in vars(obj):
            delattr(obj, attr)
    b = _dist.Backend
    for name, value in _saved.items():
        setattr(b, name, value)
    _saved.clear()


if MODE != "no_register":
    torch.musa = musa
    torch.version.musa = _MUSAC._musa_version
    torch.backends.mudnn = types.SimpleNamespace(version=_MUSAC._mudnn_version,
                                                 allow_tf32=False)
    torch._C._profiler.ProfilerActivity.MUSA = torch._C._profiler.ProfilerActivity.PrivateUse1
    _dist.is_mccl_available = lambda: True  # torch_patches: `_MCCL_AVAILABLE = True`, always
    if USE_MCCL:  # csrc/distributed/Register.cpp, compiled only with USE_MCCL
        b = _dist.Backend
        for name in ("backend_list", "default_device_backend_map", "backend_capability",
                     "backend_type_map"):
            value = getattr(b, name, None)
            if value is not None:
                _saved[name] = value.copy()
        b.register_backend("mccl", lambda *a, **k: None, extended_api=False, devices=["musa"])
    # _dynamo/__init__.py registers a device interface per device: importing counts them
    if MODE != "driver_broken":
        for _i in range(musa.device_count()):
            pass
