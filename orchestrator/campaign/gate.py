"""Running the gate once per campaign and reading it back (the I/O shell).

Order: the baseline's probe (writes ``init.pt`` and the probe batches), each variant's probe,
then the baseline again: its repeat gives the noise floor and tries every variant's final
checkpoint. The probes are worker jobs dispatched through the campaign's launcher like the
timed trials (``Launcher.run_jobs``): each is a fresh ``python -m orchestrator.worker.probe``
process with ``launcher=local``, one Slurm job runs them all on a compute node with
``launcher=slurm``, and they run in this process with ``launcher=inline`` (for debugging); a
distributed workload's probe (``workload.world_size`` = G > 1) is G ranks. A probe that
crashes, hangs or is killed is recorded with a status; the gate then says so, and the campaign
goes on.

Artifacts, under the run directory::

    correctness.json                       the gate per variant, tolerance, noise floor, cost
    correctness/init.pt                    initial weights every arm starts from
    correctness/batches/<bucket>.pt        the probe batch every arm sees
    correctness/<probe>/probe.json         facts recorded by one probe (a0, a1, ..., a0-repeat)
    correctness/<probe>/<bucket>.pt        its tensors: outputs, loss, grads, update, trajectory
    correctness/<probe>/final.pt           its weights after the trajectory
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

from orchestrator.core.records import Pairing
from orchestrator.core.section import Section
from orchestrator.spec.config import Config
from orchestrator.core.convert import to_dict
from orchestrator.analysis.correctness.compare import ProbeDevice, ProbeRecord, ProbeTensors
from orchestrator.analysis.correctness.gate import (
    ArmGate,
    ArmGateDict,
    GateSummary,
    NoiseFloorSummary,
    TensorLoader,
    WorstTensor,
    evaluate,
)
from orchestrator.analysis.decide import Gate
from orchestrator.spec.jobs import ProbeSpec, WorkerJob
from orchestrator.launch.factory import make_launcher
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.launch.base import Launcher
from orchestrator.core.results import SCHEMA_VERSION, atomic_write_json, read_json, Status
from orchestrator.spec.sweep import Arm, Bucket, ResolvedArm, alternates
from orchestrator.worker.bootstrap import load_recipe

log = logging.getLogger(__name__)

FILE = "correctness.json"
DIR = "correctness"


class ProbeBrief(TypedDict):
    """A probe's outcome as correctness.json lists it (``probes.<probe>``), None where absent."""

    status: str | None
    error: str | None
    device: ProbeDevice | None
    torch_version: str | None
    matmul_precision: str | None
    pid: int | None


class CorrectnessDoc(TypedDict, total=False):
    """correctness.json: the gate per variant, tolerance, noise floor and cost; with the gate
    off or not applicable only ``mode``, ``reason`` and ``arms`` (empty)."""

    schema_version: int
    mode: str
    reason: str
    fingerprint: str
    precision: str
    tolerance_key: str
    tolerance: dict[str, float] | None  # the ToleranceConfig judged against
    steps: int
    in_process: bool
    launcher: str
    data_order_declared: bool
    gate_seconds: float
    probe_seconds: dict[str, float | None]
    seconds_per_variant: float | None
    probes: dict[str, ProbeBrief]
    noise_floor: dict[str, NoiseFloorSummary]
    evaluation_error: str
    arms: dict[str, ArmGateDict]


def data_order_declared(cfg: Config) -> bool:
    """Whether the sweep's variable (any knob field) lies under invariants.data_order_keys."""
    sweep = cfg.sweep
    if sweep is None:
        return False
    paths = list(sweep.knob.values()) if sweep.knob else [sweep.variable]
    keys = cfg.invariants.data_order_keys
    return any(p == k or p.startswith(k + ".") for p in paths for k in keys)


def external_reason(cfg: Config, arms: Sequence[ResolvedArm]) -> str | None:
    """Why no arm can be probed in-process (an external command, or a baseline whose recipe
    declares it cannot be probed: recipes.base.unprobeable), else None."""
    for arm in arms:
        recipe = arm.workload.get("recipe", "")
        try:
            loaded = load_recipe(recipe)
        except Exception:  # noqa: BLE001 (an unknown recipe fails its own probe, as data)
            continue
        external = loaded.external
        unprobed = loaded.unprobeable if arm is arms[0] else None
        if unprobed:  # as a probe would find: the baseline cannot be probed, so no arm is
            return (f"the baseline cannot be probed: recipe {recipe!r} declares its trainers "
                    f"have no probe hooks ({unprobed})")
        if not external:
            continue
        why = (f"arm {arm.label!r} runs an external command (recipe {recipe!r}): there is no "
               "model in this process to probe")
        if cfg.protocol.pairing == Pairing.steps and not alternates(arms):
            return (f"{why}, and paired by steps the arms take turns on one run of the "
                    "trainer, so their logged losses are not step-for-step comparable either; "
                    "check numerics with a campaign under protocol.pairing=process, which "
                    "compares each arm's logged loss with the baseline's (workload.loss_rtol)")
        return (f"{why}; its logged loss is compared with the baseline's instead "
                "(workload.loss_rtol)")
    return None


def probe_specs(
    cfg: Config, run_dir: Path, arms: Sequence[ResolvedArm], buckets: Sequence[Bucket]
) -> list[ProbeSpec]:
    root = run_dir / DIR
    steps = cfg.protocol.correctness.steps

    def spec(arm: ResolvedArm, name: str, role: str, cross: dict[str, str] | None = None) -> ProbeSpec:
        return ProbeSpec(
            name=name,
            arm_id=arm.arm_id,
            arm_label=arm.label,
            role=role,
            probe_dir=str(root / name),
            workload=arm.job_workload(),
            buckets=list(buckets),
            init_checkpoint=str(root / "init.pt"),
            batch_dir=str(root / "batches"),
            device=cfg.device,
            steps=steps,
            cross_load=cross or {},
            env=dict(arm.env),
        )

    base = arms[0]
    finals = {a.arm_id: str(root / a.arm_id / "final.pt") for a in arms[1:]}
    return (
        [spec(base, base.arm_id, "baseline")]
        + [spec(a, a.arm_id, "variant") for a in arms[1:]]
        + [spec(base, f"{base.arm_id}-repeat", "baseline_repeat", finals)]
    )


def _loader(run_dir: Path) -> TensorLoader:
    import torch

    def load(name: str, bucket: str) -> ProbeTensors | None:
        path = run_dir / DIR / name / f"{bucket}.pt"
        if not path.exists():
            return None
        return torch.load(path, map_location="cpu", weights_only=True)  # type: ignore[no-any-return]

    return load


def _fingerprint(specs: Sequence[ProbeSpec], cfg: Config) -> str:
    return json.dumps(
        [[s.name, s.workload, s.buckets, s.env, s.steps] for s in specs]
        + [to_dict(cfg.invariants.tolerances), cfg.device],
        sort_keys=True,
    )


def run_gate(
    cfg: Config,
    run_dir: Path,
    arms: Sequence[ResolvedArm],
    buckets: Sequence[Bucket],
    launcher: Launcher | None = None,
) -> CorrectnessDoc:
    """Probe every arm once through the campaign's ``launcher`` (default: the one
    ``cfg.launcher`` names), judge, write correctness.json; reuse it on resume."""
    c = cfg.protocol.correctness
    path = run_dir / FILE
    if c.mode == "off":
        return _write(path, {"mode": "off", "arms": {}})
    external = external_reason(cfg, arms)
    if external:
        log.info("correctness gate: not applicable: %s", external)
        return _write(path, {"mode": "not_applicable", "reason": external, "arms": {}})
    specs = probe_specs(cfg, run_dir, arms, buckets)
    fp = _fingerprint(specs, cfg)
    old = _reusable(path, fp, c.mode)
    if old is not None:
        log.info("correctness gate: reusing %s", path)
        return old
    launcher = launcher or make_launcher(cfg.launcher, device=cfg.device, run_dir=run_dir)
    t0 = time.perf_counter()
    probes = _run_probes(launcher, specs, c.timeout_s)
    base = probes.get(arms[0].arm_id, {})
    if base.get("status") == "unsupported":  # e.g. a numpy workload: no torch model to compare
        reason = f"the baseline cannot be probed: {base.get('error')}"
        log.info("correctness gate: not applicable: %s", reason)
        return _write(path, {"mode": "not_applicable", "fingerprint": fp, "reason": reason,
                             "arms": {}})
    summary, gates = _judge(cfg, run_dir, arms, probes)
    doc = _gate_doc(cfg, launcher, probes, summary, gates, fp, time.perf_counter() - t0, arms)
    _write(path, doc)
    log.info(
        "correctness gate: %s in %.1f s (%s)",
        ", ".join(f"{g.label} {g.status}" for g in gates),
        doc["gate_seconds"],
        f"{doc['seconds_per_variant']:.1f} s per variant"
        if doc["seconds_per_variant"] is not None else "no variant",
    )
    return doc


def _write(path: Path, doc: CorrectnessDoc) -> CorrectnessDoc:
    doc = {"schema_version": SCHEMA_VERSION, **doc}
    atomic_write_json(path, doc)
    return doc


def _reusable(path: Path, fp: str, mode: str) -> CorrectnessDoc | None:
    """A resume: the gate an earlier invocation ran for the same probes, else None."""
    if not path.exists():
        return None
    try:
        old = read_json(path)
    except (OSError, json.JSONDecodeError):
        return None
    if old.get("fingerprint") == fp and old.get("mode") in (mode, "not_applicable"):
        return old  # type: ignore[no-any-return]
    return None


def _run_probes(launcher: Launcher, specs: Sequence[Any], timeout_s: float) -> dict[str, ProbeRecord]:
    """Every probe through the launcher, one after another; probe name -> record."""
    probes: dict[str, ProbeRecord] = {}

    def on_done(job: WorkerJob, rec: TrialRecordDict | ProbeRecord) -> None:  # launch.base.OnJobDone
        probes[job.job_id] = cast(ProbeRecord, rec)  # a probe job's record: probe.json
        if rec.get("status") != Status.OK:
            log.warning("correctness probe %s: %s: %s", job.job_id, rec.get("status"),
                        rec.get("error"))

    log.info("correctness probes through launcher=%s: %s", launcher.name,
             ", ".join(f"{s.name} ({s.arm_label}, {s.role})" for s in specs))
    launcher.run_jobs(specs, on_done, timeout_s)
    return probes


def _judge(cfg: Config, run_dir: Path, arms: Sequence[ResolvedArm],
           probes: dict[str, ProbeRecord]) -> tuple[GateSummary, list[ArmGate]]:
    """The probes judged against the tolerances; a bug in judging errors the gate, never the
    campaign."""
    try:
        return evaluate(arms, probes, _loader(run_dir), cfg.invariants.tolerances,
                        cfg.workload.precision, data_order_declared(cfg))
    except Exception as exc:  # a bug in judging must not lose the campaign: the gate errors
        log.exception("correctness gate evaluation failed")
        return ({"evaluation_error": f"{type(exc).__name__}: {exc}"},
                [ArmGate(a.arm_id, a.label, "error", [f"evaluation failed: {exc}"])
                 for a in arms[1:]])


def _gate_doc(cfg: Config, launcher: Launcher, probes: dict[str, ProbeRecord],
              summary: GateSummary, gates: list[ArmGate], fp: str, gate_s: float,
              arms: Sequence[ResolvedArm]) -> CorrectnessDoc:
    """correctness.json: what was probed, how long it took, each arm's gate."""
    c = cfg.protocol.correctness
    secs = {n: p.get("process_seconds") for n, p in probes.items()}
    var_secs = [float(v) for a in arms[1:] if (v := secs.get(a.arm_id)) is not None]
    key = summary.get("tolerance_key", cfg.workload.precision)
    return {
        "mode": c.mode,
        "fingerprint": fp,
        "precision": cfg.workload.precision,
        "tolerance_key": key,
        "tolerance": to_dict(cfg.invariants.tolerances.get(key)),
        "steps": c.steps,
        "in_process": launcher.name == "inline",
        "launcher": launcher.name,
        "data_order_declared": data_order_declared(cfg),
        "gate_seconds": gate_s,
        "probe_seconds": secs,  # wall time of each probe process, start-up included
        "seconds_per_variant": sum(var_secs) / len(var_secs) if var_secs else None,
        "probes": {
            n: cast(ProbeBrief, {k: p.get(k) for k in (
                "status", "error", "device", "torch_version", "matmul_precision", "pid")})
            for n, p in probes.items()
        },
        **cast(GateSummary, {k: v for k, v in summary.items() if k != "tolerance_key"}),
        "arms": {g.arm_id: g.to_dict() for g in gates},
    }


# --------------------------------------------------------------------------- reading it back


def load_gates(run_dir: Path, arms: Sequence[Arm], mode: str) -> dict[str, list[Gate]]:
    """Gates for :func:`orchestrator.analysis.decide.decide`; a missing file with the gate on = error."""
    if mode == "off":
        return {}
    path = run_dir / FILE
    if not path.exists():
        why = "correctness.json is missing (the gate did not run; resume the campaign)"
        return {a.arm_id: [Gate("correctness", "error", why)] for a in arms[1:]}
    doc: CorrectnessDoc = read_json(path)
    if doc.get("mode") in ("off", "not_applicable"):
        return {}
    out = {}
    for a in arms[1:]:
        g = doc.get("arms", {}).get(a.arm_id)
        if g is None:
            out[a.arm_id] = [Gate("correctness", "error", "no gate record for this arm")]
            continue
        out[a.arm_id] = [Gate("correctness", g["status"], _detail(g))]
    return out


def _detail(g: ArmGateDict) -> str:
    if g["reasons"]:
        more = len(g["reasons"]) - 3
        return "; ".join(g["reasons"][:3]) + (f" (+{more} more)" if more > 0 else "")
    # the buckets that have a worst tensor (the filter: not None)
    worst = cast("list[tuple[str, WorstTensor]]", [
        (b, f["worst_tensor"]) for b, f in g.get("buckets", {}).items() if f.get("worst_tensor")
    ])
    if not worst:
        return ""
    b, w = max(
        worst,
        key=lambda x: (
            x[1]["rel_l2"] / max(x[1]["threshold"], 1e-300)
            if isinstance(x[1]["rel_l2"], float)
            else 0.0
        ),
    )
    return f"worst tensor {b} {w['name']} rel_l2 {_fmt(w['rel_l2'])} (limit {w['threshold']:.0e})"


def _where(doc: CorrectnessDoc) -> str:
    if doc.get("in_process"):
        return "in-process (launcher=inline)"
    if doc.get("launcher") == "slurm":
        return ("in a fresh process on a compute node (launcher=slurm: one Slurm job, or a job "
                "step of the campaign's allocation)")
    return "in a fresh process"


def _fmt(x: Any, spec: str = ".1e") -> str:
    return "—" if x is None else (format(x, spec) if isinstance(x, (int, float)) else str(x))


def section(run_dir: Path) -> list[Section]:
    """The decisions.md section (for ``render_decisions(extra_sections=...)``)."""
    path = run_dir / FILE
    if not path.exists():
        return [Section("Correctness", ["Not run: correctness.json is missing."])]
    doc: CorrectnessDoc = read_json(path)
    if doc.get("mode") == "off":
        return [Section("Correctness", ["Off (`protocol.correctness.mode=off`): variants were not "
                                 "checked for numerics or checkpoint compatibility."])]
    if doc.get("mode") == "not_applicable":
        return [Section("Correctness", [f"Not applicable: {doc.get('reason')}."])]
    lines = [
        _intro(doc),
        "",
        "| variant | gate | worst tensor (rel_l2 / limit) | loss trajectory (max rel) "
        "| checkpoint | same batches | details |",
        "|---|---|---|---|---|---|---|",
        *[_row(g) for g in doc.get("arms", {}).values()],
        "",
        "Per-tensor figures (max abs/rel error, RMS error, cosine, share beyond tolerance, "
        "NaN/Inf counts): `correctness.json`; raw tensors: `correctness/`.",
    ]
    return [Section("Correctness", lines)]


def _intro(doc: CorrectnessDoc) -> str:
    """What the gate compared, at which tolerance and noise floor, and what it cost."""
    tol = doc.get("tolerance") or {}
    floor = doc.get("noise_floor", {})
    fl = ", ".join(f"{b} {_fmt(f.get('max_tensor_rel_l2'))}" for b, f in floor.items()) or "—"
    return (
        f"One probe per arm {_where(doc)}, "
        f"once per campaign: same initial weights and batch, "
        f"{doc.get('steps')} training steps. Tolerance `{doc.get('tolerance_key')}`: rel_l2 "
        f"{_fmt(tol.get('rel_l2'))} per tensor (outputs, loss, gradients, optimizer update), "
        f"loss trajectory {_fmt(tol.get('trajectory_rtol'))} relative; judged against "
        "max(tolerance, noise floor). Noise floor (baseline run twice, largest tensor "
        f"rel_l2): {fl}. Gate cost: {_fmt(doc.get('gate_seconds'), '.1f')} s in all, "
        f"{_fmt(doc.get('seconds_per_variant'), '.1f')} s per variant (process start included)."
    )


def _row(g: ArmGateDict) -> str:
    """One variant's row: its gate, worst tensor, trajectory, checkpoint, batches, reasons."""
    worst, traj, data = [], [], []
    for b, f in g.get("buckets", {}).items():
        w = f.get("worst_tensor")
        if w:
            worst.append(f"{b} `{w['name']}` {_fmt(w['rel_l2'])} / {_fmt(w['threshold'], '.0e')}")
        if "trajectory" in f:
            traj.append(f"{b} {_fmt(f['trajectory']['max_rel'])}")
        data.append(f"{b} {'yes' if f['data']['same_batches'] else 'no'}")
    ck = g.get("checkpoint") or {}
    ck_s = "—" if not ck else ("compatible" if ck.get("passed") else "**incompatible**")
    det = "<br>".join(g["reasons"][:4]) if g["reasons"] else ""
    return (f"| {g['label']} | **{g['status']}** | {'<br>'.join(worst) or '—'} "
            f"| {', '.join(traj) or '—'} | {ck_s} | {', '.join(data) or '—'} | {det} |")
