"""Task-time helpers that decide what a stage DAG's run works on, from the asset events that started it."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from airflow.sdk import Asset

from aigc_airflow.runtime import annotate_outlets, newest_event, partition_date, run_params, starts_the_chain


def event(minute: int, **extra):
    return SimpleNamespace(extra=extra, timestamp=dt.datetime(2026, 12, 1, 0, minute, tzinfo=dt.UTC))


def context(events=None, dag_id="aigc_train", run_type="asset_triggered", logical_date=None, params=None):
    return {"triggering_asset_events": events or {}, "logical_date": logical_date, "params": params or {},
            "dag_run": SimpleNamespace(run_type=run_type, run_id="r1",
                                       run_after=dt.datetime(2026, 12, 1, tzinfo=dt.UTC)),
            "dag": SimpleNamespace(dag_id=dag_id)}


def test_a_run_started_by_events_works_on_the_newest_event_that_continues_the_chain():
    curated = Asset(name="aigc_curated_shapes")
    ctx = context({curated: [event(3, date="2026-11-03", chain=False), event(1, date="2026-11-01", chain=True),
                             event(2, date="2026-11-02", chain=True)]})
    assert partition_date(ctx) == dt.date(2026, 11, 2)  # the backfill's newer event does not pick the date
    assert newest_event(ctx)["date"] == "2026-11-02"
    backfilled_only = context({curated: [event(1, date="2026-11-01", chain=False)]})
    assert partition_date(backfilled_only) == dt.date(2026, 11, 1)


def test_a_watchers_event_is_read_from_its_payload_and_a_run_with_no_events_from_its_logical_date():
    prompts = Asset(name="aigc_prompt_files")
    payload = {"date": "2026-10-01", "prompts_key": "prompts/shapes/dt=2026-10-01/prompts.jsonl"}
    ctx = context({prompts: [event(1, from_trigger=True, payload=payload)]}, dag_id="aigc_generate")
    assert newest_event(ctx) == payload and partition_date(ctx) == dt.date(2026, 10, 1)
    manual = context(run_type="manual", logical_date=dt.datetime(2026, 11, 28, 12, tzinfo=dt.UTC))
    assert newest_event(manual) is None and partition_date(manual) == dt.date(2026, 11, 28)


def test_backfills_and_the_all_stages_dag_start_no_stage_dag():
    assert starts_the_chain(context(dag_id="aigc_prepare", run_type="scheduled"))
    assert not starts_the_chain(context(dag_id="aigc_prepare", run_type="backfill"))
    assert not starts_the_chain(context(dag_id="aigc_pipeline", run_type="manual"))


def test_asset_events_say_what_was_published_and_by_which_run():
    outlet = Asset(name="aigc_model_candidate")
    ctx = {**context(dag_id="aigc_train"), "task": SimpleNamespace(outlets=[outlet]),
           "outlet_events": {outlet: SimpleNamespace(extra=None)}}
    ctx["params"] = {"preset": "demo", "train_steps": None}
    annotate_outlets(ctx, {"date": "2026-11-02", "run_id": "20261102T000000Z-abc", "run_uri": "file:///l/x",
                           "weights": [1, 2], "model": "shapes-cvae"})
    assert ctx["outlet_events"][outlet].extra == {
        "date": "2026-11-02", "chain": True, "dag_id": "aigc_train", "dag_run_id": "r1",
        "params": {"preset": "demo"}, "run_id": "20261102T000000Z-abc", "run_uri": "file:///l/x",
        "model": "shapes-cvae"}


def test_a_deployment_goes_before_a_prompt_file_folded_into_the_same_run_and_the_rest_is_logged(caplog):
    deployable, prompts = Asset(name="aigc_model_deployable"), Asset(name="aigc_prompt_files")
    file = {"date": "2026-10-02", "prompts_key": "prompts/shapes/dt=2026-10-02/prompts.jsonl"}
    ctx = context({deployable: [event(1, date="2026-11-01", version="v0003", chain=True)],
                   prompts: [event(2, from_trigger=True, payload=file)]}, dag_id="aigc_generate")
    assert newest_event(ctx)["version"] == "v0003" and partition_date(ctx) == dt.date(2026, 11, 1)
    assert "prompts/shapes/dt=2026-10-02/prompts.jsonl" in caplog.text  # not dropped silently


def test_an_asset_started_run_carries_on_with_the_form_values_of_the_run_it_follows():
    curated = Asset(name="aigc_curated_shapes")
    upstream = {"preset": "demo", "n_records": 500, "synthetic_drop": False}
    ctx = context({curated: [event(1, date="2026-11-01", chain=True, params=upstream)]},
                  params={"preset": "default", "train_steps": None})
    assert run_params(ctx) == {"preset": "demo", "train_steps": None, "n_records": 500, "synthetic_drop": False}
    by_hand = context(run_type="manual", params={"preset": "smoke", "train_steps": 3})
    assert run_params(by_hand) == {"preset": "smoke", "train_steps": 3}


def test_a_role_in_the_connection_reaches_the_lake_and_the_children_as_the_role_not_as_expiring_keys(
        s3_server, monkeypatch):
    """The hook would hand over the role's credentials of the moment (an hour's worth); the lake gets the
    connection's keys and the role instead and assumes it itself, and so does each child process."""
    import json

    from aigc.lake import S3Lake, S3Options, open_lake
    from aigc_airflow.runtime import lake_env, open_task_lake

    role = "arn:aws:iam::123456789012:role/aigc-lake"
    conn = json.loads(s3_server.env()["AIRFLOW_CONN_AWS_DEFAULT"])
    conn["extra"]["role_arn"] = role
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(conn))
    monkeypatch.setenv("AIGC_LAKE_URI", f"s3://{s3_server.bucket}/conn-role")
    lake = open_task_lake()
    assert isinstance(lake, S3Lake) and lake.options.role_arn == role and lake.options.session_token is None
    lake.put_json("x.json", {"ok": True})
    assert lake._role_session.get_credentials().get_frozen_credentials().access_key != conn["login"]
    env = lake_env()
    assert env["AIGC_S3_ROLE_ARN"] == role and "AWS_SESSION_TOKEN" not in env
    child = open_lake(f"s3://{s3_server.bucket}/conn-role", S3Options.from_env(env))  # as a torchrun worker opens it
    assert child.options.role_arn == role and child.get_json("x.json") == {"ok": True}
