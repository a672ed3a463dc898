"""Fault points: nothing unless named; when named, the process holds there until it is killed."""

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

from aigc import faults

HOLDING = "import logging; logging.basicConfig(); from aigc import faults; faults.point('train.checkpoint', 20)"


def test_a_point_not_named_is_a_no_op(monkeypatch):
    held = []

    class Event:  # records a hold instead of blocking the test
        def wait(self):
            held.append(True)

    monkeypatch.setattr(faults, "threading", SimpleNamespace(Event=Event))  # this module's only
    monkeypatch.setenv(faults.HOLD, "train.checkpoint:40")
    faults.point("train.checkpoint", 20)  # another step is named
    faults.point("train.forward", 40)  # another point is named
    assert held == []
    faults.point("train.checkpoint", 40)  # the named one holds
    assert held == [True]
    monkeypatch.delenv(faults.HOLD)
    faults.point("train.checkpoint", 40)  # nothing is named
    assert held == [True]


def test_a_named_point_holds_the_process_until_it_is_killed():
    proc = subprocess.Popen([sys.executable, "-c", HOLDING], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, faults.HOLD: "train.checkpoint:20"})
    try:
        line = proc.stderr.readline()  # written just before it blocks: no race
        assert "fault point train.checkpoint:20 reached: holding until killed" in line
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_a_delay_point_sleeps_only_where_the_environment_names_it(monkeypatch):
    slept = []
    monkeypatch.setattr(faults, "_spin", slept.append)
    monkeypatch.setenv("AIGC_FAULT_DELAY", "train.forward:1:0.25")
    faults.delay("train.forward", 0)
    faults.delay("train.backward", 1)
    faults.delay("train.forward", 1)
    assert slept == [0.25]
    monkeypatch.delenv("AIGC_FAULT_DELAY")
    faults.delay("train.forward", 1)
    assert slept == [0.25]


def test_a_delay_spins_for_its_cpu_time():
    import time

    started = time.process_time()
    faults._spin(0.02)
    assert time.process_time() - started >= 0.02
