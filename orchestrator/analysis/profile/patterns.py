"""Kernel, operator and runtime-call classification: every name pattern lives here.

HTA classifies by name regex tuned for CUDA (``nccl...``, ``cuda...LaunchKernel``); MUSA's
``musaLaunchKernel`` and MCCL kernels slip through such patterns, so both vendors are covered
explicitly. The MUSA names follow torch_musa and the MUSA runtime's naming (``musa*`` runtime
calls, ``mu*`` driver calls, ``mccl*`` kernels); verify them on a real MUSA trace before relying
on a breakdown there.
"""

from __future__ import annotations

import re

COMPUTE = "compute"
COMMUNICATION = "communication"
MEMORY = "memory"  # copies and sets (device memcpy/memset, aten copy/fill on the host)
CATEGORIES = (COMPUTE, COMMUNICATION, MEMORY)
# when two categories are active at one instant, the instant goes to the first of these
PRECEDENCE = (COMMUNICATION, MEMORY, COMPUTE)

# collectives: NCCL/MCCL/RCCL kernels, gloo, c10d ops and the ProcessGroup ranges
COMMUNICATION_RE = re.compile(
    r"(^|[^a-z])(nccl|mccl|rccl|gloo)|c10d::|^record_param_comms$|all_?reduce|all_?gather|"
    r"reduce_?scatter|all_?to_?all|^(send|recv)$",
    re.IGNORECASE,
)
# device copies/sets, and the host-side copy operators that stand in for them on CPU
MEMORY_RE = re.compile(
    r"^(memcpy|memset)|\b(cuda|musa|hip)?Memcpy|\b(cuda|musa|hip)?Memset|^aten::(copy_|_to_copy|"
    r"to|fill_|zero_|contiguous|clone)$|^Memcpy |^Memset ",
    re.IGNORECASE,
)
# runtime/driver calls that launch device work (launch statistics)
LAUNCH_RE = re.compile(
    r"^(cuda|musa|hip)(LaunchKernel|LaunchKernelExC|LaunchCooperativeKernel|GraphLaunch)(_v\d+)?$|"
    r"^(cu|mu)(LaunchKernel|LaunchKernelEx|GraphLaunch)(_v\d+)?$"
)
# calls that make the host wait for the device
DEVICE_SYNC_RE = re.compile(
    r"^(cuda|musa|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|StreamWaitEvent)"
    r"(_v\d+)?$|^(cu|mu)(CtxSynchronize|StreamSynchronize|EventSynchronize)(_v\d+)?$"
)
# device allocator calls that reach the driver (the caching allocator growing or releasing)
ALLOCATOR_CALL_RE = re.compile(
    r"^(cuda|musa|hip)(Malloc|Free|MallocAsync|FreeAsync|MallocHost|FreeHost)(_v\d+)?$|"
    r"^(cu|mu)(MemAlloc|MemFree|MemCreate|MemRelease|MemMap|MemUnmap)(_v\d+)?$"
)
# operators that read a device value back to the host (a hidden sync in a GPU step)
HOST_READBACK_RE = re.compile(r"^aten::(item|_local_scalar_dense|nonzero|is_nonzero|tolist)$")

# trace "cat" values of events that run on the device timeline (Kineto, CUDA and PrivateUse1)
DEVICE_EVENT_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "mtia_kernel"})
# trace "cat" values of host runtime / driver calls
RUNTIME_EVENT_CATS = frozenset({"cuda_runtime", "cuda_driver", "musa_runtime", "musa_driver",
                                "privateuse1_runtime", "privateuse1_driver", "runtime", "driver"})
HOST_OP_CATS = frozenset({"cpu_op"})
ANNOTATION_CATS = frozenset({"user_annotation"})


def classify(name: str, cat: str = "") -> str:
    """compute | communication | memory for a kernel or operator name."""
    if cat in ("gpu_memcpy", "gpu_memset"):
        return MEMORY
    if COMMUNICATION_RE.search(name):
        return COMMUNICATION
    if MEMORY_RE.search(name):
        return MEMORY
    return COMPUTE


def is_launch(name: str) -> bool:
    return LAUNCH_RE.match(name) is not None


def is_device_sync(name: str) -> bool:
    return DEVICE_SYNC_RE.match(name) is not None


def is_host_readback(name: str) -> bool:
    return HOST_READBACK_RE.match(name) is not None


def is_allocator_call(name: str) -> bool:
    return ALLOCATOR_CALL_RE.match(name) is not None
