"""Starting worker processes from inside an orchestrator's task process, and how many to start.

A task process is not a fresh interpreter: Airflow started it from the ``airflow`` script,
and Celery's prefork pool forked it from a daemonic pool worker. What multiprocessing
inherits from those breaks a process pool; ``worker_processes_allowed`` undoes it through multiprocessing's
documented process attributes while the pool's workers start. Each part was found by running the
pipeline under that orchestrator.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import multiprocessing.process
import os
import sys
from collections.abc import Iterator
from pathlib import Path


def available_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may use: the fewest of the host's cores, the CPU affinity set, and the container's CPU
    quota (cgroup v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``), rounded up.

    ``os.cpu_count()`` counts the host: a container limited to 2 CPUs on a 64-core node would start 64 decoding
    processes or 64 training threads that the kernel then throttles to 2 cores' worth.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_quota(cgroup)
    return max(1, min(cpus, math.ceil(quota)) if quota else cpus)


def _cgroup_quota(cgroup: Path) -> float | None:
    """CPUs' worth of the cgroup's quota, or None when there is none (or no cgroup file to read)."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]  # v2: "max 100000" or "200000 100000"
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())  # v1: -1 means none
        period = int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def worker_processes_allowed() -> Iterator[None]:
    """While the block runs, this process may start worker processes, whatever started it."""
    with main_script_hidden(), daemon_flag_cleared():
        yield


@contextlib.contextmanager
def main_script_hidden() -> Iterator[None]:
    """Keep worker processes from re-running the parent's main *script*.

    A forkserver or spawn child re-executes ``__main__`` by path when it was started as a
    script. Under Airflow that script is the ``airflow`` CLI: in a task process (which gets no
    metadata-DB URL) its import fails, and elsewhere it costs every worker an import of
    Airflow. The workers need nothing from ``__main__``, so its path is hidden while they start.
    """
    main = sys.modules["__main__"]
    path = getattr(main, "__file__", None)
    if getattr(main, "__spec__", None) is not None or path is None:
        yield  # started with -m (re-imported by name, harmless) or interactively
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


@contextlib.contextmanager
def daemon_flag_cleared() -> Iterator[None]:
    """Let a process that Celery's prefork pool forked start children of its own.

    Such a task process inherits two things from the pool worker (a billiard process), each changed through
    multiprocessing's documented process attributes and set back afterwards:
    - its daemon flag, and multiprocessing refuses a daemon children ("daemonic processes are not allowed to have
      children"). The rule guards against orphans when a daemon's parent exits; here the pool is owned by a
      ``with`` block in the task and shut down with it;
    - its authentication key as billiard's own type, which multiprocessing cannot pickle to a forkserver child
      ("Pickling an AuthenticationString object is disallowed"). The same bytes, set by multiprocessing's own
      ``authkey`` setter (billiard's would keep its type), serve the same purpose.
    """
    me = multiprocessing.current_process()
    daemonic, key = me.daemon, me.authkey
    me.daemon = False
    multiprocessing.process.BaseProcess.authkey.fset(me, bytes(key))
    try:
        yield
    finally:
        me.daemon = daemonic
        me.authkey = bytes(key)  # its own class's setter: its own key type again
