"""Fast-link domains from topology, never from a weight's role.

Each rank reads its fabric identity once (NVML cluster UUID + clique through the device seam;
otherwise the host), the identities are all-gathered over the tensor-parallel group at
construction, and the group crosses a domain iff they differ. The host name is hashed before
it leaves this module, so no artifact or log carries it.
"""

from __future__ import annotations

import hashlib
import socket
from typing import Optional, Sequence

import torch.distributed as dist

from orchestrator.platform import device as devmod


def host_identity(hostname: Optional[str] = None) -> str:
    name = socket.gethostname() if hostname is None else hostname
    return "host:" + hashlib.sha256(name.encode()).hexdigest()[:12]


def local_identity(device_kind: str, index: Optional[int]) -> str:
    """This rank's domain identity: the fabric when the device reports one, else the host."""
    return devmod.fabric_identity(device_kind, index) or host_identity()


def crosses(identities: Sequence[str]) -> bool:
    """A group crosses a domain iff its ranks report more than one identity (pure)."""
    return len(set(identities)) > 1


def group_crosses_domain(
    group: Optional[dist.ProcessGroup],
    identity: str,
    override: Optional[bool] = None,
) -> tuple[bool, str]:
    """(crosses_domain, how it was decided). ``override`` (workload.tp.crosses_domain) wins
    for unusual clusters; otherwise one all_gather_object of the identities over the group."""
    if override is not None:
        return override, "config override"
    if group is None or not dist.is_initialized() or dist.get_world_size(group) == 1:
        return False, "single rank"
    ids: list[Optional[str]] = [None] * dist.get_world_size(group)
    dist.all_gather_object(ids, identity, group=group)
    kinds = sorted({str(i).split(":", 1)[0] for i in ids})
    return crosses([str(i) for i in ids]), f"{len(set(ids))} distinct {'/'.join(kinds)} identities"
