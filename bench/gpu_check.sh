#!/usr/bin/env bash
# One prepared check of this project on one NVIDIA GPU, in at most 8 minutes, ending in a compact
# report (report.md, also printed): the environment report; the measured matmul peak in fp32 and
# bf16 against the registry's datasheet figure; +sweep=fa2 and +sweep=fa2_tiling on gpt_small
# (device=cuda, protocol=quick, bucket s512); one bucket of +sweep=compile (eager vs default,
# one round, no correctness gate); the verdicts and the MFU figures of each campaign, each
# naming its peak.
#
#     bash scripts/setup.sh && bash bench/gpu_check.sh
#
# Environment:
#   ORCH_GPU_CHECK_OUT       where everything goes (default outputs/gpu_check/; relative to the
#                            repository root); a previous check's output there is replaced
#   ORCH_GPU_CHECK_DEVICE    cuda (default) | cpu: a dry run of the same steps with gpt_test,
#                            in-process trials and tiny settings (a minute or two on a laptop)
#   ORCH_GPU_CHECK_PYTHON    interpreter (default .venv/bin/python, as scripts/setup.sh makes it)
#   ORCH_GPU_CHECK_BUDGET_S  wall-clock budget of all steps (default 450): each step's time limit
#                            is what is left of it, so the check ends within 8 minutes
# Exit code: 0 when every step finished, 1 when one failed or ran out of time (the report says
# which); the report is written either way.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEVICE=${ORCH_GPU_CHECK_DEVICE:-cuda}
OUT=${ORCH_GPU_CHECK_OUT:-outputs/gpu_check}
case "$OUT" in /*) ;; *) OUT="$ROOT/$OUT" ;; esac
PY=${ORCH_GPU_CHECK_PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
BUDGET_S=${ORCH_GPU_CHECK_BUDGET_S:-450}

case "$DEVICE" in
  cuda)
    WORKLOAD=gpt_small; BUCKET=s512; COMPILE_BUCKET=s512
    LAUNCH=(); COMPILE=(); PEAK=(--min-s 1.0) ;;
  cpu)
    # the dry run: the same steps and report, sized for a CPU; trials run in this process and
    # the compile arm traces with aot_eager (no C++ toolchain, no inductor codegen)
    WORKLOAD=gpt_test; BUCKET=s32; COMPILE_BUCKET=s32
    LAUNCH=(launcher=inline); COMPILE=(workload.model.compile.backend=aot_eager)
    PEAK=(--size 256 --min-s 0.05) ;;
  *)
    echo "error: ORCH_GPU_CHECK_DEVICE: '$DEVICE' is not a valid choice; choose one of: cuda, cpu" >&2
    exit 2 ;;
esac

if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ] && [ ! -e "$OUT/steps.tsv" ]; then
  echo "error: ORCH_GPU_CHECK_OUT: $OUT is not empty and not a previous check's output; give a new or empty directory" >&2
  exit 2
fi
rm -rf "$OUT"
mkdir -p "$OUT/logs"
START=$(date +%s)
STEPS="$OUT/steps.tsv"
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
  timeout --signal=TERM --kill-after=15 "$left" "$@" > "$OUT/logs/$name.log" 2>&1
  rc=$?
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status="failed (exit $rc)" ;; esac
  printf '%s\t%s\t%s\tlogs/%s.log\n' "$name" "$status" "$(( $(date +%s) - t0 ))" "$name" >> "$STEPS"
}

# campaign NAME OVERRIDES...: one campaign with its run directory under $OUT/NAME
campaign() {
  local name=$1; shift
  # quoted for Hydra: a path with spaces or other odd characters stays one value
  run "$name" "$PY" -m orchestrator "workload=$WORKLOAD" "device=$DEVICE" protocol=quick \
    ${LAUNCH[@]+"${LAUNCH[@]}"} "run_dir='$OUT/$name'" "hydra.run.dir='$OUT/hydra/$name'" "$@"
}

run env_report "$PY" -m orchestrator.tools.env_report --device "$DEVICE" -o "$OUT/environment.json"
run peak_matmul "$PY" bench/peak_matmul.py --device "$DEVICE" ${PEAK[@]+"${PEAK[@]}"}
campaign fa2 +sweep=fa2 "sweep.buckets=[$BUCKET]"
campaign fa2_tiling +sweep=fa2_tiling "sweep.buckets=[$BUCKET]"
# one bucket, eager against the default mode, one round and no correctness gate: every compiled
# process pays a cold compile (about a minute for gpt_small), and the 8 minutes allow one
campaign compile +sweep=compile "sweep.buckets=[$COMPILE_BUCKET]" "sweep.values=[default]" \
  "sweep.labels=[default]" protocol.repeats=1 protocol.correctness.mode=off \
  ${COMPILE[@]+"${COMPILE[@]}"}

"$PY" bench/gpu_check_report.py "$OUT" "$DEVICE" "$WORKLOAD" "$(( $(date +%s) - START ))" \
  > "$OUT/report.md" 2> "$OUT/logs/report.log"
rc=$?
cat "$OUT/report.md"
if [ $rc -ne 0 ]; then
  echo "[gpu_check] the report could not be made: see $OUT/logs/report.log" >&2
  exit 1
fi
if cut -f2 "$STEPS" | grep -qv '^ok$'; then
  exit 1
fi
exit 0
