"""The embedded metadata DB waits for SQLite's write lock instead of failing after sqlite3's 5 s."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUSY_TIMEOUT = ("from sqlalchemy import text; from airflow import settings; "
                "print(settings.engine.connect().execute(text('PRAGMA busy_timeout')).scalar())")


def busy_timeout_ms(tmp_path: Path, **extra: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__PLUGINS_FOLDER=str(ROOT / "plugins"),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", **extra)
    out = subprocess.run([sys.executable, "-c", BUSY_TIMEOUT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip().splitlines()[-1])


def test_airflow_opens_sqlite_with_the_projects_busy_timeout(tmp_path):
    """What the Makefile and the e2e stack set reaches Airflow's engine; without it sqlite3 waits 5 s."""
    assert busy_timeout_ms(tmp_path) == 5_000
    setting = {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "aigc_airflow.sqlite.CONNECT_ARGS"}
    assert busy_timeout_ms(tmp_path, **setting) == 60_000


def test_the_makefile_sets_it_for_sync_and_async_engines():
    makefile = (ROOT / "Makefile").read_text()
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS ", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC "):
        assert f"export {key}?= aigc_airflow.sqlite.CONNECT_ARGS" in makefile
