"""Named fault points, so that a fault-injection test stops a process at a known place, not by a race.

Off unless the environment names one: ``AIGC_FAULT_HOLD=train.checkpoint:20`` makes the process
that reaches point ``train.checkpoint`` with value 20 (rank 0, once its step-20 checkpoint is
written) log that it holds and block until it is killed. A test then kills it there, every time.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)
HOLD = "AIGC_FAULT_HOLD"


def point(name: str, value: object) -> None:
    """A place a test may hold a process at; a no-op unless ``AIGC_FAULT_HOLD`` is ``name:value``."""
    if os.environ.get(HOLD) == f"{name}:{value}":
        log.warning("fault point %s:%s reached: holding until killed (%s is set)", name, value, HOLD)
        threading.Event().wait()  # blocks for good; a signal still ends the process
