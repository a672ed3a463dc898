"""The environment torchrun's workers start with: the cores shared out, idle OpenMP threads asleep."""

from __future__ import annotations

from aigc.config import preset
from aigc.train.launch import thread_env


def test_workers_idle_openmp_threads_sleep_unless_the_user_chose_otherwise(monkeypatch):
    cfg = preset("smoke")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    env = thread_env(cfg)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and int(env["OMP_NUM_THREADS"]) >= 1
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert thread_env(cfg)["OMP_WAIT_POLICY"] == "ACTIVE"
