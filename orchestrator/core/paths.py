"""Where the code and the composed configuration live (core: no project imports).

``conf/`` is read by the CLI (Hydra's config dir) and by the hardware registry
(``conf/hardware/*.yaml``); worker processes are started with the package root on PYTHONPATH so
that they import the same code as the orchestrator that starts them.
"""

from __future__ import annotations

import os
from pathlib import Path

CONF_ENV = "ORCHESTRATOR_CONF_DIR"


def package_root() -> str:
    """The directory holding the ``orchestrator`` and ``recipes`` packages."""
    return str(Path(__file__).resolve().parents[2])


def conf_dir() -> Path:
    """``$ORCHESTRATOR_CONF_DIR``, else the ``conf/`` beside the installed packages."""
    env = os.environ.get(CONF_ENV)
    return Path(env) if env else Path(package_root()) / "conf"
