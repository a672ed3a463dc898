"""Named fault points, so that a fault-injection test stops a process at a known place, not by a race.

Off unless the environment names one: ``AIGC_FAULT_HOLD=train.checkpoint:20`` makes the process
that reaches point ``train.checkpoint`` with value 20 (rank 0, once its step-20 checkpoint is
written) log that it holds and block until it is killed. A test then kills it there, every time.
``AIGC_FAULT_DELAY=train.forward:1:0.05`` makes every pass through point ``train.forward`` with
value 1 (rank 1's forward passes) compute 0.05 s longer: a slow device, made on purpose (it spins, so
the time is CPU time, as a slower processor's would be, not a sleep).
``AIGC_FAULT_GAIN=train.loss:1:1e4`` scales rank 1's loss before its backward pass by 10⁴: a rank whose
gradients explode.
"""

from __future__ import annotations

import logging
import os
import threading
import time

log = logging.getLogger(__name__)
HOLD = "AIGC_FAULT_HOLD"
DELAY = "AIGC_FAULT_DELAY"
GAIN = "AIGC_FAULT_GAIN"


def point(name: str, value: object) -> None:
    """A place a test may hold a process at; a no-op unless ``AIGC_FAULT_HOLD`` is ``name:value``."""
    if os.environ.get(HOLD) == f"{name}:{value}":
        log.warning("fault point %s:%s reached: holding until killed (%s is set)", name, value, HOLD)
        threading.Event().wait()  # blocks for good; a signal still ends the process


def delay(name: str, value: object) -> None:
    """A place a test may slow down; a no-op unless ``AIGC_FAULT_DELAY`` is ``name:value:seconds``."""
    spec = os.environ.get(DELAY)
    if spec:
        where, _, seconds = spec.rpartition(":")
        if where == f"{name}:{value}":
            _spin(float(seconds))


def gain(name: str, value: object) -> float:
    """A factor a test may scale a quantity by at a place; 1 unless ``AIGC_FAULT_GAIN`` is ``name:value:factor``."""
    spec = os.environ.get(GAIN)
    if spec:
        where, _, factor = spec.rpartition(":")
        if where == f"{name}:{value}":
            return float(factor)
    return 1.0


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
