"""A recipe module that starts a thread when it is imported (as some libraries do): a fork
server that imported it must not fork any more."""

from __future__ import annotations

import threading
import time

from recipes.gpt.recipe import build  # noqa: F401  (the real trainer)

threading.Thread(target=time.sleep, args=(3600,), daemon=True, name="import-time").start()
