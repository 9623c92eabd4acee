#!/usr/bin/env bash
# System packages the tests use: Debian's chromium (the HTML report is opened headless).
# The Python test dependencies (pyarrow, mlflow, sqlalchemy, the Hydra submitit plugin) come
# with the dev extra that scripts/setup.sh installs; this checks they import, and installs
# triton (the Triton kernel's interpreter tests) and bench/wheels (the GPU check's dry run).
# Under CI (ORCH_REQUIRE_TEST_DEPS=1) anything still missing is an error, not a skipped test.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=0
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium missing and cannot be installed here (needs root and apt-get)" >&2
    missing=1
  fi
fi
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
# triton: the Triton attention kernel's tests run it in Triton's interpreter on the CPU (the
# package itself never needs it; CUDA builds of torch bring their own)
if ! "$PY" -c "import triton" >/dev/null 2>&1; then
  "$PY" -m pip install --quiet triton || echo "pip could not install triton" >&2
fi
# the wheels bench/gpu_check.sh carries to a GPU machine without a registry: its CPU dry run
# (tests/test_gpu_check.py) installs from them into a bare interpreter
if ! ls bench/wheels/*.whl >/dev/null 2>&1; then
  PYTHON="$PY" bash bench/gpu_wheels.sh >/dev/null || echo "bench/gpu_wheels.sh failed" >&2
fi
if ! ls bench/wheels/*.whl >/dev/null 2>&1; then
  echo "bench/wheels holds no wheels: bash bench/gpu_wheels.sh builds them" >&2
  missing=1
fi
for mod in pyarrow mlflow sqlalchemy hydra_plugins.hydra_submitit_launcher submitit triton; do
  if ! "$PY" -c "import $mod" >/dev/null 2>&1; then
    echo "python module $mod missing: bash scripts/setup.sh installs it (the dev extra)" >&2
    missing=1
  fi
done
if [ "$missing" = 1 ]; then
  if [ "${ORCH_REQUIRE_TEST_DEPS:-0}" = 1 ]; then
    echo "error: ORCH_REQUIRE_TEST_DEPS=1 and test dependencies are missing (above)" >&2
    exit 1
  fi
  echo "note: the tests needing them will be skipped" >&2
fi
