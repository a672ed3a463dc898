"""The prompts of a logical date: a JSONL file in the lake, or a demo set the workload draws.

    prompts/<dataset>/dt=<YYYY-MM-DD>/prompts.jsonl      dropped by a producer
    generations/<model>/dt=…/run=<run_id>/prompts.jsonl  a demo set, written by the run that uses it

A dropped file wins. A demo set belongs to its generation run, so a re-run of the date with
another prompt count (or another seed) draws its own set instead of reusing an older one.

One JSON object per line: ``{"prompt_id": "p-000001", "prompt": "a small red circle on the left",
"seed": 17}``. ``prompt_id`` is unique within the file (the exactly-once ledger is keyed by it);
``seed`` is optional (default: the line number plus GenerateConfig.seed). A run reads the file once, within
bounds, and pins it (``aigc.generate.pinned``); a line that is not a prompt is answered as refused.
"""

from __future__ import annotations

import datetime as dt

from aigc.generate.pinned import BadPrompts
from aigc.lake import Lake, key_in
from aigc.lake.base import ObjectNotFound
from aigc.lake.keys import join, parse_date, partition

__all__ = ["CLAIM", "FILE", "BadPrompts", "acknowledge_prompt_file", "claim_prompt_file",
           "prompts_key", "prompts_key_of"]

FILE = "prompts.jsonl"
CLAIM = "_CLAIMED.json"
"""Beside a dropped prompt file once a watcher has fired for it (aigc_airflow.triggers.PromptFileTrigger)."""


def prompts_key(dataset: str, date: str | dt.date) -> str:
    return join(partition("prompts", dataset, date), FILE)


def prompts_key_of(lake: Lake, uri: str) -> str:
    """The lake key of a prompt file given as a URI under the lake or as a key; ValueError for one elsewhere."""
    try:
        return key_in(lake, uri)
    except ValueError as e:
        raise ValueError(f"prompt file {e}: copy it under the lake (for example to "
                         f"{lake.url('prompts/<dataset>/dt=<date>/' + FILE)})") from None


class _Claimed(Exception):
    """Another watcher claimed the same content first."""


REFIRE_AFTER = dt.timedelta(minutes=30)
"""A claim no DAG run has acknowledged this long is fired again: the watcher that wrote it may have died before
Airflow stored its event."""


def claim_prompt_file(lake: Lake, dataset: str, now: dt.datetime | None = None) -> dict | None:
    """The first dropped prompt file (``prompts/<dataset>/dt=<date>/prompts.jsonl``) not claimed yet, changed
    since its claim, or claimed ``REFIRE_AFTER`` ago with no run acknowledging it (``acknowledge_prompt_file``),
    now claimed by a conditional write (two watchers never both get it); None if there is none.

    A claim records the file's version (S3's ETag, a local file's modification time: one listing tells them all),
    size and SHA-256. A file is read only when its version differs from its claim's, and then streamed: the
    watcher's memory does not grow with the file."""
    from aigc.lake.cas import update_json

    now = now or dt.datetime.now(dt.UTC)
    root = join("prompts", dataset)
    for key, size, version in lake.list_versions(root):
        if not key.endswith("/" + FILE):
            continue
        folder = key.rsplit("/", 1)[0]
        try:
            date = parse_date(folder.rsplit("/", 1)[-1].removeprefix("dt=")).isoformat()
        except ValueError:
            continue  # not a date partition: not a drop
        claim_key = join(folder, CLAIM)
        try:
            claim = lake.get_json(claim_key)
        except ObjectNotFound:
            claim = None
        if claim and claim.get("file_version") == version and not _lost(claim, now):
            continue
        # "file_version", not "version": an event's "version" names the model a deployment made (runtime.py).
        found = {"date": date, "prompts_key": key, "prompts_uri": lake.url(key), "size": size, "file_version": version,
                 "sha256": lake.digest(key)[0], "claimed_at": now.isoformat(timespec="seconds"),
                 "acknowledged_by": None}

        def take(previous: dict | None, found=found) -> dict:
            if previous and previous.get("sha256") == found["sha256"] and not _lost(previous, now):
                raise _Claimed
            return found

        try:
            update_json(lake, claim_key, take, what="prompt file claim")
        except _Claimed:
            continue
        return found
    return None


def _lost(claim: dict, now: dt.datetime) -> bool:
    """A claim whose event no run acknowledged in time."""
    claimed_at = claim.get("claimed_at")
    return (claim.get("acknowledged_by", "") is None and claimed_at is not None
            and now - dt.datetime.fromisoformat(claimed_at) > REFIRE_AFTER)


def acknowledge_prompt_file(lake: Lake, prompts_key: str, sha256: str, by: str) -> bool:
    """Record that a run was started for the claimed file (the event reached Airflow): it is not fired again.
    False if the file was claimed again meanwhile with other content (that claim's run acknowledges it)."""
    from aigc.lake.cas import update_json

    def ack(previous: dict | None) -> dict:
        if not previous or previous.get("sha256") != sha256:
            raise _Claimed
        return {**previous, "acknowledged_by": previous.get("acknowledged_by") or by}

    try:
        update_json(lake, join(prompts_key.rsplit("/", 1)[0], CLAIM), ack, what="prompt file acknowledgement")
    except _Claimed:
        return False
    return True
