#!/usr/bin/env bash
# One prepared check of this project on one NVIDIA GPU, in at most 8 minutes, ending in a compact
# report (report.md, also printed): the environment report; the measured matmul peak in fp32 and
# bf16 against the registry's datasheet figure; +sweep=fa2_tiling (the Triton FlashAttention-2
# kernel's tiles), +sweep=fa2 (sdpa's kernels, the Triton kernel, flash_attn, the tiled
# reference) on gpt_small bf16 (bucket s512) under the GPU protocol (conf/protocol/gpu.yaml,
# two rounds) with hardware.measure_peak=true; one bucket of +sweep=compile (eager vs default,
# one round, no correctness gate); the verdicts, the absolute step times, MFU against the
# measured and the datasheet peak (each named), and the attention op alone per arm in TFLOP/s.
#
# On a machine without a package registry (the lent GPU machines), with that machine's own
# python3 and torch; the pure-python packages it lacks travel as wheels:
#
#     here:  bash bench/gpu_wheels.sh             # -> bench/wheels/ (git-ignored, < 1 MiB)
#     there: bash bench/gpu_check.sh              # device run: carry=["bench/wheels"]
#
# It installs only what that python cannot import (pip --no-index from the wheels, into a
# folder under the output directory, on PYTHONPATH with the repository root), checks every
# import up front and stops within seconds, naming what is missing, if one fails. What it
# found and assumed about the machine goes into the report.
#
# Environment:
#   ORCH_GPU_CHECK_OUT       where everything goes (default outputs/gpu_check/; relative to the
#                            repository root); a previous check's output there is replaced
#   ORCH_GPU_CHECK_DEVICE    cuda (default) | cpu: a dry run of the same steps with gpt_test,
#                            in-process trials, tiny settings, fa2's triton arm in Triton's
#                            interpreter (about a minute on a laptop)
#   ORCH_GPU_CHECK_PYTHON    interpreter (default .venv/bin/python where scripts/setup.sh made
#                            one, else python3: the GPU machine's own)
#   ORCH_GPU_CHECK_WHEELS    folder of wheels for what the interpreter lacks (bench/wheels)
#   ORCH_GPU_CHECK_BUDGET_S  wall-clock budget of all steps (default 450): each step's time limit
#                            is what is left of it, so the check ends within 8 minutes
#   OUT                      (set by the device tool) a folder that comes back: the report, the
#                            machine facts and a tarball of the run directories are copied there
# Exit code: 0 when every step finished, 1 when one failed or ran out of time (the report says
# which), 2 for bad settings or a missing import (before any step); the report is written
# whenever a step ran.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEVICE=${ORCH_GPU_CHECK_DEVICE:-cuda}
CHECK_OUT=${ORCH_GPU_CHECK_OUT:-outputs/gpu_check}
case "$CHECK_OUT" in /*) ;; *) CHECK_OUT="$ROOT/$CHECK_OUT" ;; esac
BACK=${OUT:-}  # the device tool's folder that comes back (unset elsewhere)
PY=${ORCH_GPU_CHECK_PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
WHEELS=${ORCH_GPU_CHECK_WHEELS:-bench/wheels}
case "$WHEELS" in /*) ;; *) WHEELS="$ROOT/$WHEELS" ;; esac
BUDGET_S=${ORCH_GPU_CHECK_BUDGET_S:-450}

# the protocol: the GPU protocol, two rounds, no A/A arm, the machine's compile caches (each
# paired process would otherwise compile every Triton kernel again)
PROTO=(protocol=gpu protocol.repeats=2 protocol.max_rounds=2 protocol.aa_arm=false
       protocol.compile_cache=warm hardware.measure_peak=true)
case "$DEVICE" in
  cuda)
    WORKLOAD=gpt_small; BUCKET=s512; COMPILE_BUCKET=s512
    LAUNCH=(); COMPILE=(); PEAK=(--min-s 1.0); SIZE=() ;;
  cpu)
    # the dry run: the same steps and report, sized for a CPU; trials run in this process;
    # fa2_tiling's tiles are the PyTorch reference's (as on any CPU), fa2's triton arm runs the
    # Triton kernel in Triton's interpreter (numerics only: a hundred times slower than tiled);
    # the compile arm traces with aot_eager (no C++ toolchain, no inductor codegen)
    WORKLOAD=gpt_test; BUCKET=s32; COMPILE_BUCKET=s32
    LAUNCH=(launcher=inline); COMPILE=(workload.model.compile.backend=aot_eager)
    PEAK=(--size 256 --min-s 0.05)
    SIZE=(protocol.warmup_steps=1 protocol.warmup_max_steps=4 protocol.warmup_window=1
          protocol.measured_steps=3 protocol.measured_min_s=0 protocol.paired_min_s=0
          hardware.calibration_min_s=0.05 protocol.interference_retries=0)
    export TRITON_INTERPRET=1 ;;
  *)
    echo "error: ORCH_GPU_CHECK_DEVICE: '$DEVICE' is not a valid choice; choose one of: cuda, cpu" >&2
    exit 2 ;;
esac

if [ -e "$CHECK_OUT" ] && [ -n "$(ls -A "$CHECK_OUT" 2>/dev/null)" ] && [ ! -e "$CHECK_OUT/steps.tsv" ]; then
  echo "error: ORCH_GPU_CHECK_OUT: $CHECK_OUT is not empty and not a previous check's output; give a new or empty directory" >&2
  exit 2
fi
if ! command -v "$PY" >/dev/null 2>&1 && [ ! -x "$PY" ]; then
  echo "error: ORCH_GPU_CHECK_PYTHON: no interpreter '$PY'; point it at a python with torch" >&2
  exit 2
fi
rm -rf "$CHECK_OUT"
mkdir -p "$CHECK_OUT/logs"
SITE="$CHECK_OUT/site"  # what the wheels add (kept out of the tarball)
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"

# --- what the interpreter lacks, installed from the wheels only (no registry is reached) ------
# import name -> distribution in the wheels
MODULES=(hydra:hydra-core omegaconf:omegaconf antlr4:antlr4-python3-runtime submitit:submitit)
missing=()
for pair in "${MODULES[@]}"; do
  "$PY" -c "import ${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
INSTALLED=""
if [ ${#missing[@]} -gt 0 ]; then
  if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "error: $PY cannot import ${missing[*]}, and ORCH_GPU_CHECK_WHEELS=$WHEELS holds no wheels; run 'bash bench/gpu_wheels.sh' where pip reaches a registry and carry bench/wheels along" >&2
    exit 2
  fi
  if ! "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
      --no-compile --no-cache-dir --find-links "$WHEELS" --target "$SITE" "${missing[@]}" \
      > "$CHECK_OUT/logs/install.log" 2>&1; then
    echo "error: installing ${missing[*]} from $WHEELS failed (pip --no-index): $(tail -n 1 "$CHECK_OUT/logs/install.log")" >&2
    exit 2
  fi
  INSTALLED="${missing[*]}"
fi

# --- every import the steps need, checked up front: one line and exit 2 if any fails ----------
if ! "$PY" - "$CHECK_OUT/machine.json" "$DEVICE" "$INSTALLED" "$WHEELS" > "$CHECK_OUT/logs/imports.log" 2>&1 <<'PYEOF'
import importlib
import importlib.metadata as md
import json
import platform
import sys

path, device, installed, wheels = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4]
# module -> distribution: what the package and the bench scripts import at run time
NEED = {"torch": "torch", "numpy": "numpy", "pandas": "pandas", "matplotlib": "matplotlib",
        "yaml": "PyYAML", "packaging": "packaging", "cloudpickle": "cloudpickle",
        "typing_extensions": "typing_extensions", "antlr4": "antlr4-python3-runtime",
        "omegaconf": "omegaconf", "hydra": "hydra-core", "submitit": "submitit",
        "orchestrator": None, "recipes": None, "orchestrator.cli.main": None}
missing, found = [], {}
for mod, dist in NEED.items():
    try:
        m = importlib.import_module(mod)
    except Exception as exc:  # noqa: BLE001 - any failure is a missing module here
        missing.append(f"{mod} ({dist or 'this repository'}: {type(exc).__name__}: {exc})")
        continue
    if dist:
        try:
            version = md.version(dist)
        except md.PackageNotFoundError:
            version = getattr(m, "__version__", "?")
        where = "wheel" if dist in installed else "machine"
        found[dist] = {"version": version, "from": where, "file": getattr(m, "__file__", None)}
optional = {}
try:
    import triton
    optional["triton"] = triton.__version__
except Exception as exc:  # noqa: BLE001 - the triton arms are then "unavailable here"
    optional["triton"] = f"not importable ({type(exc).__name__}): triton arms unavailable here"
if missing:
    print("cannot import: " + "; ".join(missing))
    sys.exit(1)
from orchestrator.platform import device as devmod  # noqa: E402 - the one device seam
import torch  # noqa: E402

kinds = devmod.available_kinds()
facts = {
    "python": sys.executable, "python_version": platform.python_version(),
    "platform": platform.platform(), "device": device, "packages": found,
    "optional": optional, "installed_from_wheels": installed, "wheels": wheels,
    "torch": torch.__version__, "torch_cuda": torch.version.cuda, "device_kinds": kinds,
    "registry": "none reached: what the python lacked came from the wheels (pip --no-index)",
}
with open(path, "w", encoding="utf-8") as fh:
    json.dump(facts, fh, indent=2)
print(json.dumps(facts))
PYEOF
then
  echo "error: $PY $(tail -n 1 "$CHECK_OUT/logs/imports.log"); run 'bash bench/gpu_wheels.sh' where pip reaches a registry and carry bench/wheels, or set ORCH_GPU_CHECK_PYTHON" >&2
  exit 2
fi

START=$(date +%s)
STEPS="$CHECK_OUT/steps.tsv"
: > "$STEPS"

# run NAME CMD...: one step under the time left, its output in logs/NAME.log, a line in steps.tsv
run() {
  local name=$1; shift
  local left=$(( BUDGET_S - ($(date +%s) - START) ))
  if [ "$left" -le 5 ]; then
    printf '%s\tskipped\t0\tno time left of ORCH_GPU_CHECK_BUDGET_S=%s\n' "$name" "$BUDGET_S" >> "$STEPS"
    return
  fi
  local t0 rc status
  t0=$(date +%s)
  echo "[gpu_check] $name (time limit ${left} s)" >&2
  timeout --signal=TERM --kill-after=15 "$left" "$@" > "$CHECK_OUT/logs/$name.log" 2>&1
  rc=$?
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status="failed (exit $rc)" ;; esac
  printf '%s\t%s\t%s\tlogs/%s.log\n' "$name" "$status" "$(( $(date +%s) - t0 ))" "$name" >> "$STEPS"
}

# campaign NAME OVERRIDES...: one campaign with its run directory under $CHECK_OUT/NAME
campaign() {
  local name=$1; shift
  # quoted for Hydra: a path with spaces or other odd characters stays one value
  run "$name" "$PY" -m orchestrator "workload=$WORKLOAD" "device=$DEVICE" \
    ${LAUNCH[@]+"${LAUNCH[@]}"} "run_dir='$CHECK_OUT/$name'" \
    "hydra.run.dir='$CHECK_OUT/hydra/$name'" "$@"
}

run env_report "$PY" -m orchestrator.tools.env_report --device "$DEVICE" -o "$CHECK_OUT/environment.json"
run peak_matmul "$PY" bench/peak_matmul.py --device "$DEVICE" ${PEAK[@]+"${PEAK[@]}"}
# the Triton kernel's tiles first: the figures this check is for
campaign fa2_tiling +sweep=fa2_tiling "sweep.buckets=[$BUCKET]" "${PROTO[@]}" \
  ${SIZE[@]+"${SIZE[@]}"}
campaign fa2 +sweep=fa2 "sweep.buckets=[$BUCKET]" "${PROTO[@]}" ${SIZE[@]+"${SIZE[@]}"}
# one bucket, eager against the default mode, one round and no correctness gate: every compiled
# process pays a cold compile (about a minute for gpt_small), and the 8 minutes allow one
campaign compile +sweep=compile "sweep.buckets=[$COMPILE_BUCKET]" "sweep.values=[default]" \
  "sweep.labels=[default]" protocol=quick protocol.repeats=1 protocol.correctness.mode=off \
  hardware.measure_peak=true ${COMPILE[@]+"${COMPILE[@]}"}

"$PY" bench/gpu_check_report.py "$CHECK_OUT" "$DEVICE" "$WORKLOAD" "$(( $(date +%s) - START ))" \
  > "$CHECK_OUT/report.md" 2> "$CHECK_OUT/logs/report.log"
rc=$?
cat "$CHECK_OUT/report.md"

# what comes back from a device run: a few files only, so the run directories travel as one
# tarball (without the correctness gate's saved tensors, which can be hundreds of MiB)
if [ -n "$BACK" ] && [ -d "$BACK" ]; then
  cp "$CHECK_OUT/report.md" "$CHECK_OUT/machine.json" "$STEPS" "$BACK"/ 2>/dev/null
  tar -czf "$BACK/gpu_check_runs.tar.gz" -C "$(dirname "$CHECK_OUT")" \
    --exclude='*.pt' --exclude="$(basename "$CHECK_OUT")/site" "$(basename "$CHECK_OUT")"
  if [ "$(du -k "$BACK/gpu_check_runs.tar.gz" | cut -f1)" -gt 15000 ]; then  # 16 MiB per file
    tar -czf "$BACK/gpu_check_runs.tar.gz" -C "$(dirname "$CHECK_OUT")" \
      --exclude='*.pt' --exclude='*.csv' --exclude='*.json.gz' \
      --exclude="$(basename "$CHECK_OUT")/site" "$(basename "$CHECK_OUT")"
  fi
fi
if [ $rc -ne 0 ]; then
  echo "[gpu_check] the report could not be made: see $CHECK_OUT/logs/report.log" >&2
  exit 1
fi
if cut -f2 "$STEPS" | grep -qv '^ok$'; then
  exit 1
fi
exit 0
