"""The attention op alone, per kernel and shape, timed the do_bench way: bench/gpu_check.sh's
kernels part.

For every shape (``--shapes``, ``BxT``: sequences x tokens, the model's heads of
``--d-model / --n-head``) and every arm, one process (this one) builds the op exactly as a
campaign's microbenchmark trial does (``recipes.gpt.recipe.attention_microbench``: forward and
backward at those shapes with the arm's attention settings) and times it with
``orchestrator.platform.kernel_bench.bench`` (each call after a cache flush, by device events
on a GPU, until the median is tight or the time cap). The arms: the FlashAttention-2 kernel's
tiles (backend fa2: the Triton kernel on a GPU, the PyTorch tiled reference on the CPU) and
sdpa's kernels (auto, flash, efficient, cudnn, math). A kernel this device or build lacks, or
one that fails (a tile too large for the shared memory), is recorded with its reason and the
next one runs. Shapes are taken in the order given, so the first shape has every arm before
``--deadline-s`` (seconds from the start) stops the rest (recorded as ``skipped``).

Writes ``--out`` (JSON): per arm and shape the median and do_bench's quantiles per call, how
many calls, why it stopped, the clock, and the achieved TFLOP/s by the FA2 paper's count
(7 x B x T^2 x d_model for a causal forward and backward). The report divides by the measured
matmul peak (bench/peak_matmul.py).

    python bench/gpu_run/kernels.py --device cuda --d-model 2048 --n-head 16 \
        --shapes 8x2048,16x1024,4x4096 --dtype bf16 --out kernels.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

# run as a script: the repository root is not on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

TILES = ((32, 32), (64, 64), (128, 64), (128, 128))
SDPA = ("auto", "flash", "efficient", "cudnn", "math")


def arms() -> list[dict[str, Any]]:
    """label, backend, sdpa_kernel, block_q, block_k of every arm, tiles first."""
    out = [{"label": f"fa2 {q}x{k}", "backend": "fa2", "sdpa_kernel": "auto", "block_q": q,
            "block_k": k} for q, k in TILES]
    out += [{"label": f"sdpa {s}", "backend": "sdpa", "sdpa_kernel": s, "block_q": 64,
             "block_k": 64} for s in SDPA]
    return out


def attention_flops(b: int, t: int, d_model: int) -> float:
    """Forward and backward of causal attention, the FA2 paper's count: the forward's two
    matmuls over the causal half of the score square (2 x B x T^2 x d), the backward 2.5x it."""
    return 7.0 * b * t * t * d_model


def parse_shapes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        b, _, t = part.strip().lower().partition("x")
        if not (b.isdigit() and t.isdigit()):
            raise SystemExit(f"--shapes: {part!r} is not BxT (e.g. 8x2048)")
        out.append((int(b), int(t)))
    return out


def one(arm: dict[str, Any], b: int, t: int, args: argparse.Namespace, dev: Any) -> dict[str, Any]:
    """Time one arm at one shape; the record (status ok, unavailable or failed)."""
    import torch

    from orchestrator.core.errors import BackendUnavailable
    from orchestrator.platform import kernel_bench
    from orchestrator.spec.config import BucketConfig
    from recipes.gpt.attention import resolve_backend
    from recipes.gpt.config import AttentionConfig, GPTModelConfig, GPTWorkloadConfig
    from recipes.gpt.recipe import attention_microbench

    att = AttentionConfig(backend=arm["backend"], sdpa_kernel=arm["sdpa_kernel"],
                          block_q=arm["block_q"], block_k=arm["block_k"])
    bucket = BucketConfig(name=f"{b}x{t}", seq_len=t, micro_batch=b)
    workload = GPTWorkloadConfig(name="kernels", precision=args.dtype, buckets=[bucket],
                                 model=GPTModelConfig(n_head=args.n_head, d_model=args.d_model,
                                                      attention=att))
    runs = resolve_backend(arm["backend"], torch.device(dev.torch_device))
    what = (f"{runs}-{arm['block_q']}x{arm['block_k']}" if arm["backend"] == "fa2"
            else f"sdpa-{arm['sdpa_kernel']}")
    rec: dict[str, Any] = {"arm": arm["label"], "runs": what, "micro_batch": b, "seq_len": t,
                           "d_model": args.d_model, "n_head": args.n_head, "dtype": args.dtype,
                           "flops": attention_flops(b, t, args.d_model)}
    try:
        call = attention_microbench(workload, bucket, dev.torch_device)
        timing = kernel_bench.bench(call, dev, warmup_calls=args.warmup_calls,
                                    min_calls=args.min_calls, max_calls=args.max_calls,
                                    time_cap_s=args.time_cap_s)
    except BackendUnavailable as exc:
        return {**rec, "status": "unavailable", "error": str(exc).splitlines()[0][:300]}
    except Exception as exc:  # noqa: BLE001 - an OOM, a tile the kernel cannot run: data
        first = (str(exc).strip().splitlines() or [""])[0]
        return {**rec, "status": "failed", "error": f"{type(exc).__name__}: {first[:300]}"}
    finally:
        if dev.kind == "cuda":
            torch.cuda.empty_cache()
    fields = timing.fields()
    fields.pop("call_times_s")  # the quantiles say enough; keeps the file small
    med = timing.median_s
    return {**rec, "status": "ok", **fields, "calls": len(timing.times_s),
            "tflops": rec["flops"] / med / 1e12 if med > 0 else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--n-head", type=int, default=16)
    ap.add_argument("--shapes", default="8x2048,16x1024,4x4096")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--min-calls", type=int, default=10)
    ap.add_argument("--max-calls", type=int, default=1000)
    ap.add_argument("--warmup-calls", type=int, default=3)
    ap.add_argument("--time-cap-s", type=float, default=1.0, help="per arm and shape")
    ap.add_argument("--deadline-s", type=float, default=25.0,
                    help="no arm starts after this many seconds (the rest: skipped)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    from orchestrator.platform import device as devmod  # start-up cost: torch

    dev = devmod.resolve(args.device)
    shapes = parse_shapes(args.shapes)
    results = []
    for b, t in shapes:
        for arm in arms():
            if time.monotonic() - t0 > args.deadline_s:
                results.append({"arm": arm["label"], "micro_batch": b, "seq_len": t,
                                "status": "skipped",
                                "error": f"--deadline-s {args.deadline_s:g} s passed"})
                continue
            rec = one(arm, b, t, args, dev)
            results.append(rec)
            shown = (f"{rec['call_time_median_s'] * 1e3:.3f} ms, {rec['tflops']:.4g} TFLOP/s"
                     if rec["status"] == "ok" else f"{rec['status']}: {rec.get('error')}")
            print(f"{b}x{t} {arm['label']}: {shown}", flush=True)
    out = {"device": {"kind": dev.kind, "name": dev.name}, "d_model": args.d_model,
           "n_head": args.n_head, "dtype": args.dtype, "shapes": [f"{b}x{t}" for b, t in shapes],
           "flops_definition": "7 x micro_batch x seq_len^2 x d_model (causal forward + "
                               "backward, the FA2 paper's count)",
           "elapsed_s": time.monotonic() - t0, "results": results}
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1), encoding="utf-8")
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
