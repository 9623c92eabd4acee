"""The correctness probe: one arm, every bucket, in its own process.

Run as ``python -m orchestrator.worker.probe SPEC.json``. From the same seed, the same
initial weights (``init.pt``, written by the baseline's probe and loaded by every arm) and the
same batch (the baseline's first batch per bucket), it records:

- forward outputs (twice, to expose a stochastic forward), the loss, per-parameter gradients of
  one backward, and the optimizer's update of one ``train_step`` from the initial weights;
- the loss over ``steps`` training steps on the arm's own batch stream, with a hash of every
  batch (data order);
- checkpoint facts: the state_dict signature, whether the baseline's weights load, a save/load
  round trip at step ``steps // 2`` replayed in a fresh trainer, and (baseline repeat only) whether
  each variant's final checkpoint loads into the baseline and gives the same loss.

Tensors go to ``<probe_dir>/<bucket>.pt`` so the analysis can be redone; facts to
``probe.json``, written atomically. A failure of the workload becomes the record's status.

A distributed workload (``workload.world_size`` = G > 1) is probed by G ranks, started by the
runner through ``torch.distributed.run`` (gloo on CPU): every rank runs the same steps; the
trainer's ``state_dict`` returns the full (gathered) weights and its ``load_state_dict`` keeps
each rank's shard of them, and its optional ``full_tensor(name, shard)`` gathers a sharded
parameter's gradient and update, so ``init.pt``, the checkpoints and the recorded tensors are
the whole model's, comparable across modes and group sizes. Rank 0 writes every shared file
(``init.pt``, the probe batch, the tensors, ``final.pt``, ``probe.json``); the resume
checkpoint, which holds this rank's optimizer state, is per rank.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import platform
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.core.records import Status
from orchestrator.platform import device as devmod
from orchestrator.platform import distributed as distmod
from orchestrator.spec.config import BucketConfig
from orchestrator.core.convert import from_dict
from orchestrator.core.errors import BackendUnavailable
from orchestrator.spec.jobs import ProbeSpec
from orchestrator.core.results import SCHEMA_VERSION, atomic_write_json
from orchestrator.worker.bootstrap import Worker, start_worker, worker_main
from recipes.base import probe_hooks_missing

# the record types (probe.json); mypy takes no keywords in a TypedDict's update(), so those
# calls below say type: ignore[call-arg]
if TYPE_CHECKING:  # start-up cost: the comparisons (and torch) load only where a probe runs
    import torch

    from orchestrator.analysis.correctness.compare import (
        CrossLoad,
        ProbeBucket,
        ProbeRecord,
        StepTensors,
    )



class Unsupported(Exception):
    """The recipe offers no model to probe (no hooks): recorded as status ``unsupported``."""


def atomic_torch_save(obj: Any, path: Path) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _load(path: str | Path, device: Any) -> Any:
    import torch

    return torch.load(path, map_location=device, weights_only=True)


# --------------------------------------------------------------------------- batches


def batch_tensors(batch: Any) -> dict[str, torch.Tensor]:
    """The tensors of a batch by field name (dataclass, mapping, tuple or one tensor)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return {"": batch}
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        items = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    elif isinstance(batch, dict):
        items = dict(batch)
    elif isinstance(batch, (tuple, list)):
        items = {str(i): v for i, v in enumerate(batch)}
    else:
        raise TypeError(f"cannot take tensors out of a batch of type {type(batch).__name__}")
    return {k: v for k, v in items.items() if isinstance(v, torch.Tensor)}


def with_tensors(batch: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """``batch`` with its tensor fields replaced (same structure, same device as ``batch``)."""
    own = batch_tensors(batch)
    moved = {k: tensors[k].to(own[k].device) for k in own}
    if "" in moved:
        return moved[""]
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(batch, **moved)
    if isinstance(batch, dict):
        return {**batch, **moved}
    seq = list(batch)
    for k, v in moved.items():
        seq[int(k)] = v
    return type(batch)(seq)


def batch_hash(batch: Any) -> str:
    """A short content hash of a batch: equal hashes = the same samples in the same order."""
    import torch

    h = hashlib.sha256()
    for k, t in sorted(batch_tensors(batch).items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{k}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- the probe


def _unwrap(model: Any) -> Any:
    import torch

    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, torch.nn.Module) else model


def signature(state: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        k: [list(v.shape), str(v.dtype).removeprefix("torch.")]
        for k, v in state.items()
        if hasattr(v, "shape")
    }


def matmul_precision() -> str:
    """'fp32' unless float32 matmuls are allowed a lower internal precision (TF32 and friends)."""
    import torch

    allow = bool(
        getattr(getattr(torch.backends, "cuda", None), "matmul", None)
        and torch.backends.cuda.matmul.allow_tf32
    )
    return "tf32" if allow or torch.get_float32_matmul_precision() != "highest" else "fp32"


def _is_writer() -> bool:
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def _barrier() -> None:
    """Wait until rank 0 has written what the other ranks read next (no-op on one rank)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _rank_suffix() -> str:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return f".rank{dist.get_rank()}"
    return ""


def _steps(trainer: Any, stream: Iterator[Any], first: int, last: int, seed: int) -> list[float]:
    """Train steps ``first..last-1``; the RNG is reseeded per step so dropout masks match."""
    import torch

    losses = []
    for i in range(first, last):
        batch = next(stream)
        torch.manual_seed(seed + 1 + i)
        losses.append(float(trainer.train_step(batch).float().item()))
    return losses


def probe_bucket(
    spec: ProbeSpec,
    worker: Worker,
    bucket: BucketConfig,
    first: bool,
    record: ProbeRecord,
) -> ProbeBucket:
    """One bucket's probe: from the baseline's initial weights and batch, the outputs, loss,
    gradients and update of one step, a loss trajectory, a checkpoint round trip, and (first
    bucket) the checkpoint facts and cross-loads; the tensors go to ``<bucket>.pt``."""
    dev = worker.device
    assert dev is not None
    trainer = worker.trainer(bucket)
    missing = probe_hooks_missing(trainer)
    if missing:
        raise Unsupported(f"the recipe's trainer lacks the hooks {missing} (see recipes/base.py)")
    writer = _is_writer()
    batch, res = _shared_start(spec, trainer, bucket, first, record, writer, dev)
    seed = worker.workload.seed
    params = dict(_unwrap(trainer.model).named_parameters())
    fresh_opt = copy.deepcopy(trainer.optimizer.state_dict())
    p0 = {n: p.detach().clone() for n, p in params.items()}
    tensors = _one_step(trainer, params, p0, batch, seed, res)
    out_dir = Path(spec.probe_dir)
    losses = _trajectory(spec, worker, trainer, params, p0, fresh_opt, bucket, seed, res)
    import torch  # start-up cost: torch only where a probe runs

    torch.manual_seed(seed)
    with torch.no_grad():
        res["final_eval_loss"] = float(trainer.forward_loss(batch).float().item())
    if first:
        final = out_dir / "final.pt"
        final_state = trainer.state_dict()
        if writer:
            atomic_torch_save(final_state, final)
        record["checkpoint"]["final"] = str(final)
        record["cross_loads"] = {
            a: _cross_load(trainer, p, batch, seed, dev) for a, p in spec.cross_load.items()
        }
    if not writer:
        _barrier()
        return res
    atomic_torch_save({**tensors, "trajectory": torch.tensor(losses)},
                      out_dir / f"{bucket.name}.pt")
    res["tensors"] = f"{bucket.name}.pt"
    _barrier()
    return res


def _shared_start(spec: ProbeSpec, trainer: Any, bucket: BucketConfig, first: bool,
                  record: ProbeRecord, writer: bool, dev: Any) -> tuple[Any, ProbeBucket]:
    """The baseline writes its initial weights and its batch; every arm loads both (an
    incompatible checkpoint is a finding, not a crash). Returns (batch, the bucket's result)."""
    init_path = Path(spec.init_checkpoint)
    if spec.role == "baseline" and first:
        init_state = trainer.state_dict()
        if writer:
            atomic_torch_save(init_state, init_path)
    own_batch = next(trainer.batches())
    batch_path = Path(spec.batch_dir) / f"{bucket.name}.pt"
    if spec.role == "baseline" and writer:
        atomic_torch_save(
            {k: t.detach().cpu() for k, t in batch_tensors(own_batch).items()}, batch_path
        )
    _barrier()
    batch = with_tensors(own_batch, _load(batch_path, "cpu"))
    res: ProbeBucket = {"bucket": bucket.name}
    init = _load(init_path, dev.torch_device)
    if first:
        record["checkpoint"]["signature"] = signature(trainer.state_dict())
    try:
        trainer.load_state_dict(init)
        res["from_baseline_weights"] = True
    except Exception as exc:  # incompatible checkpoint: a finding, not a crash
        res["from_baseline_weights"] = False
        if first:
            record["checkpoint"]["load_baseline_error"] = _one_line(exc)
    return batch, res


def _one_step(trainer: Any, params: dict[str, torch.Tensor], p0: dict[str, torch.Tensor],
              batch: Any, seed: int, res: ProbeBucket) -> StepTensors:
    """Outputs (twice: the forward's own repeatability), loss, gradients and the optimizer's
    update of one step; a sharded tensor as the whole one (``full_tensor``)."""
    import torch  # start-up cost: torch only where a probe runs

    full = trainer.full_tensor
    torch.manual_seed(seed)
    with torch.no_grad():
        out = trainer.forward_outputs(batch).detach().float()
        out2 = trainer.forward_outputs(batch).detach().float()
    res["forward_repeat_rel_l2"] = _rel(out2, out)
    torch.manual_seed(seed)
    trainer.optimizer.zero_grad(set_to_none=True)
    loss = trainer.forward_loss(batch)
    loss.backward()
    grads = {
        n: full(n, p.grad.detach().float() if p.grad is not None else torch.zeros_like(p))
        .cpu().clone()
        for n, p in params.items()
    }
    res["params_without_grad"] = [n for n, p in params.items() if p.grad is None]
    torch.manual_seed(seed)
    trainer.train_step(batch)
    update = {n: full(n, params[n].detach().float() - p0[n].float()).cpu() for n in params}
    return {"outputs": out.cpu(), "loss": loss.detach().float().cpu().reshape(1),
            "grads": grads, "update": update}


def _trajectory(spec: ProbeSpec, worker: Worker, trainer: Any, params: dict[str, torch.Tensor],
                p0: dict[str, torch.Tensor], fresh_opt: Any, bucket: BucketConfig, seed: int,
                res: ProbeBucket) -> list[float]:
    """From the same initial weights and a fresh optimizer: ``spec.steps`` losses and the
    batches seen, a checkpoint at step k = steps/2, and a fresh trainer that resumes from it
    and replays the rest (the round trip)."""
    import torch  # start-up cost: torch only where a probe runs

    with torch.no_grad():
        for n, p in params.items():
            p.copy_(p0[n])
    trainer.optimizer.load_state_dict(fresh_opt)
    k = spec.steps // 2
    hashes, ids = [], []

    def seen(it: Iterator[Any]) -> Iterator[Any]:
        for b in it:
            hashes.append(batch_hash(b))
            ids.append(getattr(b, "index", None))
            yield b

    tracked = seen(trainer.batches())
    losses = _steps(trainer, tracked, 0, k, seed)
    # this rank's optimizer
    resume_path = Path(spec.probe_dir) / f"{bucket.name}.resume{_rank_suffix()}.pt"
    atomic_torch_save(
        {"model": trainer.state_dict(), "optimizer": trainer.optimizer.state_dict()}, resume_path
    )
    losses += _steps(trainer, tracked, k, spec.steps, seed)
    res.update(batch_hashes=hashes, batch_ids=ids, losses=losses)  # type: ignore[call-arg]
    fresh = worker.trainer(bucket)
    assert worker.device is not None
    state = _load(resume_path, worker.device.torch_device)
    fresh.load_state_dict(state["model"])
    fresh.optimizer.load_state_dict(state["optimizer"])
    replay = fresh.batches()
    for _ in range(k):
        next(replay)
    res["round_trip"] = {"resume_step": k, "losses": _steps(fresh, replay, k, spec.steps, seed)}
    del fresh, state
    resume_path.unlink(missing_ok=True)
    return losses


def _cross_load(trainer: Any, path: str, batch: Any, seed: int, dev: Any) -> CrossLoad:
    """Load a variant's final weights into this (baseline) trainer; its loss on the probe batch."""
    import torch

    try:
        trainer.load_state_dict(_load(path, dev.torch_device))
    except Exception as exc:
        return {"ok": False, "error": _one_line(exc)}
    torch.manual_seed(seed)
    with torch.no_grad():
        return {"ok": True, "eval_loss": float(trainer.forward_loss(batch).float().item())}


def _rel(a: Any, b: Any) -> float:
    nb = float(b.double().norm())
    d = float((a.double() - b.double()).norm())
    return d / nb if nb > 0 else (0.0 if d == 0 else float("inf"))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")


def run_probe(spec: ProbeSpec) -> ProbeRecord:
    """Run the probe and write probe.json. Never raises for a failure of the workload."""
    t0 = time.perf_counter()
    Path(spec.probe_dir).mkdir(parents=True, exist_ok=True)
    record: ProbeRecord = {
        "schema_version": SCHEMA_VERSION,
        "name": spec.name,
        "arm_id": spec.arm_id,
        "arm_label": spec.arm_label,
        "role": spec.role,
        "pid": os.getpid(),
        "checkpoint": {},
        "buckets": {},
    }
    ctx = None
    try:
        import torch

        worker = start_worker(spec.workload, spec.device)  # device, then the process group
        dev, ctx = worker.device, worker.group  # ctx: None on one rank
        if dev is None:
            raise Unsupported(f"recipe {worker.workload.recipe!r} runs an external command: "
                              "there is no model in this process to probe")
        if ctx is not None:
            record["world_size"] = ctx.world_size
        record.update(  # type: ignore[call-arg]
            device={"kind": dev.kind, "name": dev.name},
            torch_version=torch.__version__,
            python_version=platform.python_version(),
            precision=worker.workload.precision,
        )
        for i, b in enumerate(spec.buckets):
            bucket = from_dict(BucketConfig, b)
            record["buckets"][bucket.name] = probe_bucket(spec, worker, bucket, i == 0, record)
        record["matmul_precision"] = matmul_precision()
        record["status"] = Status.OK
    except BackendUnavailable as exc:
        record.update(status="unavailable", error=str(exc))  # type: ignore[call-arg]
    except Unsupported as exc:
        record.update(status="unsupported", error=str(exc))  # type: ignore[call-arg]
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        record.update(  # type: ignore[call-arg]
            status="oom" if devmod.is_oom(exc) else "failed",
            error=_one_line(exc),
            traceback=traceback.format_exc(limit=8),
        )
    record["probe_seconds"] = time.perf_counter() - t0
    if ctx is None or ctx.is_writer:
        atomic_write_json(Path(spec.probe_dir) / "probe.json", record)
    if ctx is not None and record["status"] == Status.OK:
        distmod.shutdown()
    return record


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, "orchestrator.worker.probe",
                       lambda path: run_probe(ProbeSpec.from_file(path)),
                       "probe", "name",
                       (Status.OK, Status.UNAVAILABLE, "unsupported"), distributed_fails=True)


if __name__ == "__main__":
    sys.exit(main())
