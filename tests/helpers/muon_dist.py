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

from orchestrator.platform import distributed as distmod

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


def check_agreement_fixed_profile(rank: int, size: int) -> list[str]:
    """A fixed profile whose choices are mixed (tiny and mid shapes duplicated, [256G, 256]
    distributed): both modes appear, and every rank chose the same mode for every shape."""
    from recipes.muon.cost import ModeResolver, profile_from_registry

    profile = profile_from_registry({
        "name": "fixed-test", "peak_tflops": {"fp32": 1.0, "bf16": 2.0},
        "intra_domain_bandwidth_gbps": 50, "inter_domain_bandwidth_gbps": 5,
        "collective_latency_us": 20})
    resolver = ModeResolver(steps=5, quad_steps=5, ns_dtype="fp32", crosses_domain=False,
                            profile=profile, rank=rank)
    modes = [resolver.resolve(m, n, size, pd).mode
             for m, n, pd in ((16 * size, 16, 0), (16, 64 * size, 0), (512, 32 * size, 1),
                              (256 * size, 256, 0), (4 * size, 4, 0))]
    assert set(modes) == {"duplicated", "distributed"}, modes
    blob: list[Any] = [None] * size
    dist.all_gather_object(blob, modes)
    assert all(b == modes for b in blob), f"ranks chose differently: {blob}"
    return modes


def check_bf16(rank: int, size: int) -> float:
    """bf16 Newton-Schulz, distributed vs one process on the full matrix: the same math in a
    lower precision (partial Grams summed in bf16, the Gram forced onto the unsharded dim). One
    process in bf16 lies ~6e-3 normwise from fp32 on these shapes, so two bf16 computations
    with different rounding may differ by about twice that: distributed must be within 2e-2 of
    one-process bf16, and no further from fp32 than twice one-process bf16 is (+1e-3)."""
    from recipes.muon.newton_schulz import newton_schulz, newton_schulz_tp

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).norm() / b.norm())

    worst = 0.0
    for i, (shape, pd) in enumerate((((32 * size, 24), 0), ((24, 32 * size), 1),
                                     ((16 * size, 48), 0))):
        full = _global(shape, 100 + i)
        ref16 = newton_schulz(full, 5, "quintic", compute_dtype=torch.bfloat16)
        ref32 = newton_schulz(full, 5, "quintic")
        local = full.chunk(size, dim=pd)[rank].contiguous()
        got = newton_schulz_tp(local, 5, "quintic", group=dist.group.WORLD, partition_dim=pd,
                               mode="distributed", compute_dtype=torch.bfloat16)
        want16, want32 = (r.chunk(size, dim=pd)[rank] for r in (ref16, ref32))
        r16, r32, base = rel(got, want16), rel(got, want32), rel(want16, want32)
        assert r16 <= 2e-2, f"bf16 distributed {shape} dim{pd}: {r16:.2e} from one-process bf16"
        assert r32 <= 2 * base + 1e-3, f"bf16 distributed {shape} dim{pd}: {r32:.2e} from fp32"
        worst = max(worst, r16)
    return worst


def check_collective_counts(rank: int, size: int) -> dict[str, Any]:
    """Every all_reduce / all_gather a Newton-Schulz call issues (wrapped here: calls, dtype,
    element counts) against cost.py's collectives and ring bytes per rank for that mode."""
    from recipes.muon.cost import mode_costs
    from recipes.muon.newton_schulz import NS_DTYPES, newton_schulz_tp

    calls: list[tuple[str, torch.dtype, int]] = []
    real_reduce, real_gather = dist.all_reduce, dist.all_gather

    def all_reduce(t: torch.Tensor, *a: Any, **k: Any) -> Any:
        calls.append(("all_reduce", t.dtype, t.numel()))
        return real_reduce(t, *a, **k)

    def all_gather(out: list[torch.Tensor], t: torch.Tensor, *a: Any, **k: Any) -> Any:
        calls.append(("all_gather", t.dtype, t.numel() * len(out)))
        return real_gather(out, t, *a, **k)

    rho = (size - 1) / size
    seen = {}
    dist.all_reduce, dist.all_gather = all_reduce, all_gather  # type: ignore[assignment]
    try:
        for m, n, pd in ((24 * size, 16, 0), (16, 24 * size, 1), (8 * size, 40, 0)):
            for ns_dtype in ("fp32", "bf16"):
                want = mode_costs(m, n, size, 5, partition_dim=pd, ns_dtype=ns_dtype)
                local = _global((m, n), 7).chunk(size, dim=pd)[rank].contiguous()
                for mode in MODES:
                    calls.clear()
                    newton_schulz_tp(local, 5, "quintic", group=dist.group.WORLD,
                                     partition_dim=pd, mode=mode,
                                     compute_dtype=NS_DTYPES[ns_dtype])
                    sent = sum((2 if op == "all_reduce" else 1) * numel * rho
                               * torch.tensor([], dtype=dt).element_size()
                               for op, dt, numel in calls)
                    key = f"{mode}/{ns_dtype}/[{m},{n}]/{pd}"
                    assert len(calls) == want[mode].collectives, (key, calls)
                    assert abs(sent - want[mode].bytes) <= 1e-9 * want[mode].bytes, \
                        (key, sent, want[mode].bytes, calls)
                    if mode == "duplicated":  # the fp32 momentum, whatever the NS dtype
                        assert calls == [("all_gather", torch.float32, m * n)], (key, calls)
                    else:  # one scalar norm, then one Gram per step in the NS dtype
                        u = n if pd == 0 else m
                        assert calls[0][2] == 1 and calls[0][1] == torch.float32, (key, calls)
                        assert calls[1:] == [("all_reduce", NS_DTYPES[ns_dtype], u * u)] * 5, \
                            (key, calls)
                    seen[key] = len(calls)
    finally:
        dist.all_reduce, dist.all_gather = real_reduce, real_gather  # type: ignore[assignment]
    return seen


def check_measured_latency(rank: int, size: int) -> float:
    """The latency the hybrid registry profile uses: positive and the same on every rank."""
    from recipes.muon.calibrate import measure_latency

    lat = measure_latency(dist.group.WORLD, reps=5)
    blob: list[Any] = [None] * size
    dist.all_gather_object(blob, lat)
    assert lat > 0 and len(set(blob)) == 1, blob
    return lat


def check_domains(rank: int, size: int) -> None:
    from recipes.muon.topology import group_crosses_domain

    same, _ = group_crosses_domain(dist.group.WORLD, "nvml:aa:1")
    assert same is False
    split, basis = group_crosses_domain(dist.group.WORLD, f"nvml:aa:{rank % 2}")
    assert split is True and basis.startswith("2 distinct")
    forced, how = group_crosses_domain(dist.group.WORLD, "x", override=True)
    assert forced is True and how == "config override"


def mixed_profile() -> Any:
    """A fixed profile (no collective latency) under which auto picks distributed for some of
    the training model's matrices at G=4 and duplicated for others."""
    from recipes.muon.cost import profile_from_registry

    return profile_from_registry({
        "name": "mixed-test", "peak_tflops": {"fp32": 1.0}, "intra_domain_bandwidth_gbps": 50,
        "inter_domain_bandwidth_gbps": 5, "collective_latency_us": 0})


def train(mode: str, steps: int, world_size: int, extra: dict[str, Any] | None = None,
          profile: Any = None) -> list[float]:
    """Losses of ``steps`` training steps. With ``profile`` (auto only) the trainer's resolver
    uses that fixed profile instead of calibrating (fast, and mixed choices on purpose)."""
    from orchestrator.spec.config import BucketConfig
    from recipes.muon.config import MuonTPModelConfig, MuonTPWorkloadConfig, TPConfig
    from recipes.muon.cost import ModeResolver
    from recipes.muon.recipe import build

    model = MuonTPModelConfig(vocab_size=64, n_layer=1, n_head=2, d_model=32, d_ff=64,
                              n_experts=1, d_expert=32, **(extra or {}))
    bucket = BucketConfig(name="s16", seq_len=16, micro_batch=2)
    w = MuonTPWorkloadConfig(name="t", world_size=world_size, buckets=[bucket], model=model,
                             tp=TPConfig(mode=mode, cost_profile="none" if profile else "measured"))
    trainer = build(w, bucket, "cpu")
    if profile is not None:
        trainer.muon.resolver = ModeResolver(
            steps=5, quad_steps=5, ns_dtype="fp32", crosses_domain=False, profile=profile,
            rank=trainer.rank)
    batches = trainer.batches()
    losses = [float(trainer.train_step(next(batches))) for _ in range(steps)]
    if mode == "auto":
        rec = trainer.extra_record()["muon_tp"]
        assert rec["choices"], "auto resolved no shape"
        if profile is not None:
            chosen = {c["mode"] for c in rec["choices"]}
            assert chosen == {"duplicated", "distributed"}, rec["choices"]
    return losses


def worker(rank: int, size: int, port: int, out_dir: str, train_steps: int) -> None:
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    try:
        result: dict[str, Any] = {"exactness": check_exactness(rank, size)}
        result["auto_modes"] = check_agreement(rank, size)
        result["fixed_profile_modes"] = check_agreement_fixed_profile(rank, size)
        result["bf16_rel"] = check_bf16(rank, size)
        result["collectives"] = check_collective_counts(rank, size)
        result["latency_s"] = check_measured_latency(rank, size)
        check_domains(rank, size)
        if train_steps:
            if train_steps > 0:
                result["losses"] = {m: train(m, train_steps, size)
                                    for m in ("duplicated", "distributed", "auto")}
            else:  # auto only, from a fixed profile with mixed choices (no calibration)
                result["losses"] = {"auto": train("auto", -train_steps, size,
                                                  profile=mixed_profile())}
        if rank == 0:
            with open(os.path.join(out_dir, "out.json"), "w", encoding="utf-8") as fh:
                json.dump(result, fh)
        # every rank finishes its collectives before any tears gloo down: a rank that
        # destroys its group while a peer still sends aborts the peer in C++
        dist.barrier()
    finally:
        distmod.shutdown()  # the product's teardown: it lets gloo's threads finish first
