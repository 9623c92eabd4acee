"""A small torch trainer for one GPU (or the CPU): the stand-in for "your trainer" on a device,
with a planted slowdown that is real work on the device.

The model is ``--layers`` square linear layers of width ``--width`` with GELUs between them,
trained by AdamW on ``--rows`` rows per step (bf16 autocast on a GPU unless ``--dtype fp32``)
to regress a fixed random projection of its input; four batches are made once on the device
and cycled, so no host work or copy sits in a step. A step's matmul work is 3 x layers
(row x width) @ (width x width) products (forward 1, backward 2). ``--extra-work-pct P``
plants P % more of it: round(P / 100 x 3 x layers) more such products per step, inside the
step, on a tensor nothing reads (the model, its updates and its losses stay the same, so the
logged-loss check passes). With the defaults (20 layers) 7 % is 4 products: 7 % of the
matmul work, some 5 % of the step where the matmuls are three quarters of it (the optimizer
and the elementwise work are not planted).

It uses :mod:`orchestrator.client` the four-call way: the loop runs ``client.steps``, reads
``extra_work_pct`` through ``client.params`` every step, times the step in ``client.timed()``
and reports the loss. So one run of it switches between arms block by block
(``protocol.pairing=steps``, ``bench/gpu_run/conf/workload/gpu_trainer.yaml``), and with
``protocol.pairing=process`` each run is one arm (its value from ``ORCH_CLIENT_PARAMS``) and
its step times come from the log, one line per step::

    step 12 | loss 0.4375 | time 9.012ms

(the time from the step's start to its loss on the host: ``loss.item()`` waits for the
device). Outside a campaign the client calls are no-ops and it trains as it is told.

    python recipes/examples/gpu_trainer.py --steps 20 --device cpu --width 64 --layers 4 --rows 64 \
        --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F

from orchestrator import client


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--device", default="auto", help="auto (cuda where there is one), cuda, cpu")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=20)
    p.add_argument("--rows", type=int, default=8192, help="rows (tokens) per step")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                   help="bf16: autocast on a GPU (fp32 on the CPU whatever this says)")
    p.add_argument("--extra-work-pct", type=float, default=0.0,
                   help="planted: this many percent more matmul work per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op CPU threads (0: torch's default); 1 keeps a tiny CPU run's "
                        "steps from stalling on a machine whose cores it shares")
    return p.parse_args(argv)


def extra_products(pct: float, layers: int) -> int:
    """The planted products per step for ``pct`` % more matmul work (3 per layer a step)."""
    return max(0, round(pct / 100.0 * 3 * layers))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    name = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    low = a.dtype == "bf16" and dev.type != "cpu"  # bf16 autocast on a GPU only
    torch.manual_seed(a.seed)
    g = torch.Generator(device=dev).manual_seed(a.seed)
    layers: list[torch.nn.Module] = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width, bias=False, device=dev), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers[:-1])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    teacher = torch.randn(a.width, a.width, device=dev, generator=g) / a.width ** 0.5
    batches = [torch.randn(a.rows, a.width, device=dev, generator=g) for _ in range(4)]
    targets = [x @ teacher for x in batches]
    # the planted work: products on a tensor nothing reads, in the dtype the model's run in
    dt = torch.bfloat16 if low else torch.float32
    junk = torch.randn(a.rows, a.width, device=dev, generator=g).to(dt)
    junk_w = (torch.randn(a.width, a.width, device=dev, generator=g) / a.width ** 0.5).to(dt)
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type
    print(f"gpu_trainer: {sum(p.numel() for p in model.parameters())} parameters, "
          f"{a.layers} layers of {a.width}, {a.rows} rows, on {where}"
          f"{' (bf16 autocast)' if low else ''}", flush=True)
    for i in client.steps(a.steps):
        pct = float(client.params({"extra_work_pct": a.extra_work_pct})["extra_work_pct"])
        extra = extra_products(pct, a.layers)
        x, y = batches[i % 4], targets[i % 4]
        t0 = time.perf_counter()
        with client.timed():
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=low):
                loss = F.mse_loss(model(x).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                z = junk
                for _ in range(extra):
                    z = z @ junk_w
        value = loss.item()  # waits for the device: the log's time is the step's
        ms = (time.perf_counter() - t0) * 1e3
        client.report(loss=value)
        print(f"step {i + 1} | loss {value:.6f} | time {ms:.3f}ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
