"""Write-audit-publish: runs write into their own folder, a pointer written last publishes one.

Readers resolve ``<partition>/_PUBLISHED.json`` and read only the run folder it names, so a
reader sees the old partition or the new one, never a mix. The pointer is replaced with a
conditional write (If-None-Match / If-Match), so two runs racing to publish one date cannot
both win against the same old state.

Garbage collection after a publish deletes the publication two generations back (the
previous one stays for readers that resolved it a moment ago) and unpublished runs older
than ``STALE_AFTER`` (failed attempts). Younger unpublished runs may still be in flight and
are left alone. So re-running a date replaces its partition and appends nothing. A run that
something still names (``aigc.lake.refs``: a registered version's training data, an evaluation's
generation run) is never collected; a partition published with ``keep_superseded`` (content made
for users) keeps every run it ever published.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
from collections.abc import Sequence

from aigc.lake.base import Lake, ObjectNotFound
from aigc.lake.cas import update_json
from aigc.lake.keys import join, run_prefix, validate_run_id

log = logging.getLogger(__name__)
POINTER = "_PUBLISHED.json"
STALE_AFTER = dt.timedelta(hours=24)
_RUN_TIME = "%Y%m%dT%H%M%S%fZ"


class NotPublished(LookupError):
    """A partition with no published run (yet)."""


def new_run_id(now: dt.datetime | None = None, token: str | None = None) -> str:
    """Sortable by start time, unique without coordination: ``20261129T213000Z-1a2b3c``.

    With ``now`` and ``token`` given it is deterministic: an orchestrator's retries of one run
    get the same id, so they find (and resume from) what the first attempt left.
    """
    now = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return f"{now.strftime(_RUN_TIME)}-{token or secrets.token_hex(3)}"


def run_started(run_id: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(run_id.split("-", 1)[0], _RUN_TIME).replace(tzinfo=dt.UTC)
    except ValueError:
        return None  # a run id not made by new_run_id: never collected as stale


def resolve(lake: Lake, partition: str) -> dict:
    """The published pointer of ``partition``; NotPublished if there is none."""
    try:
        return json.loads(lake.get_bytes(join(partition, POINTER)))
    except ObjectNotFound:
        raise NotPublished(f"nothing is published at {lake.url(partition)} (no {POINTER})") from None


def publish(lake: Lake, partition: str, run_id: str, companions: Sequence[str] = (), *,
            keep_superseded: bool = False, **fields) -> dict:
    """Point ``partition`` at ``run_id`` atomically and garbage-collect superseded runs (none with
    ``keep_superseded``: every run it published stays, only failed attempts go).

    ``companions``: other partitions whose ``run=<run_id>`` folders belong to the same publication (a
    run's quarantine beside its curated data). They get no pointer of their own: this one names them
    (``companions``: partition → run prefix), so one conditional write publishes them all, a reader
    never sees one run's data with another's quarantine, and a failed write leaves the previous
    publication whole. Their folders are collected with this partition's."""
    run_key = run_prefix(partition, validate_run_id(run_id))
    for part in (partition, *companions):
        if not lake.list(run_prefix(part, run_id)):
            raise ObjectNotFound(f"cannot publish {lake.url(run_prefix(part, run_id))}: the run folder is empty "
                                 "or missing")
    if companions:
        fields["companions"] = {part: run_prefix(part, run_id) for part in companions}
    if keep_superseded:
        lake.put_json(join(run_key, PUBLISHED_RUN), {"partition": partition, "run_id": run_id})
    pointer_key = join(partition, POINTER)
    seen: dict = {}

    def point(previous: dict | None) -> dict:
        if previous and previous["run_id"] == run_id:  # publishing again: the run it replaced stays the previous
            previous = {"run_id": previous.get("previous_run_id"), "previous_run_id": None}
        seen["previous"] = previous
        return {"run_id": run_id, "run_prefix": run_key,
                "published_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "previous_run_id": previous["run_id"] if previous else None, **fields}

    pointer = update_json(lake, pointer_key, point, what="publication")
    previous = seen["previous"]
    superseded = None if keep_superseded or not previous else previous.get("previous_run_id")
    for part in (partition, *companions):
        _collect_garbage(lake, part, keep={run_id, pointer["previous_run_id"]}, superseded=superseded)
    return pointer


PUBLISHED_RUN = "_PUBLISHED_RUN.json"
"""Left in a run folder of a ``keep_superseded`` partition once it is published: it is content, never a stale
attempt, whatever its age."""


def _collect_garbage(lake: Lake, partition: str, keep: set, superseded: str | None) -> None:
    from aigc.lake import refs

    stale_before = dt.datetime.now(dt.UTC) - STALE_AFTER
    keys = [k[len(partition) + 1:] for k in lake.list(partition) if "/run=" in k]
    folders = {k.split("/", 1)[0] for k in keys}
    published = {k.split("/", 1)[0] for k in keys if k.endswith("/" + PUBLISHED_RUN)}  # content: kept for good
    for folder in folders:
        run_id = folder.removeprefix("run=")
        started = run_started(run_id)
        if run_id in keep or folder in published:
            continue
        if run_id == superseded or (started is not None and started < stale_before):
            run = join(partition, folder)
            if named_by := refs.holders(lake, run):
                log.info("kept %s: %s names it", lake.url(run), ", ".join(named_by))
                continue
            refs.release_held_by(lake, run)
            lake.delete_prefix(run)
