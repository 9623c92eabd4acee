#!/usr/bin/env bash
# Builds the wheels bench/gpu_check.sh installs on a GPU machine that reaches no package
# registry (the lent H200's python3 has torch, triton, numpy, pandas, matplotlib, PyYAML,
# packaging, cloudpickle and typing_extensions, but not these): the package's pure-python
# runtime dependencies hydra-core, omegaconf, antlr4-python3-runtime (4.9.3 is published as
# an sdist only, so it is built into a wheel here) and submitit. Run it where pip reaches a
# registry; the device run then carries the folder (a few hundred KiB):
#
#     bash bench/gpu_wheels.sh                     # -> bench/wheels/ (git-ignored)
#     device run: carry=["bench/wheels"], command "bash bench/gpu_check.sh"
#
# Versions: those of the project's .venv (what the tests ran with) where it has them, else
# the pins below. Environment: ORCH_GPU_WHEELS (output folder, default bench/wheels),
# PYTHON (the interpreter whose pip builds them; default .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${ORCH_GPU_WHEELS:-bench/wheels}
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
# distribution==default version; the .venv's version wins where it has the distribution
PINS="hydra-core==1.3.2 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 submitit==1.5.2"
specs=$("$PY" - $PINS <<'PYEOF'
import importlib.metadata as md
import sys
out = []
for pin in sys.argv[1:]:
    name, _, default = pin.partition("==")
    try:
        version = md.version(name)
    except md.PackageNotFoundError:
        version = default
    out.append(f"{name}=={version}")
print(" ".join(out))
PYEOF
)
mkdir -p "$DEST"
rm -f "$DEST"/*.whl
# --no-deps: their own dependencies (PyYAML, packaging, cloudpickle, typing_extensions) are on
# the GPU machine already; gpu_check.sh says so when one is not
# shellcheck disable=SC2086
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$DEST" $specs
ls "$DEST"/*.whl >/dev/null
echo "wheels in $DEST: $(cd "$DEST" && ls *.whl | tr '\n' ' ')($(du -sk "$DEST" | cut -f1) KiB)"
