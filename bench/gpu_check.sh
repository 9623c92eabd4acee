#!/usr/bin/env bash
# The GPU evidence run (issue 49): one prepared run on one NVIDIA GPU, at most 7 minutes
# (420 s) of command time, that answers what a CPU cannot, each part stopped at its time cap,
# everything it measures in one output folder (report.md, figures.json, every campaign's
# decisions.md, a noise model of the GPU, the machine's samples):
#
#   part         cap s  what (conf/workload/gpt_compute.yaml: GPT d_model 2048, 6 layers, 8 x
#                       2048 tokens, bf16: compute-bound on an H100 / H200)
#   env_report     15   the environment report
#   peak_matmul    15   the measured matmul peak, fp32 and bf16 (bench/peak_matmul.py)
#   noise          90   the GPU's own noise: gpt_compute +sweep=gpu_noise (the variant runs the
#                       baseline's step), the A/A arm, one arm per process, 3 fixed rounds: 9
#                       fresh processes of the same step; device events against the host clock
#   noise_fit      10   bench/noise_model.py over them -> noise_model.json
#   simulate       20   bench/simulate_rule.py on that model (adaptive protocol, one arm per
#                       process and by steps): the rule's error rates and its minimum
#                       detectable effect on this GPU
#   fa2_tiling     95   a campaign that decides: the Triton FA2 kernel's tiles (32x32 against
#                       64x64, 128x64) on gpt_compute, paired by steps, with the A/A arm, to a
#                       verdict (the GPU protocol, 3 rounds then adaptive)
#   kernels        25   the attention op alone, the do_bench way (bench/gpu_run/kernels.py):
#                       the Triton kernel's tiles and sdpa's kernels at three shapes, TFLOP/s
#   client         55   your trainer on the GPU by steps: recipes/examples/gpu_trainer.py
#                       through orchestrator.client, +sweep=planted_gpu (7 % more matmul
#                       work: some 5 % of a step; it and the workload gpu_trainer are in
#                       bench/gpu_run/conf), protocol.pairing=steps, the A/A arm
#   process        55   the same trainer and sweep one arm per process (pairing=process, its
#                       step times from its log; no A/A arm, to fit), 3 rounds
#   report         15   report.md, figures.json, decisions.md (bench/gpu_check_report.py)
#   ------------  ----
#   sum of caps   395   + the setup (imports, wheels: seconds) + the copy back: < 420 s
#
# Each part runs under `timeout` at its cap (or what is left of ORCH_GPU_CHECK_BUDGET_S, if
# less); a campaign is also given protocol.budget_node_hours of its limit less 20 s, so it
# stops adding rounds in time and still decides from what it has. The report marks a part
# that hit its cap. After each part, whatever it left running is ended (bench/gpu_run/reap.py:
# every process carrying this run's ORCH_GPU_CHECK_TAG) and counted in the report. While the
# parts run, bench/gpu_run/machine_sampler.py samples nvidia-smi (clocks, temperature, power,
# throttle reasons) every 2 s into machine_samples.csv; it is stopped at the end.
#
# On a machine without a package registry (the lent GPU machines), with that machine's own
# python3 and torch; the pure-python packages it lacks travel as wheels:
#
#     here:  bash bench/gpu_wheels.sh             # -> bench/wheels/ (git-ignored, < 1 MiB)
#     there: bash bench/gpu_check.sh              # device run: carry=["bench/wheels"]
#
# It installs only what that python cannot import (pip --no-index from the wheels, into a
# folder under the output directory, on PYTHONPATH with the repository root), checks every
# import up front and stops within seconds, naming what is missing, if one fails.
#
# Environment:
#   ORCH_GPU_CHECK_OUT       where everything goes (default outputs/gpu_check/; relative to the
#                            repository root); a previous check's output there is replaced
#   ORCH_GPU_CHECK_DEVICE    cuda (default) | cpu: the dry run of every part on the CPU, sized
#                            for it (gpt_compute shrunk to gpt_test's size, the trainer to
#                            width 64, in-process trials, few steps, 10 simulated campaigns):
#                            the report has every section, with the CPU's figures, so labelled
#   ORCH_GPU_CHECK_PYTHON    interpreter (default .venv/bin/python where scripts/setup.sh made
#                            one, else python3: the GPU machine's own)
#   ORCH_GPU_CHECK_WHEELS    folder of wheels for what the interpreter lacks (bench/wheels)
#   ORCH_GPU_CHECK_BUDGET_S  the whole run's wall-clock budget from its start (default 420):
#                            a part's limit is its cap or what is left, whichever is less
#   ORCH_GPU_CHECK_CAPS      caps that replace the table's, e.g. noise:120,fa2_tiling:150 (a
#                            slower machine, a longer lease; the budget still holds)
#   OUT                      (set by the device tool) a folder that comes back, 8 files at
#                            most: report.md, figures.json, decisions.md, noise_model.json,
#                            simulate.md, machine_samples.csv, machine.json and
#                            gpu_check_runs.tar.gz (the run directories, logs, < 16 MiB)
# Exit code: 0 when every part finished, 1 when one failed or hit its cap (the report says
# which), 2 for bad settings or a missing import (before any part); the report is written
# whenever a part ran.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T0=$(date +%s)  # every limit counts from here
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
BUDGET_S=${ORCH_GPU_CHECK_BUDGET_S:-420}

# the parts and their caps in seconds (the header's table)
PARTS=(env_report:15 peak_matmul:15 noise:90 noise_fit:10 simulate:20 fa2_tiling:95
       kernels:25 client:55 process:55 report:15)
REPORT_RESERVE_S=20    # kept back for the report and the copy back while the parts run
CAMPAIGN_OVERHEAD_S=20  # a campaign's own start and analysis, outside its node-hour budget

# what every campaign shares: the GPU protocol, every A/A arm run (no calibration record is
# relied on: they go to a store inside the output), the machine's compile caches (a paired
# process would otherwise compile every Triton kernel again)
PROTO=(protocol=gpu protocol.calibration_max_age_h=0 protocol.compile_cache=warm)
case "$DEVICE" in
  cuda)
    GPT=(workload=gpt_compute); GPT_BUCKET=s2048
    TRAINER=(); LAUNCH=(); PEAK=(--min-s 0.5); SIZE=(); NOISE_FIT=(); SIM=(--campaigns 200)
    # per campaign: the tiles 3 rounds then adaptive up to 7 (the GPU protocol's), 10 steps a
    # block of arms (at least a second each); the trainer's arms half a second each
    TILES=(protocol.measured_steps=10)
    CLIENT=(protocol.paired_min_s=0.5)
    # a command is asked for its warm-up floor plus the measured steps: a floor of 10 keeps
    # the auto warm-up (a CUDA start's slow first steps) inside what it was asked to run
    PROCESS=(protocol.repeats=3 protocol.max_rounds=3 protocol.measured_min_s=0.5
             protocol.warmup_steps=10)
    KERNELS=(--d-model 2048 --n-head 16 --shapes 8x2048,16x1024,4x4096 --dtype bf16
             --deadline-s 20)
    SAMPLE_EVERY_S=2 ;;
  cpu)
    # the dry run: the same parts and report, sized for a CPU; trials run in this process,
    # two rounds where a GPU runs more; fa2_tiling's tiles are the PyTorch reference's (as on
    # any CPU); the noise fit keeps trials a busy CI machine disturbed (a GPU run leaves
    # them out)
    GPT=(workload=gpt_compute workload.model.vocab_size=64 workload.model.n_layer=1
         workload.model.n_head=2 workload.model.d_model=32 workload.model.d_ff=64
         workload.precision=fp32 "workload.buckets=[{name:s32,seq_len:32,micro_batch:2}]")
    GPT_BUCKET=s32
    TRAINER=(workload.params.width=64 workload.params.layers=4 workload.params.dtype=fp32
             workload.params.threads=1 "workload.buckets=[{name:r64,seq_len:1,micro_batch:64}]"
             workload.flops_per_step=6291456 workload.precision=fp32)
    LAUNCH=(launcher=inline); PEAK=(--size 256 --min-s 0.05)
    SIZE=(protocol.warmup_steps=1 protocol.warmup_max_steps=4 protocol.warmup_window=1
          protocol.measured_steps=3 protocol.measured_min_s=0 protocol.paired_min_s=0
          hardware.calibration_min_s=0.05 protocol.interference_retries=0)
    TILES=(protocol.repeats=2 protocol.max_rounds=2)
    CLIENT=(protocol.repeats=2 protocol.max_rounds=2)
    # a command is asked for its warm-up floor plus the measured steps, and a trial whose
    # auto warm-up runs past the floor fails: the floor covers a CPU start's slow first steps;
    # measured_min_s: a pilot sizes the trials, as on a GPU
    PROCESS=(protocol.repeats=2 protocol.max_rounds=2 protocol.measured_min_s=0.2
             protocol.warmup_steps=5 protocol.warmup_max_steps=8)
    # one thread a process: a CI machine's other load stalls a pool of two for 100s of ms
    export OMP_NUM_THREADS=1
    NOISE_FIT=(--max-others-cores 64); SIM=(--campaigns 10)
    KERNELS=(--d-model 32 --n-head 2 --shapes 2x32,1x64 --dtype fp32 --min-calls 3
             --max-calls 3 --warmup-calls 1 --time-cap-s 0.05 --deadline-s 20)
    SAMPLE_EVERY_S=1 ;;
  *)
    echo "error: ORCH_GPU_CHECK_DEVICE: '$DEVICE' is not a valid choice; choose one of: cuda, cpu" >&2
    exit 2 ;;
esac

CAPS_GIVEN=${ORCH_GPU_CHECK_CAPS:-}
for p in ${CAPS_GIVEN//,/ }; do
  case " ${PARTS[*]} " in *" ${p%%:*}:"*) ;; *) p="?$p" ;; esac
  if [ "${p#\?}" != "$p" ] || ! [[ "${p#*:}" =~ ^[0-9]+$ ]]; then
    echo "error: ORCH_GPU_CHECK_CAPS: '${p#\?}' is not PART:SECONDS; parts: ${PARTS[*]%%:*}" >&2
    exit 2
  fi
done
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
  if ! timeout 60 "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
      --no-compile --no-cache-dir --find-links "$WHEELS" --target "$SITE" "${missing[@]}" \
      > "$CHECK_OUT/logs/install.log" 2>&1; then
    echo "error: installing ${missing[*]} from $WHEELS failed (pip --no-index): $(tail -n 1 "$CHECK_OUT/logs/install.log")" >&2
    exit 2
  fi
  INSTALLED="${missing[*]}"
fi

# --- every import the parts need, checked up front: one line and exit 2 if any fails ----------
if ! timeout 60 "$PY" - "$CHECK_OUT/machine.json" "$DEVICE" "$INSTALLED" "$WHEELS" > "$CHECK_OUT/logs/imports.log" 2>&1 <<'PYEOF'
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

STEPS="$CHECK_OUT/steps.tsv"
: > "$STEPS"
PARTFILE="$CHECK_OUT/current_part"
echo setup > "$PARTFILE"
# the A/A checks' calibration records stay in the output (none is read from or left in the
# machine's store); every process the parts start carries the tag the reaper looks for
export ORCH_CALIBRATION_DIR="$CHECK_OUT/calibration"
TAG="gpu_check_$$_$T0"

# --- the machine's samples, in the background until the end ----------------------------------
"$PY" bench/gpu_run/machine_sampler.py --device "$DEVICE" --out "$CHECK_OUT/machine_samples.csv" \
  --static "$CHECK_OUT/machine_static.json" --part-file "$PARTFILE" \
  --every-s "$SAMPLE_EVERY_S" --max-s "$(( BUDGET_S + 60 ))" > "$CHECK_OUT/logs/sampler.log" 2>&1 &
SAMPLER=$!
export ORCH_GPU_CHECK_TAG="$TAG"
stop_sampler() {
  if kill -0 "$SAMPLER" 2>/dev/null; then
    kill -TERM "$SAMPLER" 2>/dev/null
    wait "$SAMPLER" 2>/dev/null
  fi
}
trap 'stop_sampler; "$PY" bench/gpu_run/reap.py "$TAG" >/dev/null 2>&1' EXIT

cap_of() {  # the cap of part $1 in seconds: ORCH_GPU_CHECK_CAPS's, else the table's
  local p
  for p in ${CAPS_GIVEN//,/ } "${PARTS[@]}"; do
    if [ "${p%%:*}" = "$1" ]; then echo "${p#*:}"; return; fi
  done
  echo 0
}

limit_of() {  # part $1's time limit now: its cap, or what is left of the budget if less
  local cap left reserve=$REPORT_RESERVE_S
  cap=$(cap_of "$1")
  [ "$1" = report ] && reserve=3
  left=$(( BUDGET_S - ($(date +%s) - T0) - reserve ))
  if [ "$left" -lt "$cap" ]; then echo "$left"; else echo "$cap"; fi
}

# run NAME CMD...: one part under its limit, its output in logs/NAME.log, a line in steps.tsv:
# name, status, seconds, log, cap, limit, processes it left behind (ended by the reaper)
run() {
  local name=$1; shift
  local cap limit t0 rc status left_behind
  cap=$(cap_of "$name")
  limit=$(limit_of "$name")
  if [ "$limit" -le 0 ] || { [ "$limit" -lt "$cap" ] && [ "$limit" -le 5 ]; }; then  # no time left
    printf '%s\tskipped\t0\t-\t%s\t%s\t0\n' "$name" "$cap" "$limit" >> "$STEPS"
    return
  fi
  echo "$name" > "$PARTFILE"
  t0=$(date +%s)
  echo "[gpu_check] $name (cap ${cap} s, limit ${limit} s)" >&2
  timeout --signal=TERM --kill-after=5 "$limit" "$@" > "$CHECK_OUT/logs/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124|137) status="timeout (hit its limit of $limit s)" ;;
    *) status="failed (exit $rc)" ;;
  esac
  # run directly (no pipeline): every process beside the check that carries the tag is ended
  "$PY" bench/gpu_run/reap.py "$TAG" --keep "$SAMPLER" > "$CHECK_OUT/logs/reaped.tmp" 2>&1
  left_behind=$(wc -l < "$CHECK_OUT/logs/reaped.tmp")
  sed "s/^/$name: /" "$CHECK_OUT/logs/reaped.tmp" >> "$CHECK_OUT/logs/reaped.log"
  rm -f "$CHECK_OUT/logs/reaped.tmp"
  printf '%s\t%s\t%s\tlogs/%s.log\t%s\t%s\t%s\n' "$name" "$status" "$(( $(date +%s) - t0 ))" \
    "$name" "$cap" "$limit" "$left_behind" >> "$STEPS"
}

# campaign NAME [--config-dir DIR] OVERRIDES...: one campaign with its run directory under
# $CHECK_OUT/NAME, given
# a node-hour budget of its limit less its own start and analysis; the device's SIZE settings
# follow, except a key the campaign sets itself (Hydra takes each key once)
campaign() {
  local name=$1; shift
  local limit budget item given=" " size=() flags=()
  if [ "${1:-}" = --config-dir ]; then  # Hydra's flags go before the overrides
    flags=("$1" "$2"); shift 2
  fi
  limit=$(limit_of "$name")
  budget=$(awk -v s="$(( limit - CAMPAIGN_OVERHEAD_S ))" 'BEGIN { if (s < 10) s = 10; printf "%.5f", s / 3600 }')
  for item in "$@"; do given+="${item%%=*} "; done
  for item in ${SIZE[@]+"${SIZE[@]}"}; do
    case "$given" in *" ${item%%=*} "*) ;; *) size+=("$item") ;; esac
  done
  # quoted for Hydra: a path with spaces or other odd characters stays one value
  run "$name" "$PY" -m orchestrator ${flags[@]+"${flags[@]}"} "device=$DEVICE" ${LAUNCH[@]+"${LAUNCH[@]}"} \
    "run_dir='$CHECK_OUT/$name'" "hydra.run.dir='$CHECK_OUT/hydra/$name'" "${PROTO[@]}" \
    "protocol.budget_node_hours=$budget" "$@" ${size[@]+"${size[@]}"}
}

run env_report "$PY" -m orchestrator.tools.env_report --device "$DEVICE" -o "$CHECK_OUT/environment.json"
run peak_matmul "$PY" bench/peak_matmul.py --device "$DEVICE" ${PEAK[@]+"${PEAK[@]}"}
# the GPU's own noise: three arms that run the same step, one per process, three fixed rounds
campaign noise "${GPT[@]}" +sweep=gpu_noise "sweep.buckets=[$GPT_BUCKET]" \
  protocol.pairing=process protocol.aa_arm=true protocol.repeats=3 protocol.max_rounds=3 \
  protocol.correctness.mode=off protocol.direction_check=false
run noise_fit "$PY" bench/noise_model.py "$CHECK_OUT/noise" --bucket "$GPT_BUCKET" \
  --name "gpu_check_${DEVICE}_gpt_compute_${GPT_BUCKET}_$(date +%Y-%m-%d)" \
  --note "bench/gpu_check.sh's noise part: gpt_compute +sweep=gpu_noise, one arm per process, device=$DEVICE" \
  --out "$CHECK_OUT/noise_model.json" ${NOISE_FIT[@]+"${NOISE_FIT[@]}"}
# unbuffered: the process table is kept if the steps one runs out of time
run simulate env PYTHONUNBUFFERED=1 "$PY" bench/simulate_rule.py "$CHECK_OUT/noise_model.json" \
  --adaptive-only --pairing process,steps "${SIM[@]}"
# a campaign that decides: the Triton kernel's tiles, paired by steps, with the A/A arm; the
# op alone is the kernels part's (no microbenchmark trials here: each is a process)
campaign fa2_tiling "${GPT[@]}" +sweep=fa2_tiling "sweep.buckets=[$GPT_BUCKET]" \
  "sweep.values=[{block_q:64,block_k:64},{block_q:128,block_k:64}]" "sweep.labels=[64x64,128x64]" \
  protocol.pairing=steps protocol.aa_arm=true protocol.correctness.mode=off \
  protocol.direction_check=false hardware.measure_peak=true "${TILES[@]}"
run kernels "$PY" bench/gpu_run/kernels.py --device "$DEVICE" --out "$CHECK_OUT/kernels.json" \
  "${KERNELS[@]}"
# your trainer: by steps through orchestrator.client (with the A/A arm), then one arm per process
# (its workload and sweep are files of "your own", from --config-dir bench/gpu_run/conf)
OWN=(--config-dir "$ROOT/bench/gpu_run/conf")
campaign client "${OWN[@]}" +sweep=planted_gpu ${TRAINER[@]+"${TRAINER[@]}"} \
  protocol.pairing=steps protocol.aa_arm=true protocol.direction_check=false "${CLIENT[@]}"
campaign process "${OWN[@]}" +sweep=planted_gpu ${TRAINER[@]+"${TRAINER[@]}"} \
  protocol.pairing=process protocol.aa_arm=false protocol.direction_check=false "${PROCESS[@]}"

stop_sampler
# the report writes report.md, figures.json and decisions.md itself, and prints report.md
run report "$PY" bench/gpu_check_report.py "$CHECK_OUT" "$DEVICE" "$(( $(date +%s) - T0 ))"
if [ -s "$CHECK_OUT/report.md" ]; then
  cat "$CHECK_OUT/report.md"
  REPORT_OK=1
else
  REPORT_OK=0
fi

# what comes back from a device run: at most 8 files, so the run directories travel as one
# tarball without the installed packages, saved tensors, plots and pages
if [ -n "$BACK" ] && [ -d "$BACK" ]; then
  for f in report.md figures.json decisions.md noise_model.json machine.json \
           machine_samples.csv; do
    [ -f "$CHECK_OUT/$f" ] && cp "$CHECK_OUT/$f" "$BACK/"
  done
  [ -f "$CHECK_OUT/logs/simulate.log" ] && cp "$CHECK_OUT/logs/simulate.log" "$BACK/simulate.md"
  base=$(basename "$CHECK_OUT")
  EXCL=(--exclude='*.pt' --exclude='*.png' --exclude='*.html' --exclude="$base/site"
        --exclude="$base/hydra")
  timeout 20 tar -czf "$BACK/gpu_check_runs.tar.gz" -C "$(dirname "$CHECK_OUT")" "${EXCL[@]}" "$base"
  if [ "$(du -k "$BACK/gpu_check_runs.tar.gz" | cut -f1)" -gt 15000 ]; then  # 16 MiB per file
    timeout 20 tar -czf "$BACK/gpu_check_runs.tar.gz" -C "$(dirname "$CHECK_OUT")" "${EXCL[@]}" \
      --exclude='*.csv' --exclude='*.json.gz' --exclude='*.log' "$base"
  fi
fi
if [ "$REPORT_OK" -ne 1 ]; then
  echo "[gpu_check] the report could not be made: see $CHECK_OUT/logs/report.log" >&2
  exit 1
fi
if cut -f2 "$STEPS" | grep -qv '^ok$'; then
  exit 1
fi
exit 0
