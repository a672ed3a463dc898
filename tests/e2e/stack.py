"""What the end-to-end tests share: the deployment (``aigc.devtools.airflow_stack``, which the pipeline bench starts
too) and the helpers that read what its runs published."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

from aigc.devtools.airflow_stack import (  # noqa: F401 - the tests import them from here
    ARTIFACTS,
    DAG_ID,
    DAG_IDS,
    STAGE_DAG_IDS,
    USER,
    AirflowStack,
)

# The pipeline at smoke size (aigc.config's "smoke" preset): every stage for real, about a minute on 2 cores.
SMOKE_CONF = {"preset": "smoke"}
STAGES = (("curated", "shapes"), ("training", "shapes-cvae"), ("generations", "shapes-cvae"),
          ("evaluations", "shapes-cvae"))


def published_runs(lake, date: str) -> dict[str, str]:
    """stage → the run id its partition for ``date`` points at (NotPublished if one has none); for generations, a
    candidate's evaluation set, which its published evaluation names (the generations pointer is content's)."""
    from aigc.lake.keys import partition
    from aigc.lake.publish import resolve

    runs = {stage: resolve(lake, partition(stage, dataset, date))["run_id"] for stage, dataset in STAGES
            if stage != "generations"}
    evaluation = resolve(lake, partition("evaluations", "shapes-cvae", date))
    return {**runs, "generations": evaluation["generations"].rsplit("run=", 1)[1]}


def run_date(run: dict) -> str:
    """The date a DAG run (as the REST API returns it) is for."""
    return run["logical_date"][:10]


def preloaded_children(parent_pid: int, title: str, recursive: bool = False) -> list[tuple[int, bool]]:
    """(pid, holds PyTorch) of each child process of ``parent_pid`` whose title matches ``title`` (a regex): the
    processes that fork tasks, which the deployment's preload (aigc_airflow.operations) has import PyTorch first."""
    import re

    import psutil

    found = []
    for child in psutil.Process(parent_pid).children(recursive=recursive):
        try:
            if re.search(title, " ".join(child.cmdline())):
                found.append((child.pid, holds_pytorch(child.pid)))
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            continue  # a process that ended meanwhile
    return found


def holds_pytorch(pid: int) -> bool:
    return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()


@contextmanager
def scheduler_stopped(stack: AirflowStack, deadline_s: float = 60.0):
    """The stack's scheduler stopped (SIGSTOP) at a moment it holds no lock on the SQLite database, so what happens
    meanwhile happens between the same two of its loops; continued (SIGCONT) on leaving."""
    scheduler = stack.processes["scheduler"]
    deadline = time.monotonic() + deadline_s
    while True:
        os.kill(scheduler.pid, signal.SIGSTOP)
        if _nobody_holds(stack.home / "airflow.db"):
            break
        os.kill(scheduler.pid, signal.SIGCONT)  # stopped inside a transaction: let it finish, try again
        assert time.monotonic() < deadline, "the scheduler held the database each time it was stopped"
        time.sleep(0.05)
    try:
        yield
    finally:
        os.kill(scheduler.pid, signal.SIGCONT)


def _nobody_holds(database: Path) -> bool:
    """Whether an exclusive lock on the SQLite file can be taken at once (no reader or writer inside it)."""
    connection = sqlite3.connect(database, timeout=0, isolation_level=None)
    try:
        connection.execute("BEGIN EXCLUSIVE")
        connection.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:  # database is locked
        return False
    finally:
        connection.close()
