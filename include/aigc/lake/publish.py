"""Write-audit-publish: runs write into their own folder, a pointer written last publishes one.

Readers resolve ``<partition>/_PUBLISHED.json`` and read only the run folder it names, so a
reader sees the old partition or the new one, never a mix. The pointer is replaced with a
conditional write (If-None-Match / If-Match), so two runs racing to publish one date cannot
both win against the same old state. After a publish, runs older than the previous
publication are deleted: re-running a date replaces its partition and appends nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets

from aigc.lake.base import Lake, ObjectNotFound, PreconditionFailed, json_bytes
from aigc.lake.keys import join, run_prefix, validate_run_id

POINTER = "_PUBLISHED.json"
MAX_CAS_ATTEMPTS = 5


class NotPublished(LookupError):
    """A partition with no published run (yet)."""


def new_run_id(now: dt.datetime | None = None) -> str:
    """Sortable by start time, unique without coordination: ``20261129T213000Z-1a2b3c``."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now:%Y%m%dT%H%M%S%fZ}-{secrets.token_hex(3)}"


def resolve(lake: Lake, partition: str) -> dict:
    """The published pointer of ``partition``; NotPublished if there is none."""
    try:
        return json.loads(lake.get_bytes(join(partition, POINTER)))
    except ObjectNotFound:
        raise NotPublished(f"nothing is published at {lake.url(partition)} (no {POINTER})") from None


def publish(lake: Lake, partition: str, run_id: str, **fields) -> dict:
    """Point ``partition`` at ``run_id`` atomically and garbage-collect superseded runs."""
    run_key = run_prefix(partition, validate_run_id(run_id))
    if not lake.list(run_key):
        raise ObjectNotFound(f"cannot publish {lake.url(run_key)}: the run folder is empty or missing")
    pointer_key = join(partition, POINTER)
    for _ in range(MAX_CAS_ATTEMPTS):
        try:
            raw, etag = lake.get_with_etag(pointer_key)
            previous = json.loads(raw)
        except ObjectNotFound:
            etag, previous = None, None
        pointer = {
            "run_id": run_id,
            "run_prefix": run_key,
            "published_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "previous_run_id": previous["run_id"] if previous else None,
            **fields,
        }
        try:
            if etag is None:
                lake.put_if_absent(pointer_key, json_bytes(pointer))
            else:
                lake.put_if_match(pointer_key, json_bytes(pointer), etag)
            break
        except PreconditionFailed:
            continue  # another run published meanwhile: re-read and try again
    else:
        raise PreconditionFailed(f"gave up publishing {lake.url(pointer_key)} after {MAX_CAS_ATTEMPTS} races")
    _collect_garbage(lake, partition, keep={run_id, pointer["previous_run_id"]}, newest=run_id)
    return pointer


def _collect_garbage(lake: Lake, partition: str, keep: set, newest: str) -> None:
    # Keep the previous publication one generation longer: a reader that resolved the old
    # pointer a moment ago can still finish. Runs newer than this one may be in flight.
    runs = {k[len(partition) + 1 :].split("/", 1)[0] for k in lake.list(partition) if "/run=" in k}
    for folder in runs:
        run_id = folder.removeprefix("run=")
        if run_id not in keep and run_id < newest:
            lake.delete_prefix(join(partition, folder))
