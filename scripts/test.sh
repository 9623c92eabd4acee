#!/usr/bin/env bash
# Sets up the environment and runs the whole test suite (CPU only, hermetic).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install_test_deps.sh
.venv/bin/python -m pytest -q "$@"
