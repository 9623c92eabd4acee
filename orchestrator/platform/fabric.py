"""Fast-link domains from the vendors' management libraries (no torch here).

Called only through :func:`orchestrator.platform.device.fabric_identity`. An identity is an opaque string
that two ranks share exactly when they sit in one fast-link domain; None means "unknown here",
and the caller falls back to the host. Nothing here raises: a missing library, an old driver or
a refused query is an unknown domain, logged at debug level.

* CUDA: NVML's GPU fabric info (cluster UUID and clique id) names a multi-node NVLink domain
  only when NCCL would use it: NCCL's ``ncclMnnvlCheck`` (src/mnnvl.cc) also requires the device
  attribute ``CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED`` and that a FABRIC memory handle
  can be created, exported and imported (IMEX). Fabric info alone (state COMPLETED with a
  non-zero UUID) is reported on systems without cross-node NVLink, so the same probe runs here,
  through the driver API (``libcuda``), before a fabric identity is given.
* MUSA: MtLink through pymtml (``mtmlDeviceGetMtLinkSpec`` / ``State`` / ``RemoteDevice``): the
  devices joined by MtLink links that are up form one domain, named by the smallest device UUID
  in it. MtLink joins devices of one host, so a domain never spans hosts. pymtml absent, or no
  link up: unknown.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# cuda.h
CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED = 128
CU_MEM_HANDLE_TYPE_FABRIC = 0x8
CU_MEM_ALLOCATION_TYPE_PINNED = 0x1
CU_MEM_LOCATION_TYPE_DEVICE = 0x1
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _FabricHandle(ctypes.Structure):  # CUmemFabricHandle
    _fields_ = [("data", ctypes.c_ubyte * 64)]


def _load_libcuda() -> Any:
    return ctypes.CDLL("libcuda.so.1")


def cuda_fabric_handle_probe(index: int, load: Callable[[], Any] = _load_libcuda) -> str | None:
    """Why device ``index`` (the CUDA ordinal this process sees) cannot share FABRIC memory
    handles, or None when it can: the attribute, then one allocation of the minimum granularity
    created with a FABRIC handle, exported and imported back, as NCCL does before it calls a
    clique multi-node NVLink."""
    try:
        cu = load()
    except OSError as exc:
        return f"libcuda not loadable ({exc})"

    def check(name: str, *args: Any) -> None:
        rc = getattr(cu, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} returned CUresult {rc}")

    try:
        check("cuInit", 0)
        dev = ctypes.c_int()
        check("cuDeviceGet", ctypes.byref(dev), index)
        flag = ctypes.c_int(0)
        check("cuDeviceGetAttribute", ctypes.byref(flag),
              CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, dev)
        if not flag.value:
            return "the device does not support FABRIC handles"
        prop = _AllocationProp()
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC
        prop.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, dev.value)
        gran = ctypes.c_size_t()
        check("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(prop),
              CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        handle = ctypes.c_ulonglong()
        check("cuMemCreate", ctypes.byref(handle), gran, ctypes.byref(prop), ctypes.c_ulonglong(0))
        try:
            fabric = _FabricHandle()
            check("cuMemExportToShareableHandle", ctypes.byref(fabric), handle,
                  CU_MEM_HANDLE_TYPE_FABRIC, ctypes.c_ulonglong(0))
            imported = ctypes.c_ulonglong()
            check("cuMemImportFromShareableHandle", ctypes.byref(imported), ctypes.byref(fabric),
                  CU_MEM_HANDLE_TYPE_FABRIC)
            cu.cuMemRelease(imported)
        finally:
            cu.cuMemRelease(handle)
    except Exception as exc:  # noqa: BLE001 - any refusal means: NCCL would not use the fabric
        return f"FABRIC handle probe failed ({exc}; IMEX channels: /dev/nvidia-caps-imex-channels)"
    return None


def nvml_fabric_identity(index: int, uuid: str | None,
                         probe: Callable[[int], str | None] | None = None) -> str | None:
    """The multi-node NVLink clique of CUDA device ``index`` (``uuid`` from torch's device
    properties when known), or None: no pynvml, no fabric, fabric info not complete, a zero
    cluster UUID, or FABRIC handles that cannot be shared (the probe)."""
    try:
        import pynvml  # type: ignore[import-not-found]  # optional: only where NVML is installed
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if uuid is not None:
            handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        info = pynvml.nvmlDeviceGetGpuFabricInfo(handle)
    except Exception as exc:  # noqa: BLE001 - no fabric (HGX, PCIe), old driver: not an error
        log.debug("no NVML fabric info: %s", exc)
        return None
    cluster = bytes(getattr(info, "clusterUuid", b"") or b"")
    state = getattr(info, "state", None)
    completed = getattr(pynvml, "NVML_GPU_FABRIC_STATE_COMPLETED", 3)
    if state != completed or not any(cluster):
        return None
    why = (probe or cuda_fabric_handle_probe)(index)
    if why is not None:  # fabric info alone over-reports multi-node NVLink
        log.debug("NVML reports fabric clique %s but %s: domain unknown", cluster.hex(), why)
        return None
    return f"nvml:{cluster.hex()}:{getattr(info, 'cliqueId', 0)}"


def _physical(index: int) -> tuple[str, int | str]:
    """How to find torch's MUSA device ``index`` in MTML, which enumerates every device of the
    host: through MUSA_VISIBLE_DEVICES (indices or UUIDs) when it is set."""
    visible = [v.strip() for v in os.environ.get("MUSA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    if not visible:
        return "index", index
    entry = visible[index]
    return ("index", int(entry)) if entry.isdigit() else ("uuid", entry)


def _shutdown(mtml: Any) -> None:
    try:
        mtml.mtmlLibraryShutDown()
    except Exception as exc:  # noqa: BLE001 - nothing to do about a failed shutdown
        log.debug("mtmlLibraryShutDown failed: %s", exc)


def mtml_domain_identity(index: int, mtml: Any = None) -> str | None:
    """The MtLink domain of MUSA device ``index`` (torch's numbering): the devices reachable
    from it over MtLink links that are up, named by the smallest UUID among them; None when
    pymtml is absent, a query fails, or no link is up."""
    if mtml is None:
        try:
            import pymtml as mtml  # type: ignore[import-not-found, no-redef]  # optional: MUSA hosts only
        except ImportError:
            return None
    try:
        mtml.mtmlLibraryInit()
    except Exception as exc:  # noqa: BLE001 - no MTML library: unknown
        log.debug("pymtml cannot initialise MTML: %s", exc)
        return None
    try:
        how, key = _physical(index)
        dev = (mtml.mtmlLibraryInitDeviceByIndex(key) if how == "index"
               else mtml.mtmlLibraryInitDeviceByUuid(key))
        seen: dict[bytes, Any] = {bytes(mtml.mtmlDeviceGetUUID(dev)): dev}
        todo = [dev]
        while todo:
            d = todo.pop()
            links = int(mtml.mtmlDeviceGetMtLinkSpec(d).linkNum)
            for link in range(links):
                if mtml.mtmlDeviceGetMtLinkState(d, link) != mtml.MTML_MTLINK_STATE_UP:
                    continue
                remote = mtml.mtmlDeviceGetMtLinkRemoteDevice(d, link)
                ruuid = bytes(mtml.mtmlDeviceGetUUID(remote))
                if ruuid not in seen:
                    seen[ruuid] = remote
                    todo.append(remote)
    except Exception as exc:  # noqa: BLE001 - an old driver without MtLink queries: unknown
        log.debug("MtLink query failed: %s", exc)
        return None
    finally:
        _shutdown(mtml)
    if len(seen) < 2:  # no link up: PCIe only, the host decides
        return None
    return "mtlink:" + hashlib.sha256(min(seen)).hexdigest()[:16]


def mtml_topology_level(index_a: int, index_b: int, mtml: Any = None) -> int | None:
    """``mtmlDeviceGetTopologyLevel`` between two MUSA devices (torch's numbering): 0 same
    board ... 5 across NUMA nodes (MTML_TOPOLOGY_*); None when unknown."""
    if mtml is None:
        try:
            import pymtml as mtml  # type: ignore[import-not-found, no-redef]  # optional: MUSA hosts only
        except ImportError:
            return None
    try:
        mtml.mtmlLibraryInit()
    except Exception:  # noqa: BLE001 - no MTML library
        return None
    try:
        devs = []
        for i in (index_a, index_b):
            how, key = _physical(i)
            devs.append(mtml.mtmlLibraryInitDeviceByIndex(key) if how == "index"
                        else mtml.mtmlLibraryInitDeviceByUuid(key))
        return int(mtml.mtmlDeviceGetTopologyLevel(devs[0], devs[1]))
    except Exception as exc:  # noqa: BLE001 - unknown
        log.debug("MTML topology level query failed: %s", exc)
        return None
    finally:
        _shutdown(mtml)
