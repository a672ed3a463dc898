"""Task-time helpers that decide what a stage DAG's run works on, from the asset events that started it."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest
from airflow.sdk import Asset

from aigc_airflow.runtime import annotate_outlets, newest_event, partition_date, run_params, starts_the_chain


def event(minute: int, source: str | None = "aigc_deploy", **extra):
    """An asset event a task of ``source`` published (None: posted through the REST API, or a watcher's)."""
    return SimpleNamespace(extra=extra, timestamp=dt.datetime(2026, 12, 1, 0, minute, tzinfo=dt.UTC),
                           source_dag_id=source)


def context(events=None, dag_id="aigc_train", run_type="asset_triggered", logical_date=None, params=None):
    return {"triggering_asset_events": events or {}, "logical_date": logical_date, "params": params or {},
            "dag_run": SimpleNamespace(run_type=run_type, run_id="r1",
                                       run_after=dt.datetime(2026, 12, 1, tzinfo=dt.UTC)),
            "dag": SimpleNamespace(dag_id=dag_id)}


def test_a_run_started_by_events_works_on_the_newest_event_that_continues_the_chain():
    curated = Asset(name="aigc_curated")
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
    curated = Asset(name="aigc_curated")
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
    from aigc.lake.credentials import LONG_LIVED, children_credentials
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
    env = lake_env()  # the endpoint only: the launcher serves the role's credentials to the children
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AIGC_S3_ROLE_ARN"} & env.keys()
    with children_credentials(lake, {**s3_server.env(), **env}) as child_env:
        assert not set(LONG_LIVED) & child_env.keys()
        child = open_lake(f"s3://{s3_server.bucket}/conn-role", S3Options.from_env(child_env))  # as a worker does
        assert child.options.role_arn is None and child.get_json("x.json") == {"ok": True}


def test_a_workload_the_deployment_did_not_list_is_refused_before_its_module_is_imported(tmp_path, monkeypatch):
    """From the form (the run's own params) or from an asset event's params: the same check, and the module,
    which would write a marker on import, is never imported."""
    import sys

    import pytest
    from airflow.sdk.exceptions import AirflowFailException

    from aigc_airflow.runtime import pipeline_config

    marker = tmp_path / "imported"
    (tmp_path / "planted_workload.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nW = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AIGC_LAKE_URI", str(tmp_path / "lake"))
    curated = Asset(name="aigc_curated")
    by_form = context(run_type="manual", params={"preset": "smoke", "workload": "planted_workload:W"})
    by_event = context({curated: [event(1, date="2026-11-01", params={"workload": "planted_workload:W"})]},
                       params={"preset": "smoke", "workload": "image"})
    for ctx in (by_form, by_event):
        with pytest.raises(AirflowFailException, match="AIGC_ALLOWED_WORKLOADS"):
            pipeline_config(run_params(ctx))
    assert not marker.exists() and "planted_workload" not in sys.modules
    monkeypatch.setenv("AIGC_ALLOWED_WORKLOADS", "image,text")
    monkeypatch.setenv("AIGC_MAX_NNODES", "2")
    with pytest.raises(AirflowFailException, match="AIGC_MAX_NNODES"):
        run_params(context(run_type="manual", params={"nnodes": 3}))


def test_an_asset_event_naming_a_root_outside_the_allowed_ones_fails_the_run_before_it_reads(tmp_path, monkeypatch):
    import pytest
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("AIGC_LAKE_URI", str(tmp_path / "lake"))
    curated = Asset(name="aigc_curated")
    outside = context({curated: [event(1, date="2026-11-01", params={"raw_uri": str(tmp_path / "elsewhere")})]})
    with pytest.raises(AirflowFailException, match="raw_uri"):
        run_params(outside)
    forged = context({Asset(name="aigc_prompt_files"): [
        event(1, from_trigger=True, payload={"date": "2026-11-01", "prompts_key": "models/x/aliases.json"})]})
    with pytest.raises(AirflowFailException, match="prompts_key"):
        newest_event(forged)
    # Folded into one run with a stage's own event, a forged one is left out, not obeyed and not fatal.
    both = context({Asset(name="aigc_curated"): [event(1, date="2026-11-02", chain=True),
                                                        event(2, date="2026-11-03", params={"nnodes": 10_000})]})
    assert newest_event(both)["date"] == "2026-11-02"
    monkeypatch.setenv("AIGC_ALLOWED_ROOTS", str(tmp_path / "elsewhere"))
    assert run_params(outside)["raw_uri"] == str(tmp_path / "elsewhere")


def test_the_image_workloads_settings_from_the_form_are_checked_by_its_class_before_it_runs(tmp_path, monkeypatch):
    import pytest
    from airflow.sdk.exceptions import AirflowFailException

    from aigc_airflow.runtime import pipeline_config

    monkeypatch.setenv("AIGC_LAKE_URI", str(tmp_path / "lake"))
    chosen = run_params(context(run_type="manual", params={"preset": "demo", "workload": "image",
                                                           "settings": {"resolution": 64, "max_fid": 0.5}}))
    settings = pipeline_config(chosen).workload.settings
    assert (settings.resolution, settings.max_fid, settings.channels) == (64, 0.5, 16)  # the rest: the preset's
    with pytest.raises(AirflowFailException, match=r"ImageSettings\.resolution must be one of \(32, 64, 128, 256\)"):
        run_params(context(run_type="manual", params={"workload": "image", "settings": {"resolution": 33}}))


def test_the_form_offers_only_what_the_deployment_allows(tmp_path, monkeypatch):
    import re

    from aigc.config.access import AccessPolicy
    from aigc_airflow.params import params_for

    p = AccessPolicy.deployment(str(tmp_path / "lake"), {"AIGC_ALLOWED_ROOTS": "s3://drops/raw",
                                                         "AIGC_MAX_PREPARE_PARTS": "8"}.get)
    form = params_for("prepare", "generate", policy=p)
    assert form["workload"].schema["enum"] == ["image", "text", "hf-causal-lm", "hf-diffusion"]
    assert form["prepare_parts"].schema["maximum"] == 8
    pattern = re.compile(form["raw_uri"].schema["pattern"])
    assert pattern.match("s3://drops/raw/shapes") and pattern.match(str(tmp_path / "lake" / "raw"))
    for refused in ("s3://drops/rawx", "s3://other/raw", "s3://drops/raw/../x", "/etc/passwd"):
        assert not pattern.match(refused), refused
    assert re.match(form["prompts_uri"].schema["pattern"], "prompts/shapes/dt=2026-11-01/prompts.jsonl")
    assert "s3://drops/raw" in form["raw_uri"].description


def test_the_operators_limits_come_from_airflow_cfg_before_the_environment(tmp_path, monkeypatch):
    from aigc_airflow.runtime import access_policy

    monkeypatch.setenv("AIGC_LAKE_URI", str(tmp_path / "lake"))
    monkeypatch.setenv("AIGC_MAX_NNODES", "3")
    assert access_policy().bounds["nnodes"] == 3
    monkeypatch.setenv("AIRFLOW__AIGC__MAX_NNODES", "2")  # what `[aigc] max_nnodes = 2` in airflow.cfg sets
    monkeypatch.setenv("AIRFLOW__AIGC__ALLOWED_WORKLOADS", "text")
    policy = access_policy()
    assert policy.bounds["nnodes"] == 2 and policy.workloads == ("text",)
    from aigc_airflow.params import default_workload

    assert default_workload(policy) == "text"  # no default named: the form proposes the first allowed one
    monkeypatch.setenv("AIRFLOW__AIGC__DEFAULT_WORKLOAD", "image")
    assert access_policy().workloads == ("text", "image") and default_workload() == "image"


def test_an_event_no_aigc_task_published_may_not_name_a_model_version_or_a_run(tmp_path, monkeypatch):
    """A REST client allowed to post asset events is not allowed more than a form's user: the version, run and URIs
    such an event names are left out (the run then works as if started by hand), its date and params are kept."""
    monkeypatch.setenv("AIGC_LAKE_URI", str(tmp_path / "lake"))
    deployable = Asset(name="aigc_model_deployable")
    posted = {"date": "2026-11-01", "version": "v0001", "model": "shapes-cvae", "run_id": "20261101T000000Z-abc",
              "chain": True, "params": {"preset": "demo"}}
    by_rest = newest_event(context({deployable: [event(1, source=None, **posted)]}, dag_id="aigc_generate"))
    assert by_rest == {"date": "2026-11-01", "chain": True, "params": {"preset": "demo"}}
    by_deploy = newest_event(context({deployable: [event(1, source="aigc_deploy", **posted)]}, dag_id="aigc_generate"))
    assert by_deploy["version"] == "v0001" and by_deploy["run_id"] == "20261101T000000Z-abc"


def test_a_forms_workload_settings_reach_the_config_and_a_bad_one_fails_the_run_before_it_reads():
    import pytest
    from airflow.sdk.exceptions import AirflowFailException

    from aigc_airflow.runtime import pipeline_config

    ok = context(run_type="manual", params={"preset": "demo", "workload": "text", "settings": {"context": 2048}})
    assert pipeline_config(run_params(ok)).workload.settings.context == 2048
    bad = context(run_type="manual", params={"preset": "demo", "workload": "text", "settings": {"layers": 0}})
    with pytest.raises(AirflowFailException, match=r"'settings' = \{'layers': 0\} is refused: TextSettings.layers "
                                                   r"must be in \[1, 64\]"):
        run_params(bad)
    wrong = context(run_type="manual", params={"preset": "demo", "workload": "image", "settings": {"context": 8}})
    with pytest.raises(AirflowFailException, match=r"unknown setting\(s\) \['context'\] of workload 'image'"):
        run_params(wrong)  # another workload's setting


def test_the_nightly_schedule_is_the_operators_daily_cron_or_none(monkeypatch):
    """AIGC_NIGHTLY_CRON: once a day at the time the operator sets (each run one date); a cron that fires more often or
    less than daily would curate a date twice or skip one, and is refused by name (so is "none": backfills need a
    periodic schedule)."""
    from aigc_airflow.runtime import nightly_schedule

    monkeypatch.delenv("AIGC_NIGHTLY_CRON", raising=False)
    assert nightly_schedule().expression == "0 0 * * *" and str(nightly_schedule().timezone) == "UTC"
    monkeypatch.setenv("AIGC_NIGHTLY_CRON", "30  3 * * *")
    assert nightly_schedule().expression == "30 3 * * *"
    for bad in ("*/5 * * * *", "0 0 * * 1", "0 24 * * *", "midnight", "none"):
        monkeypatch.setenv("AIGC_NIGHTLY_CRON", bad)
        with pytest.raises(ValueError, match=r"AIGC_NIGHTLY_CRON must be 'M H \* \* \*'"):
            nightly_schedule()
    monkeypatch.setenv("AIRFLOW__AIGC__NIGHTLY_CRON", "0 2 * * *")  # airflow.cfg's [aigc] nightly_cron first
    assert nightly_schedule().expression == "0 2 * * *"


def test_a_base_model_folder_from_the_form_must_lie_under_an_allowed_root(tmp_path, monkeypatch):
    """The hf-causal-lm workload's base_model_uri (a workload setting named *_uri) is checked by the tasks' one
    validation path, as a raw URI is, before anything is read: outside the roots, the run fails naming the setting."""
    import pytest
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("AIGC_LAKE_URI", str(tmp_path / "lake"))
    monkeypatch.setenv("AIGC_ALLOWED_ROOTS", str(tmp_path / "models"))
    params = {"workload": "hf-causal-lm", "settings": {"base_model_uri": str(tmp_path / "models" / "my-llm")}}
    assert run_params(context(run_type="manual", params=params))["settings"]["base_model_uri"].endswith("my-llm")
    outside = {"workload": "hf-causal-lm", "settings": {"base_model_uri": str(tmp_path / "elsewhere")}}
    refused = r"'settings\.base_model_uri' .* outside the roots.*AIGC_ALLOWED_ROOTS"
    with pytest.raises(AirflowFailException, match=refused):
        run_params(context(run_type="manual", params=outside))
