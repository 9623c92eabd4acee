"""Worker for the multi-process Muon tests: runs inside each spawned gloo rank.

Every check raises on failure (the spawning test sees the traceback); rank 0 writes what it
measured to ``out.json`` for the test to assert on as well.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.distributed as dist

MODES = ("duplicated", "distributed")


def _global(shape: tuple[int, int], seed: int) -> torch.Tensor:
    # integer-valued, so every rank holds exactly the same matrix
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-5, 6, shape, generator=g).float()


def check_exactness(rank: int, size: int) -> dict[str, float]:
    from recipes.muon.newton_schulz import newton_schulz, newton_schulz_tp

    worst: dict[str, float] = {}
    shapes = [(8 * size, 12), (12, 8 * size), (8 * size, 8 * size), (24 * size, 4 * size)]
    for i, shape in enumerate(shapes):
        full = _global(shape, i)
        for steps, coeffs in ((1, "simple"), (5, "quintic"), (3, "cubic")):
            ref = newton_schulz(full, steps, coeffs)
            for pd in (0, 1):
                local = full.chunk(size, dim=pd)[rank].contiguous()
                want = ref.chunk(size, dim=pd)[rank]
                for mode in MODES:
                    got = newton_schulz_tp(local, steps, coeffs, group=dist.group.WORLD,
                                           partition_dim=pd, mode=mode)
                    assert got.shape == local.shape
                    err = float((got - want).abs().max())
                    tol = 1e-4 if steps == 1 else 1e-3
                    assert err <= tol, f"{mode} {shape} dim{pd} {coeffs}x{steps}: {err}"
                    key = f"{mode}_steps{steps}"
                    worst[key] = max(worst.get(key, 0.0), err)
    return worst


def check_agreement(rank: int, size: int) -> list[str]:
    """auto from a measured profile: every rank must pick the same mode for every shape."""
    from recipes.muon.calibrate import calibrate
    from recipes.muon.cost import ModeResolver

    profile = calibrate(dist.group.WORLD, reps=3)
    blob: list[Any] = [None] * size
    dist.all_gather_object(blob, repr(profile))
    assert len(set(blob)) == 1, "ranks fitted different profiles"
    resolver = ModeResolver(steps=5, quad_steps=5, ns_dtype="fp32", crosses_domain=False,
                            profile=profile, rank=rank)
    modes = []
    for m, n, pd in ((16 * size, 16, 0), (16, 64 * size, 0), (64 * size, 64, 0),
                     (512, 32 * size, 1), (4 * size, 4, 0), (256 * size, 256, 0)):
        modes.append(resolver.resolve(m, n, size, pd).mode)
    idx = torch.tensor([0 if x == "duplicated" else 1 for x in modes])
    gathered = [torch.empty_like(idx) for _ in range(size)]
    dist.all_gather(gathered, idx)
    assert all(torch.equal(gathered[0], t) for t in gathered), "ranks chose differently"
    return modes


def check_domains(rank: int, size: int) -> None:
    from recipes.muon.topology import group_crosses_domain

    same, _ = group_crosses_domain(dist.group.WORLD, "nvml:aa:1")
    assert same is False
    split, basis = group_crosses_domain(dist.group.WORLD, f"nvml:aa:{rank % 2}")
    assert split is True and basis.startswith("2 distinct")
    forced, how = group_crosses_domain(dist.group.WORLD, "x", override=True)
    assert forced is True and how == "config override"


def train(mode: str, steps: int, world_size: int, extra: dict[str, Any] | None = None) -> list[float]:
    from orchestrator.config import BucketConfig, MuonTPModelConfig, MuonTPWorkloadConfig, TPConfig
    from recipes.muon.recipe import build

    model = MuonTPModelConfig(vocab_size=64, n_layer=1, n_head=2, d_model=32, d_ff=64,
                              n_experts=1, d_expert=32, **(extra or {}))
    bucket = BucketConfig(name="s16", seq_len=16, micro_batch=2)
    w = MuonTPWorkloadConfig(name="t", world_size=world_size, buckets=[bucket], model=model,
                             tp=TPConfig(mode=mode))
    trainer = build(w, bucket, "cpu")
    batches = trainer.batches()
    losses = [float(trainer.train_step(next(batches))) for _ in range(steps)]
    if mode == "auto":
        rec = trainer.extra_record()["muon_tp"]
        assert rec["choices"], "auto resolved no shape"
    return losses


def worker(rank: int, size: int, port: int, out_dir: str, train_steps: int) -> None:
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    try:
        result: dict[str, Any] = {"exactness": check_exactness(rank, size)}
        result["auto_modes"] = check_agreement(rank, size)
        check_domains(rank, size)
        if train_steps:
            result["losses"] = {m: train(m, train_steps, size)
                                for m in ("duplicated", "distributed", "auto")}
        if rank == 0:
            with open(os.path.join(out_dir, "out.json"), "w", encoding="utf-8") as fh:
                json.dump(result, fh)
    finally:
        dist.destroy_process_group()
