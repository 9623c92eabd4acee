#!/usr/bin/env bash
# Sets up the environment and runs the whole test suite (CPU only, hermetic).
# A single-node Slurm (scripts/slurm_local.sh) is started for the `slurm` tests when this
# machine allows it (root, Debian's slurm-wlm) and stopped afterwards; without it those tests
# are skipped with the reason, and so is a two-node one (scripts/slurm_twonode.sh, network
# namespaces) for the multi-node tests. ORCH_SLURM=0 skips starting them. First, lint-imports checks that
# imports run one way (the contracts in pyproject.toml; docs/architecture.md): a broken
# contract fails the run; then mypy checks orchestrator/ (a type error fails it too), and ruff
# every file for undefined and unused names.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install_test_deps.sh
.venv/bin/lint-imports --no-cache
.venv/bin/mypy orchestrator  # the types the records and the config carry (pyproject's [tool.mypy])
# names: an undefined or unused one anywhere, tests and benches included (mypy reads orchestrator/)
.venv/bin/ruff check --quiet --select F821,F811,F401,F841 orchestrator recipes tests bench scripts
stops=()
cleanup() { for s in "${stops[@]}"; do bash "scripts/$s.sh" stop || true; done; }
trap cleanup EXIT
if [ "${ORCH_SLURM:-1}" = 1 ] && bash scripts/slurm_local.sh start; then
  stops+=(slurm_local)
  eval "$(bash scripts/slurm_local.sh env)"
else
  echo "note: no local Slurm cluster; the slurm tests will be skipped" >&2
fi
# the two-node cluster (network namespaces, partition `two`) for the multi-node tests
if [ "${ORCH_SLURM:-1}" = 1 ] && bash scripts/slurm_twonode.sh start; then
  stops+=(slurm_twonode)
else
  echo "note: no two-node Slurm cluster; the multi-node tests will be skipped" >&2
fi
.venv/bin/python -m pytest -q --durations=40 "$@"  # the slowest tests, to keep CI short
