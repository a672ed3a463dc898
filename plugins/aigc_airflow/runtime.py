"""Task-time helpers: the lake (through the ``aws_default`` connection), dates, configuration."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
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
    """The ``aws_default`` connection as AWS_* variables, for child processes (torchrun workers) that open the lake.

    With a role in the connection (extra ``role_arn``) only the endpoint and region: the launcher serves the
    children the role's renewed credentials (aigc.lake.credentials), so no long-lived key and no credential that
    would expire mid-run reaches them."""
    from aigc.lake import S3Options, default_lake_uri

    if not default_lake_uri().startswith("s3://"):
        return {}
    opts = s3_options_from_connection(S3Options.from_env())
    env = {"AWS_ENDPOINT_URL": opts.endpoint_url, "AWS_DEFAULT_REGION": opts.region}
    if not opts.role_arn:
        env.update({"AWS_ACCESS_KEY_ID": opts.access_key, "AWS_SECRET_ACCESS_KEY": opts.secret_key,
                    "AWS_SESSION_TOKEN": opts.session_token})
    return {k: v for k, v in env.items() if v}


def s3_options_from_connection(fallback):
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    from aigc.lake import S3Options

    try:
        hook = AwsBaseHook(aws_conn_id=AWS_CONN_ID, client_type="s3")
        config = hook.conn_config
        endpoint = config.endpoint_url
        if config.role_arn:
            # The connection's own keys and the role, not the hook's assumed credentials: those expire within the
            # hour, the lake assumes the role itself and renews it (S3Options.role_arn). The region is read from the
            # connection: the hook's would build a client, assuming the role once more.
            return S3Options(endpoint_url=endpoint or fallback.endpoint_url, access_key=config.aws_access_key_id,
                             secret_key=config.aws_secret_access_key, session_token=config.aws_session_token,
                             role_arn=config.role_arn, region=config.region_name or fallback.region)
        creds, region = hook.get_credentials(), hook.conn_region_name
    except AirflowNotFoundException:
        log.info("no %r connection: using the AWS environment variables for the lake", AWS_CONN_ID)
        return fallback
    return S3Options(
        endpoint_url=endpoint or fallback.endpoint_url,
        access_key=creds.access_key, secret_key=creds.secret_key, session_token=creds.token,
        region=region or fallback.region,
    )


def deployment_setting(name: str) -> str | None:
    """An operator's setting ``AIGC_<NAME>``: ``[aigc] <name>`` in airflow.cfg (or AIRFLOW__AIGC__<NAME>), else the
    environment variable itself. Never a trigger's: neither is reachable from a form, the REST API or an event."""
    from airflow.configuration import conf

    value = conf.get("aigc", name.removeprefix("AIGC_").lower(), fallback=None)
    return value if value is not None else os.environ.get(name)


NIGHTLY_CRON = "0 0 * * *"
_DAILY = re.compile(r"^(\d{1,2}) (\d{1,2}) \* \* \*$")


def nightly_schedule():
    """aigc_prepare's schedule, the deployment's ``AIGC_NIGHTLY_CRON`` (``[aigc] nightly_cron``): ``M H * * *``, once a
    day at H:M UTC, each run curating the day its interval starts on (the default, ``0 0 * * *``: day D as soon as
    it has ended; ``0 3 * * *``: three hours later, for producers whose drops land late). A cron that fires more or
    less often than daily would curate one date several times or skip dates, so it is refused, naming the setting.
    (There is no "none": a backfill needs a periodic schedule; pause aigc_prepare to stop the nightly runs.)"""
    from airflow.sdk import CronDataIntervalTimetable

    cron = " ".join((deployment_setting("AIGC_NIGHTLY_CRON") or NIGHTLY_CRON).split())
    daily = _DAILY.match(cron)
    if not daily or int(daily.group(1)) > 59 or int(daily.group(2)) > 23:
        raise ValueError(f"AIGC_NIGHTLY_CRON must be 'M H * * *' (once a day at H:M UTC, e.g. {NIGHTLY_CRON!r}), "
                         f"got {cron!r}")
    return CronDataIntervalTimetable(cron, timezone="UTC")


def access_policy():
    """The lake roots, workloads and resource bounds this deployment lets a trigger ask for (aigc.config.access)."""
    from aigc.config.access import AccessPolicy

    return AccessPolicy.deployment(os.environ.get("AIGC_LAKE_URI") or _default_lake_uri(), deployment_setting)


def _default_lake_uri() -> str:
    from aigc.lake import default_lake_uri

    return default_lake_uri()


def refused(e: Exception):
    """A trigger's refused value as the task's failure: no retry (the same values would be refused again)."""
    from airflow.sdk.exceptions import AirflowFailException

    return AirflowFailException(f"this run's values are refused before anything was read or written: {e}")


def triggering_events(context: dict[str, Any]) -> list[dict]:
    """The asset events that started this run (none for a scheduled, manual or backfill run), oldest first, as
    {"asset": name, "extra": …}; a watcher's event has its trigger's payload as its extra. Each extra is checked as
    a form's values are (aigc.config.access.check_event), before the task does anything: an event no aigc task
    published says only what a form could; a refused event is left out and logged (Airflow may fold it into one run
    with a stage's own event), and a run started by refused events only fails."""
    from aigc.config.access import Refused, check_event
    from aigc_airflow.assets import AIGC_DAGS  # Airflow records an event's source DAG: a REST client cannot set it

    events, refusals, policy = [], [], None
    for asset, asset_events in (context.get("triggering_asset_events") or {}).items():
        for e in asset_events:
            extra = dict(e.extra or {})
            if extra.get("from_trigger"):
                extra = dict(extra.get("payload") or {})
            policy = policy or access_policy()
            try:
                extra = check_event(extra, policy, from_pipeline=getattr(e, "source_dag_id", None) in AIGC_DAGS)
            except Refused as err:
                log.error("an event of %s is left out: %s", getattr(asset, "name", asset), err)
                refusals.append(err)
                continue
            events.append({"asset": getattr(asset, "name", str(asset)), "extra": extra,
                           "timestamp": e.timestamp})
    if refusals and not events:
        raise refused(refusals[-1])
    return sorted(events, key=lambda e: e["timestamp"])


def newest_event(context: dict[str, Any]) -> dict | None:
    """The extra of the event whose publication this run consumes: the newest that asks for the chain to go on
    (else the newest of all), a deployment before a dropped prompt file (whose claim aigc_generate hands back to
    the watcher). None for a run no asset event started. Airflow folds the events that arrive while a run
    cannot start into one run: the others are logged, by date, so none is dropped silently (their partitions
    stay staged; trigger the DAG for them)."""
    events = triggering_events(context)
    if not events:
        return None
    chained = [e for e in events if e["extra"].get("chain", True)] or events
    chosen = [e for e in chained if not e["extra"].get("prompts_key")] or chained
    folded = [e for e in chained if e is not chosen[-1] and e["extra"] != chosen[-1]["extra"]]
    if folded:
        log.warning("%d other event(s) were folded into this run and are not handled by it: %s", len(folded),
                    ", ".join(f"{e['asset']} {e['extra'].get('date')} "
                              f"{e['extra'].get('run_id') or e['extra'].get('prompts_key') or ''}" for e in folded))
    return chosen[-1]["extra"]


def run_params(context: dict[str, Any]) -> dict[str, Any]:
    """The run's form values, checked against what the deployment allows (aigc.config.access: the same check for
    the form, the REST API and an event). A run started by asset events has no form of its own: it carries on
    with the values of the run that published what it consumes (its preset, its overrides), so a chain started
    from a form with preset=demo stays a demo chain."""
    from aigc.config.access import Refused, check_request

    own = dict(context["params"])
    event = newest_event(context)
    values = {**own, **event["params"]} if event and isinstance(event.get("params"), dict) else own
    try:
        checked = check_request(values, access_policy())
        if checked.get("settings"):  # the workload's settings class checks them: fail now, not in a later task
            try:
                pipeline_config(checked)
            except ValueError as e:
                raise Refused("settings", checked["settings"], str(e)) from None
        return checked
    except Refused as e:
        raise refused(e) from None


def partition_date(context: dict[str, Any]) -> dt.date:
    """The date that names this run's partitions.

    A run started by asset events works on the date the newest event names (a stage DAG consumes
    what its upstream published). Otherwise its logical date (UTC): with the daily data-interval
    timetable a scheduled run's logical date *is* the start of its interval (the day whose drop it
    prepares); a manual run or `airflow dags test D` gets the date the user picked. Runs with no
    logical date fall back to the interval, then to when they ran.
    """
    event = newest_event(context)
    if event and event.get("date"):
        return dt.date.fromisoformat(event["date"])
    for key in ("logical_date", "data_interval_start"):
        if context.get(key) is not None:
            return context[key].astimezone(dt.UTC).date()
    return context["dag_run"].run_after.astimezone(dt.UTC).date()


def starts_the_chain(context: dict[str, Any]) -> bool:
    """Whether this run's publications should start the next stage's DAG.

    Not a backfill's (re-curating past dates must not train a model per date) and not the all-stages
    ``aigc_pipeline``'s (it runs every stage itself)."""
    from aigc_airflow.assets import ALL_STAGES_DAG

    return context["dag_run"].run_type != "backfill" and context["dag"].dag_id != ALL_STAGES_DAG


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
    extra = {"date": str(summary.get("date") or partition_date(context)), "chain": starts_the_chain(context),
             "dag_id": context["dag"].dag_id, "dag_run_id": context["dag_run"].run_id,
             "params": {k: v for k, v in run_params(context).items() if v is not None}}
    extra.update({k: v for k, v in summary.items()
                  if (k in ("run_id", "version", "model", "model_ref") or k.endswith("_uri"))
                  and isinstance(v, str | int)})
    for asset in context["task"].outlets:
        context["outlet_events"][asset].extra = extra


def partition_lease(lake, date: dt.date):
    """The lease that lets one run at a time (of any stage DAG, or an ``aigc`` command) write this date's
    partitions (see aigc.lake.lease)."""
    from aigc.lake.lease import date_lease

    return date_lease(lake, date)


def lease_owner(context: dict[str, Any]) -> str:
    """Every task and every retry of one DAG run share the lease; runs of different DAGs never do."""
    return f"{context['dag'].dag_id}/{context['dag_run'].run_id}"


def hold_partition(context: dict[str, Any], lake, date: dt.date) -> dict:
    """Take or renew this DAG run's lease on ``date``; LeaseHeld if another run holds it."""
    from aigc_airflow.operations import DATE_LEASE_TTL

    return partition_lease(lake, date).hold(lease_owner(context), DATE_LEASE_TTL)


def hold_partition_or_fail(context: dict[str, Any], lake) -> dict:
    """Renew this run's lease before a task writes; a run that lost its date fails now, without retries."""
    from airflow.sdk.exceptions import AirflowFailException

    from aigc.lake.lease import LeaseHeld

    try:
        return hold_partition(context, lake, partition_date(context))
    except LeaseHeld as e:
        raise AirflowFailException(f"this run no longer holds its date: {e}") from e


def pipeline_config(params: dict[str, Any]):
    """The typed configuration of a run: the chosen preset for the chosen workload, overridden by the form's
    values (aigc.config.form)."""
    from aigc.config.form import config_changes
    from aigc.stages import configure

    return configure(params.get("preset") or "default", params.get("workload")).override(config_changes(params))
