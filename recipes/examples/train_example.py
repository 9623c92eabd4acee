"""A small standalone training script, the stand-in for "your own trainer".

It knows nothing about the orchestrator: it trains a tiny next-token model on a seeded synthetic
stream and prints one line per step in a common log format, e.g.::

    step 12 | loss 3.9876 | time 4.21ms | tokens 256

which ``orchestrator.core.logparse`` reads (``--log-format json`` and ``kv`` print the other built-in
formats; ``custom`` prints ``[it 12] 4.210 ms/it loss=3.9876``, which only a
``workload.log.pattern`` reads; ``--log-file`` writes the step lines to a file instead of
stdout). The first line names the intra-op thread count (``--threads 0`` leaves it to
``OMP_NUM_THREADS``) and the run name from ``$EXAMPLE_RUN_NAME``, so a test can see what reached
the process. ``--delay-ms`` plants a slowdown inside every step; ``--fail-at-step`` exits with an
error, ``--nan-at-step`` makes the loss NaN from that step on (a diverged run that keeps going,
printing ``loss nan``) and ``--log-format none`` never prints a step line, for fault tests.

    python recipes/examples/train_example.py --steps 20 --seq-len 32 --batch-size 4
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="intra-op CPU threads (0 = torch's default)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="planted extra time per step")
    p.add_argument("--log-format", choices=["text", "json", "kv", "custom", "none"], default="text")
    p.add_argument("--log-file", default=None, help="write step lines here instead of stdout")
    p.add_argument("--fail-at-step", type=int, default=-1)
    p.add_argument("--nan-at-step", type=int, default=-1,
                   help="poison the loss with NaN from this step on (the weights follow)")
    return p.parse_args(argv)


def batch(seed: int, index: int, b: int, t: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 7919 + index)
    start = torch.randint(0, vocab, (b, 1), generator=g)
    tokens = (start + torch.arange(t + 1) * 3 + torch.randint(0, 2, (b, t + 1), generator=g)) % vocab
    return tokens[:, :-1], tokens[:, 1:]


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    model = torch.nn.Sequential(
        torch.nn.Embedding(a.vocab, a.width), torch.nn.Linear(a.width, a.width), torch.nn.GELU(),
        torch.nn.Linear(a.width, a.vocab),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    print(f"training {sum(p.numel() for p in model.parameters())} parameters for {a.steps} steps "
          f"on {torch.get_num_threads()} thread(s), run {os.environ.get('EXAMPLE_RUN_NAME', '-')}",
          flush=True)
    # closed after the last step; kept open across the loop like a trainer's log handle
    out = open(a.log_file, "w", encoding="utf-8") if a.log_file else sys.stdout  # noqa: SIM115

    def emit(text: str) -> None:
        print(text, file=out, flush=True)

    tokens = a.batch_size * a.seq_len
    for step in range(a.steps):
        t0 = time.perf_counter()
        x, y = batch(a.seed, step, a.batch_size, a.seq_len, a.vocab)
        x, y = x.to(dev), y.to(dev)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).view(-1, a.vocab), y.reshape(-1))
        if 0 <= a.nan_at_step <= step:
            loss = loss * float("nan")
        loss.backward()
        opt.step()
        if a.delay_ms:
            time.sleep(a.delay_ms / 1e3)
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        if step == a.fail_at_step:
            print(f"RuntimeError: planted failure at step {step}", file=sys.stderr, flush=True)
            return 3
        value = loss.item()
        if a.log_format == "text":
            emit(f"step {step} | loss {value:.4f} | time {ms:.3f}ms | tokens {tokens}")
        elif a.log_format == "json":
            emit(json.dumps({"step": step, "loss": value, "step_time_ms": ms, "tokens": tokens}))
        elif a.log_format == "kv":
            emit(f"step={step} loss={value:.4f} step_time_ms={ms:.3f} tokens={tokens}")
        elif a.log_format == "custom":
            emit(f"[it {step}] {ms:.3f} ms/it loss={value:.4f}")
        else:
            emit(f"finished batch of {tokens} tokens, loss looks fine")
    print("done", flush=True)
    if out is not sys.stdout:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
