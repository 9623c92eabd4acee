"""Muon tp_mode on real gloo groups: measured optimizer-step time per mode, the cost model's
prediction and choice, ordering accuracy, and auto against each fixed mode and the oracle.

For G in --groups, G ranks are spawned on this machine. Each rank calibrates the ``measured``
profile on the group (matmul rate, all-gather / all-reduce bandwidth and latency), then for
every distinct weight shape of a transformer (tall, wide, square, expert; megatron and dim-0
sharding) times ``Muon.step()`` on that one weight in ``duplicated`` and ``distributed`` mode,
interleaved, each repetition's time being the slowest rank's. Finally one optimizer over all the
model's matrices is timed in duplicated, distributed and auto mode (interleaved), with and
without the artificial very tall probe shape, and the issue's targets are checked for both: auto
no slower than the best fixed mode over the whole model (whole-step ratio <= 1), and auto within
5% of the per-shape oracle (per-shape sums).

Usage: python bench/tp_mode.py [--groups 2 4] [--reps 9] [--d-model 128] [--d-ff 512]
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipes.muon.calibrate import calibrate, describe  # noqa: E402
from recipes.muon.cost import ModeResolver  # noqa: E402
from recipes.muon.newton_schulz import quadratic_steps  # noqa: E402
from recipes.muon.optimizer import Muon, MuonSettings, mark_sharded  # noqa: E402
from recipes.muon.topology import group_crosses_domain, local_identity  # noqa: E402

MODES = ("duplicated", "distributed")


def model_shapes(d: int, ff: int, de: int, n_exp: int) -> list[tuple[str, int, int, int, int]]:
    """(name, M, N, partition_dim, count in one layer) for both sharding layouts."""
    return [
        ("qkv (tall)", 3 * d, d, 0, 2),  # megatron and dim0 both split rows
        ("proj row-par (square)", d, d, 1, 1),
        ("proj dim0 (square)", d, d, 0, 1),
        ("fc1 (tall)", ff, d, 0, 2),
        ("fc2 row-par (wide)", d, ff, 1, 1),
        ("fc2 dim0 (wide)", d, ff, 0, 1),
        ("expert fc1 (tall)", de, d, 0, 2 * n_exp),
        ("expert fc2 row-par (wide)", d, de, 1, n_exp),
        ("expert fc2 dim0 (wide)", d, de, 0, n_exp),
        # not a layer weight: a very tall matrix where distributed saves the most FLOPs
        ("very tall (probe)", 32 * d, d, 0, 1),
    ]


def is_probe(name: str) -> bool:
    return "(probe)" in name


def per_shape_sums(rows: list[Any]) -> dict[str, float]:
    """Each weight timed on its own, summed over the model (count x median): per fixed mode,
    auto (the mode it chose per shape) and the per-shape oracle (the faster measured mode)."""
    tot = {mode: sum(r[4] * r[5][mode] for r in rows) for mode in MODES}
    tot["auto"] = sum(r[4] * r[5][r[7]] for r in rows)
    tot["oracle"] = sum(r[4] * min(r[5].values()) for r in rows)
    tot["best_fixed"] = min(tot[m] for m in MODES)
    tot["matrices"] = sum(r[4] for r in rows)
    return tot


def _param(m: int, n: int, pd: int, g: int, rank: int, seed: int) -> torch.nn.Parameter:
    gen = torch.Generator().manual_seed(seed)
    full_w, full_g = torch.randn(m, n, generator=gen), torch.randn(m, n, generator=gen)
    p = torch.nn.Parameter(full_w.chunk(g, dim=pd)[rank].contiguous())
    p.grad = full_g.chunk(g, dim=pd)[rank].contiguous()
    return mark_sharded(p, pd)  # type: ignore[return-value]


def _timed(opt: Muon) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    opt.step()
    t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's time
    return float(t)


def _median_interleaved(opts: dict[str, Muon], reps: int) -> dict[str, float]:
    for opt in opts.values():  # warm-up (allocations, first collectives)
        _timed(opt)
    times: dict[str, list[float]] = {k: [] for k in opts}
    names = list(opts)
    for r in range(reps):
        for k in names if r % 2 == 0 else names[::-1]:
            times[k].append(_timed(opts[k]))
    return {k: statistics.median(v) for k, v in times.items()}


def worker(rank: int, g: int, port: int, args: Any) -> None:
    threads = max(1, (os.cpu_count() or 1) // g)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=g)
    settings = MuonSettings(ns_steps=args.ns_steps, coefficients="quintic")
    profile = calibrate(dist.group.WORLD, ns_dtype="fp32", steps=args.ns_steps)
    crosses, basis = group_crosses_domain(dist.group.WORLD, local_identity("cpu", None))
    resolver = ModeResolver(steps=args.ns_steps, quad_steps=quadratic_steps("quintic", args.ns_steps),
                            ns_dtype="fp32", crosses_domain=crosses, profile=profile, rank=rank)
    shapes = model_shapes(args.d_model, args.d_ff, args.d_expert, args.n_experts)
    out = print if rank == 0 else (lambda *a, **k: None)
    cores = os.cpu_count() or 1
    out(f"\n== G={g} gloo ranks on {cores} CPU cores, {threads} thread(s) per rank"
        f"{' (OVERSUBSCRIBED: ' + str(g * threads) + ' threads on ' + str(cores) + ' cores)' if g * threads > cores else ''}"
        f"; {args.ns_steps} quintic NS steps, fp32; median of {args.reps} interleaved reps, "
        "slowest rank per rep")
    out(f"profile: {describe(profile)}; crosses_domain={crosses} ({basis})")
    out(f"{'shape':<27}{'[M, N]':>12}{'dim':>4}{'n':>3}{'dup ms':>9}{'dist ms':>9}"
        f"{'pred dup':>10}{'pred dist':>10}  {'choice':<12}{'faster':<12}ok")
    rows = []
    for i, (name, m, n, pd, count) in enumerate(shapes):
        opts = {mode: Muon([_param(m, n, pd, g, rank, i)], settings, group=dist.group.WORLD,
                           tp_mode=mode) for mode in MODES}
        meas = _median_interleaved(opts, args.reps)
        choice = resolver.resolve(m, n, g, pd)
        pred = {k: float(c.total_s or 0.0) for k, c in choice.costs.items()}
        faster = min(MODES, key=lambda k: meas[k])
        pred_faster = min(MODES, key=lambda k: pred[k])
        rows.append((name, m, n, pd, count, meas, pred, choice.mode, faster, pred_faster))
        out(f"{name:<27}{f'[{m}, {n}]':>12}{pd:>4}{count:>3}{meas['duplicated'] * 1e3:>9.2f}"
            f"{meas['distributed'] * 1e3:>9.2f}{pred['duplicated'] * 1e3:>10.2f}"
            f"{pred['distributed'] * 1e3:>10.2f}  {choice.mode:<12}{faster:<12}"
            f"{'yes' if pred_faster == faster else 'NO'}")
    agree = sum(1 for r in rows if r[9] == r[8])
    out(f"ordering accuracy: {agree}/{len(rows)} shapes ({100 * agree / len(rows):.0f}%) "
        "where the model's faster mode is the measured faster mode")
    layer_rows = [r for r in rows if not is_probe(r[0])]
    sums = {"with the probe shape": per_shape_sums(rows),
            "layer shapes only": per_shape_sums(layer_rows)}
    for label, t in sums.items():
        out(f"per-shape sums, {label} ({t['matrices']} matrices): duplicated "
            f"{t['duplicated'] * 1e3:.2f} ms, distributed {t['distributed'] * 1e3:.2f} ms, auto "
            f"{t['auto'] * 1e3:.2f} ms, oracle {t['oracle'] * 1e3:.2f} ms; auto/best-fixed "
            f"{t['auto'] / t['best_fixed']:.3f}, auto/oracle {t['auto'] / t['oracle']:.3f}")
    # one optimizer over all the model's matrices, timed as a whole in each mode, with and
    # without the artificial probe shape
    whole_ratio: dict[str, float] = {}
    whole_best: dict[str, str] = {}
    for label, subset in (("with the probe shape", shapes),
                          ("layer shapes only", [s for s in shapes if not is_probe(s[0])])):
        whole: dict[str, Muon] = {}
        for mode in (*MODES, "auto"):
            params = [_param(m, n, pd, g, rank, 1000 * i + j)
                      for i, (_, m, n, pd, count) in enumerate(subset) for j in range(count)]
            whole[mode] = Muon(params, settings, group=dist.group.WORLD, tp_mode=mode,
                               resolver=resolver if mode == "auto" else None)
        meas_whole = _median_interleaved(whole, args.reps)
        best = min(meas_whole[m] for m in MODES)
        whole_ratio[label] = meas_whole["auto"] / best
        whole_best[label] = min(MODES, key=lambda m: meas_whole[m])
        out(f"whole-model optimizer step, {label} (measured, one Muon over all): duplicated "
            f"{meas_whole['duplicated'] * 1e3:.2f} ms, distributed "
            f"{meas_whole['distributed'] * 1e3:.2f} ms, auto {meas_whole['auto'] * 1e3:.2f} ms; "
            f"auto/best-fixed {whole_ratio[label]:.3f}")
    out("targets (issue 8: auto no slower than the best fixed mode over the whole model; auto "
        "within 5% of the per-shape oracle):")
    for (label, t), subset in zip(sums.items(), (rows, layer_rows)):
        w, o = whole_ratio[label], t["auto"] / t["oracle"]
        chosen = {r[7] for r in subset}
        if chosen == {whole_best[label]}:  # auto is the best fixed mode: same work, same step
            verdict = (f"MET (auto chose {whole_best[label]}, the faster fixed mode, for every "
                       "shape: the same optimizer step, the ratio's distance from 1 is noise)")
        else:
            verdict = "MET" if w <= 1.0 else "NOT MET"
            if len(chosen) == 1:
                verdict += f" (auto chose {next(iter(chosen))} for every shape)"
        out(f"  {label}: auto/best-fixed whole step {w:.3f} -> {verdict}; auto/oracle "
            f"per-shape sums {o:.3f} -> {'MET' if o <= 1.05 else 'NOT MET'}")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--ns-steps", type=int, default=5)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--d-ff", type=int, default=512)
    ap.add_argument("--d-expert", type=int, default=256)
    ap.add_argument("--n-experts", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"torch {torch.__version__}; measured on this machine (CPU, gloo); no datasheet figure "
          "is used: the cost model runs on the profile calibrated on each group")
    for g in args.groups:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        mp.spawn(worker, args=(g, port, args), nprocs=g, join=True)


if __name__ == "__main__":
    main()
