"""The ``command`` recipe: a command template, its log parser and its warm-up skip.

The template's ``{name}`` fields come from ``workload.params`` and the built-ins below; a literal
brace is written ``{{`` / ``}}``. Without ``shell: true`` the template is split like a shell
would (quotes respected) and each argument is filled in separately, so values with spaces stay
one argument; with ``shell: true`` values are shell-quoted into the string.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from typing import Any

from orchestrator.spec.config import BucketConfig
from orchestrator.core.logparse import StepRecord, compile_pattern, parse_steps
from recipes.base import Invocation, TrainerHooks, external_recipe
from recipes.command.config import CommandWorkloadConfig, work_per_step


def node_values(world_size: int, nnodes: int) -> dict[str, Any]:
    """The placeholders of a launch across machines. The command is started once per node
    (launcher=slurm gives each node's task NNODES, NODE_RANK and the first node's MASTER_ADDR
    and MASTER_PORT: orchestrator.launch.slurm.rank_env); on one machine they describe a
    single-node launch (node 0 of 1, this machine's loopback and a free port), so the same
    ``torchrun --nnodes {nnodes} --node-rank {node_rank} --nproc-per-node {nproc_per_node}
    --rdzv-endpoint {rdzv_endpoint}`` runs on either."""
    env = os.environ
    nnodes = int(env.get("NNODES") or nnodes or 1)
    addr = env.get("MASTER_ADDR") or "127.0.0.1"
    port = int(env.get("MASTER_PORT") or 0) or free_port()
    return {"nnodes": nnodes, "node_rank": int(env.get("NODE_RANK") or 0),
            "nproc_per_node": max(1, world_size // max(1, nnodes)),
            "master_addr": addr, "master_port": port, "rdzv_endpoint": f"{addr}:{port}"}


def launch_env(vals: dict[str, Any]) -> dict[str, str]:
    """The environment a trainer that reads the usual variables itself expects, in a launch
    over several machines: NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT; with one process per
    node (the command is the rank: ``world_size == nnodes``) also RANK, WORLD_SIZE, LOCAL_RANK
    and LOCAL_WORLD_SIZE. With more, the command starts its ranks itself (torchrun sets those
    for them). On one machine nothing: a trainer that turns distributed on when it sees RANK
    (nanoGPT) must run as it would by hand."""
    if vals["nnodes"] <= 1:
        return {}
    env = {"NNODES": str(vals["nnodes"]), "NODE_RANK": str(vals["node_rank"]),
           "MASTER_ADDR": str(vals["master_addr"]), "MASTER_PORT": str(vals["master_port"])}
    if vals["nproc_per_node"] == 1:
        env.update(RANK=str(vals["node_rank"]), WORLD_SIZE=str(vals["world_size"]),
                   LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    return env


def free_port() -> int:
    """A TCP port free on this machine now (for a single-node launch's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CommandTrainer(TrainerHooks):
    def __init__(self, workload: CommandWorkloadConfig, bucket: BucketConfig, device: str) -> None:
        self.workload = workload
        self.bucket = bucket
        self.device = device
        # None: unknown (the bucket shape does not reach the command); logged tokens override
        self.tokens_per_step, self.tokens_source = work_per_step(workload, bucket)
        self.pattern = compile_pattern(workload.log.pattern) if workload.log.pattern else None

    def values(self, trial_dir: str, warmup_steps: int, measured_steps: int) -> dict[str, Any]:
        w, b = self.workload, self.bucket
        return {
            **node_values(w.world_size, getattr(w, "nnodes", 1) or 1),
            **w.params,
            "python": sys.executable,
            "steps": warmup_steps + measured_steps,
            "warmup_steps": warmup_steps,
            "measured_steps": measured_steps,
            "bucket": b.name,
            "seq_len": b.seq_len,
            "micro_batch": b.micro_batch,
            "seed": w.seed,
            "world_size": w.world_size,
            "trial_dir": trial_dir,
            "device": self.device,
        }

    def invocation(self, trial_dir: str, warmup_steps: int, measured_steps: int,
                   timeout_s: float | None) -> Invocation:
        w = self.workload
        vals = self.values(trial_dir, warmup_steps, measured_steps)
        argv: list[str] | str
        if w.shell:
            argv = w.command.format_map({k: shlex.quote(str(v)) for k, v in vals.items()})
        else:
            argv = [arg.format_map(vals) for arg in shlex.split(w.command)]
        limit = w.time_limit_s if w.time_limit_s is not None else (
            0.95 * timeout_s if timeout_s else None)
        return Invocation(
            argv=argv,
            cwd=w.cwd.format_map(vals) if w.cwd else None,
            env={k: str(v).format_map(vals) for k, v in w.env.items()},
            launch_env=launch_env(vals),
            log_file=w.log.file.format_map(vals) if w.log.file else None,
            time_limit_s=limit,
        )

    # the numerator of MFU when the workload declares it (workload.flops_per_step)
    useful_flops_definition = ("useful FLOPs of one step on one device as declared by "
                               "workload.flops_per_step (the user's figure; not counted here)")

    def useful_flops_per_step(self) -> float | None:
        f = self.workload.flops_per_step
        return None if f is None else float(f)

    def parse(self, lines: list[str]) -> list[StepRecord]:
        # torchtitan's tps needs the tokens of a step and the devices (core/logparse.py)
        return parse_steps(lines, self.workload.log.pattern, tokens_per_step=self.tokens_per_step,
                           world_size=self.workload.world_size,
                           log_interval=self.workload.log.log_interval)

    def skip_steps(self, warmup_steps: int) -> int:
        skip = self.workload.log.skip_steps
        return warmup_steps if skip is None else skip


@external_recipe
def build(workload: CommandWorkloadConfig, bucket: BucketConfig, device: str) -> CommandTrainer:
    return CommandTrainer(workload, bucket, device)
