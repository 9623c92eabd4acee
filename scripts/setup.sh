#!/usr/bin/env bash
# Creates .venv and installs the orchestrator with its dev extra. torch is installed only when
# the venv cannot import one (pinned to the build these machines carry); a torch you already
# have (e.g. a vendor MUSA build, reached with ORCH_VENV_ARGS=--system-site-packages) is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv ${ORCH_VENV_ARGS:-} .venv
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/pip install --quiet "torch==${ORCH_TORCH_VERSION:-2.13.0}"
fi
.venv/bin/pip install --quiet -e '.[dev]'
.venv/bin/python -c "import torch, orchestrator; print('orchestrator', orchestrator.__version__, 'with torch', torch.__version__)"
