"""Worker processes start from a task process as orchestrators make them (aigc.procs)."""

import os
import subprocess
import sys

import pytest

from aigc.procs import available_cpus

# Runs in a fresh interpreter: a process that already started a forkserver (this pytest
# process, after other prepare tests) cannot hand it to a forked child.
DAEMONIC_TASK = """
import multiprocessing, sys
from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake import LocalLake
from aigc.workloads.image.rawdrop import make_raw_drop
from aigc.workloads.image import prepare_image

def task(root, queue):
    raw, lake = LocalLake(root + "/raw"), LocalLake(root + "/lake")
    make_raw_drop(raw, "2026-11-20", RawDropConfig(n=60, seed=1))
    try:
        queue.put(prepare_image(raw, lake, "2026-11-20", PrepareConfig(workers=2))["curated"])
    except Exception as e:
        queue.put(f"{type(e).__name__}: {e}")

if __name__ == "__main__":
    if sys.argv[2] == "billiard":  # as Celery's prefork pool starts its workers: billiard's process, key and flag
        import billiard
        context = billiard.get_context("fork")
    else:
        context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=task, args=(sys.argv[1], queue), daemon=True)
    child.start()
    print("CURATED", queue.get(timeout=180))
    child.join(30)
"""


@pytest.mark.parametrize("billiard_key", [False, True])
def test_prepare_starts_its_decoding_workers_inside_a_daemonic_process(tmp_path, billiard_key):
    """As in a task forked from a Celery prefork pool worker: before the fix, prepare failed
    there with "daemonic processes are not allowed to have children", then with "Pickling an
    AuthenticationString object is disallowed" (billiard's key type)."""
    script = tmp_path / "daemonic_task.py"
    script.write_text(DAEMONIC_TASK)
    out = subprocess.run([sys.executable, str(script), str(tmp_path), "billiard" if billiard_key else "plain"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    outcome = out.stdout.split("CURATED", 1)[1].strip()
    assert outcome.isdigit() and int(outcome) > 0, outcome


def test_workers_start_under_a_main_script_that_cannot_be_imported_again(tmp_path):
    """As in an Airflow task: ``__main__`` is the ``airflow`` script, whose re-import there fails.

    Decoding workers must not re-run it (they did: every prepare task failed under a real scheduler).
    """
    script = tmp_path / "main_script.py"
    script.write_text(
        "import sys\n"
        "if __name__ != '__main__':\n"
        "    raise SystemExit('the main script was re-run in a worker')\n"
        "from aigc.config import PrepareConfig, RawDropConfig\n"
        "from aigc.lake import LocalLake\n"
        "from aigc.workloads.image.rawdrop import make_raw_drop\n"
        "from aigc.workloads.image import prepare_image\n"
        f"raw, lake = LocalLake({str(tmp_path / 'raw')!r}), LocalLake({str(tmp_path / 'lake')!r})\n"
        "make_raw_drop(raw, '2026-11-20', RawDropConfig(n=60, seed=1))\n"
        "summary = prepare_image(raw, lake, '2026-11-20', PrepareConfig(workers=2))\n"
        "print('ROWS', summary['curated'])\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ROWS" in out.stdout, out.stderr[-3000:]
    assert "re-run in a worker" not in out.stderr



@pytest.mark.parametrize(("files", "expected"), [
    ({"cpu.max": "150000 100000\n"}, 2),  # cgroup v2: 1.5 CPUs' quota → 2 processes
    ({"cpu.max": "max 100000\n"}, None),  # v2 without a quota: the cores
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),  # no cgroup files (not Linux, or not mounted)
])
def test_available_cpus_follows_the_container_quota_not_the_host(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    cores = len(os.sched_getaffinity(0))
    assert available_cpus(tmp_path) == (min(expected, cores) if expected else cores)


def test_a_quota_of_a_fraction_of_a_cpu_still_gets_one_process(tmp_path):
    (tmp_path / "cpu.max").write_text("20000 100000\n")
    assert available_cpus(tmp_path) == 1
