"""Task-time helpers: the lake (through the ``aws_default`` connection), dates, configuration."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

log = logging.getLogger(__name__)
AWS_CONN_ID = "aws_default"


def open_task_lake(uri: str | None = None):
    """The lake as a task sees it: S3 credentials and endpoint from the ``aws_default`` connection.

    Without that connection (the laptop default, or plain AWS variables on the worker) the core's
    own defaults apply: the standard AWS environment variables.
    """
    from aigc.lake import S3Options, default_lake_uri, open_lake

    uri = uri or default_lake_uri()
    if not uri.startswith("s3://"):
        return open_lake(uri)
    return open_lake(uri, s3_options_from_connection(S3Options.from_env()))


def lake_env() -> dict[str, str]:
    """The ``aws_default`` credentials as AWS_* variables, for child processes (torchrun workers) that open the lake."""
    from aigc.lake import S3Options, default_lake_uri

    if not default_lake_uri().startswith("s3://"):
        return {}
    opts = s3_options_from_connection(S3Options.from_env())
    env = {"AWS_ACCESS_KEY_ID": opts.access_key, "AWS_SECRET_ACCESS_KEY": opts.secret_key,
           "AWS_SESSION_TOKEN": opts.session_token, "AWS_ENDPOINT_URL": opts.endpoint_url,
           "AWS_DEFAULT_REGION": opts.region}
    return {k: v for k, v in env.items() if v}


def s3_options_from_connection(fallback):
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    from aigc.lake import S3Options

    try:
        hook = AwsBaseHook(aws_conn_id=AWS_CONN_ID, client_type="s3")
        creds = hook.get_credentials()
        endpoint = hook.conn_config.endpoint_url
        region = hook.conn_region_name
    except AirflowNotFoundException:
        log.info("no %r connection: using the AWS environment variables for the lake", AWS_CONN_ID)
        return fallback
    return S3Options(
        endpoint_url=endpoint or fallback.endpoint_url,
        access_key=creds.access_key, secret_key=creds.secret_key, session_token=creds.token,
        region=region or fallback.region,
    )


def partition_date(context: dict[str, Any]) -> dt.date:
    """The date that names this run's partitions: its logical date (UTC).

    With the DAG's daily data-interval timetable a scheduled run's logical date *is* the start
    of its interval (the day whose drop it prepares); a manual run or `airflow dags test D`
    gets the date the user picked, where the interval Airflow infers would be the day before.
    Runs triggered with no logical date fall back to the interval, then to when they ran.
    """
    for key in ("logical_date", "data_interval_start"):
        if context.get(key) is not None:
            return context[key].astimezone(dt.UTC).date()
    return context["dag_run"].run_after.astimezone(dt.UTC).date()


def dag_run_scoped_id(context: dict[str, Any], cfg, stage: str) -> str:
    """A run id for a stage's lake folder, the same for every try of a task in one DAG run.

    Retries then find (and resume or skip) what an earlier try left. A cleared run, another
    configuration or other code gets a new id, rather than reusing work that meant something else.
    """
    import hashlib
    import json

    from aigc.lake.publish import new_run_id
    from aigc.train.artifacts import code_version

    dag_run = context["dag_run"]
    started = dag_run.start_date or dag_run.run_after
    identity = json.dumps([stage, dag_run.run_id, getattr(dag_run, "clear_number", 0), cfg.to_dict(),
                           code_version()], sort_keys=True, default=str)
    return new_run_id(started, token=hashlib.sha256(identity.encode()).hexdigest()[:6])


def annotate_outlets(context: dict[str, Any], summary: dict) -> None:
    """Say in each outlet's asset event what was published (date, run, version, URIs).

    A DAG scheduled on the asset then reads which partition to consume from the triggering
    event's ``extra`` instead of guessing "the latest".
    """
    extra = {"date": str(summary.get("date") or partition_date(context))}
    extra.update({k: v for k, v in summary.items()
                  if (k in ("run_id", "version") or k.endswith("_uri")) and isinstance(v, str | int)})
    for asset in context["task"].outlets:
        context["outlet_events"][asset].extra = extra


def partition_lease(context: dict[str, Any], lake, date: dt.date):
    """The lease that lets one DAG run at a time write this date's partitions (see aigc.lake.lease); the
    ``aigc`` commands that write take the same one."""
    from aigc.lake.lease import date_lease

    return date_lease(lake, date, context["dag"].dag_id)


def hold_partition(context: dict[str, Any], lake, date: dt.date) -> dict:
    """Take or renew this DAG run's lease on ``date``; LeaseHeld if another run holds it.

    The owner is the DAG run id, so every task and every retry of one run share the lease.
    """
    from aigc.config import DATE_LEASE_TTL

    return partition_lease(context, lake, date).hold(context["dag_run"].run_id, DATE_LEASE_TTL)


def pipeline_config(params: dict[str, Any]):
    """The typed configuration of a run: the chosen preset, overridden by the form's values."""
    from aigc.config import preset
    from aigc.config.form import FORM_FIELDS

    cfg = preset(params.get("preset") or "default")
    changes: dict[str, dict[str, Any]] = {}
    for param, (section, name) in FORM_FIELDS.items():
        if params.get(param) is not None:
            changes.setdefault(section, {})[name] = params[param]
    if "raw" in changes and "resolution" in changes["raw"]:
        changes.setdefault("prepare", {})["resolution"] = changes["raw"]["resolution"]
    return cfg.override(changes)
