"""DistributedTrainOperator: one run id per DAG run across tries, and on_kill stops the whole process group."""

import subprocess
import sys
import time
from types import SimpleNamespace

import pendulum
import psutil

from aigc.config import preset
from aigc_airflow.train_operator import DistributedTrainOperator, training_run_id


def context(run_id="scheduled__2026-11-28T00:00:00+00:00", clear_number=0):
    dag_run = SimpleNamespace(run_id=run_id, clear_number=clear_number, run_after=None,
                              start_date=pendulum.datetime(2026, 11, 29, 0, 5, tz="UTC"))
    return {"dag_run": dag_run}


def test_every_try_of_a_dag_run_gets_the_same_training_run():
    cfg = preset("demo")
    first = training_run_id(context(), cfg)
    assert first == training_run_id(context(), cfg)  # a retry resumes
    assert first.startswith("20261129T000500")
    assert first != training_run_id(context(clear_number=1), cfg)  # a cleared run starts afresh
    assert first != training_run_id(context(run_id="manual__2026-11-28"), cfg)
    assert first != training_run_id(context(), cfg.override({"train": {"steps": 7}}))  # other work, other run


def test_on_kill_stops_the_launched_group_and_its_children():
    op = DistributedTrainOperator(task_id="train")
    script = ("import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 30  # poll for the grandchild, no fixed sleep
    while not (children := psutil.Process(proc.pid).children(recursive=True)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children
    op._started(proc)
    op.on_kill()
    assert proc.poll() is not None
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


def test_the_evaluate_task_links_to_its_report_in_the_aigc_view(monkeypatch):
    from aigc_airflow.evaluate_operator import EvaluateOperator, ReportLink

    op = EvaluateOperator(task_id="evaluate", generation={})
    assert [type(link) for link in op.operator_extra_links] == [ReportLink]
    assert ReportLink().get_link(op, ti_key=None) == ""
    op.report_uri = "s3://lake/evaluations/shapes-cvae/dt=2026-11-28/run=x/report.html"
    key = "evaluations/shapes-cvae/dt=2026-11-28/run=x/report.html"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    assert ReportLink().get_link(op, ti_key=None) == f"/aigc/lake/{key}"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/af/")
    assert ReportLink().get_link(op, ti_key=None) == f"https://airflow.example.com/af/aigc/lake/{key}"
    op.report_uri = "file:///srv/lake/curated/shapes/dt=2026-11-28/run=x/_manifest.json"  # not a report
    assert ReportLink().get_link(op, ti_key=None) == ""
