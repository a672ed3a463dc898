"""Worker processes start from a task process as orchestrators make them (aigc.procs)."""

import multiprocessing
import subprocess
import sys

import pytest

from aigc.config import PrepareConfig, RawDropConfig
from aigc.lake import LocalLake
from aigc.prepare import make_raw_drop, prepare


def _prepare_in(root: str, queue, billiard_key: bool) -> None:
    if billiard_key:  # what a Celery (billiard) pool worker leaves in the process it forks
        import billiard.process

        config = multiprocessing.current_process()._config
        config["authkey"] = billiard.process.AuthenticationString(bytes(config["authkey"]))
    raw, lake = LocalLake(f"{root}/raw"), LocalLake(f"{root}/lake")
    make_raw_drop(raw, "2026-11-20", RawDropConfig(n=60, seed=1))
    try:
        queue.put(prepare(raw, lake, "2026-11-20", PrepareConfig(workers=2))["curated"])
    except Exception as e:  # noqa: BLE001 - reported to the test
        queue.put(f"{type(e).__name__}: {e}")


@pytest.mark.parametrize("billiard_key", [False, True])
def test_prepare_starts_its_decoding_workers_inside_a_daemonic_process(tmp_path, billiard_key):
    """As in a task forked from a Celery prefork pool worker: before the fix, prepare failed
    there with "daemonic processes are not allowed to have children", then with "Pickling an
    AuthenticationString object is disallowed" (billiard's key type)."""
    if billiard_key:
        pytest.importorskip("billiard", reason="billiard comes with celery (requirements.txt)")
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    task = context.Process(target=_prepare_in, args=(str(tmp_path), queue, billiard_key), daemon=True)
    task.start()
    outcome = queue.get(timeout=180)
    task.join(30)
    assert isinstance(outcome, int) and outcome > 0, outcome
    assert multiprocessing.current_process()._config.get("daemon") is not True  # ours was never touched


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
        "from aigc.prepare import make_raw_drop, prepare\n"
        f"raw, lake = LocalLake({str(tmp_path / 'raw')!r}), LocalLake({str(tmp_path / 'lake')!r})\n"
        "make_raw_drop(raw, '2026-11-20', RawDropConfig(n=60, seed=1))\n"
        "summary = prepare(raw, lake, '2026-11-20', PrepareConfig(workers=2))\n"
        "print('ROWS', summary['curated'])\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ROWS" in out.stdout, out.stderr[-3000:]
    assert "re-run in a worker" not in out.stderr

