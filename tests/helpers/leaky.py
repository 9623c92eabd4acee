"""A recipe that leaks identifying values into its logs and its error, for sanitization tests.

It wraps the real GPT trainer: the trial really trains, and writes what a careless training
script writes (its home path, its host, a private address, a token it was given) to stderr
and, via ``build_raise``, into the exception that ends the trial.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from recipes.gpt.recipe import GPTTrainer

LEAK_HOST = "gpu17.cluster.internal"
LEAK_IP = "10.20.30.40"


def _leak_line() -> str:
    return (f"connecting {os.environ.get('HOSTNAME', '?')} -> {LEAK_HOST} at {LEAK_IP}:29500 as "
            f"{os.environ.get('USER', '?')}; data in {os.path.expanduser('~/datasets/private')}; "
            f"hub token {os.environ.get('HF_TOKEN', '?')} "
            f"password={os.environ.get('MY_SERVICE_PASSWORD', '?')}")


class _Leaky(GPTTrainer):
    fail = False

    def train_step(self, batch: Any) -> Any:
        if self.fail and batch.index >= 1:
            raise RuntimeError(f"lost the rendezvous: {_leak_line()}")
        return super().train_step(batch)


def build(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    print(_leak_line(), file=sys.stderr, flush=True)
    logging.getLogger("leaky").warning("%s", _leak_line())
    return _Leaky(workload, bucket, device)


def build_raise(workload: Any, bucket: Any, device: str) -> GPTTrainer:
    t = build(workload, bucket, device)
    t.fail = True  # type: ignore[attr-defined]
    return t
