"""What a drop held when it was prepared, so a drop that changes is noticed instead of mixed.

A producer may deliver a date's drop again (a fix, a resend). A run must then curate one delivery whole,
never lines of one and images of the other, and a later run of the date must say that what it curates
is not what was curated before. So a run takes a snapshot of the drop when it starts: every object's
key, size and version (S3's ETag; a local file's modification time), and the SHA-256 of each record
file (streamed). The snapshot is written into the curated run (``_drop.jsonl``) and summed up in its
manifest (``drop``: a digest of the listing, counts, the record files' hashes):

- each part of a fan-out, and the run before it writes its manifest, lists the drop again: a listing
  whose digest differs fails the run (``DropChanged``, naming what changed); nothing is published and a
  rerun curates the new delivery whole;
- a run of a date whose published run saw another delivery reports it (``redelivered`` in its summary,
  and a warning): what was added, removed and replaced since.

The pipeline only reads the drop: nothing here writes under a producer's root.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging

from aigc.lake import Lake, ObjectNotFound
from aigc.lake.keys import join
from aigc.lake.publish import NotPublished, resolve
from aigc.prepare.drop import drop_prefix

log = logging.getLogger(__name__)
SNAPSHOT = "_drop.jsonl"
EXAMPLES = 20  # changed keys named in a report


class DropChanged(RuntimeError):
    """The drop's objects changed while it was being prepared: a re-delivery under a running preparation."""


def _digest(objects: list[list]) -> str:
    return hashlib.sha256("".join(json.dumps(o) + "\n" for o in objects).encode()).hexdigest()


def listing(raw: Lake, date: str | dt.date) -> list[list]:
    """[key, size, version] of every object of the date's drop (keys relative to the drop), sorted."""
    prefix = drop_prefix(date)
    return [[key[len(prefix) + 1:], size, version] for key, size, version in raw.list_versions(prefix)]


def snapshot(raw: Lake, date: str | dt.date, record_files: list[str]) -> dict:
    """The drop as it is now: its listing and each record file's SHA-256 (read whole, streamed)."""
    objects = listing(raw, date)
    hashes = {key[len(drop_prefix(date)) + 1:]: raw.digest(key)[0] for key in record_files}
    return {"digest": _digest(objects), "objects": len(objects), "bytes": sum(o[1] for o in objects),
            "record_files": hashes, "listing": objects}


def summary(snap: dict) -> dict:
    """What the run's manifest keeps of a snapshot (its listing is in ``SNAPSHOT`` beside it)."""
    return {k: snap[k] for k in ("digest", "objects", "bytes", "record_files")} | {"listing": SNAPSHOT}


def write(lake: Lake, run: str, snap: dict) -> None:
    lake.put_bytes(join(run, SNAPSHOT), "".join(json.dumps(o) + "\n" for o in snap["listing"]).encode())


def check_unchanged(raw: Lake, lake: Lake, date: str | dt.date, run: str, digest: str, when: str) -> None:
    """DropChanged (saying what changed) if the drop's listing is no longer the one the run ``run`` (a curated run
    folder, which holds its snapshot) started from."""
    now = listing(raw, date)
    if _digest(now) != digest:
        raise DropChanged(f"the raw drop at {raw.url(drop_prefix(date))} changed {when}: "
                          f"{_describe(_stored(lake, run), now)}. A run curates one delivery whole: nothing was "
                          "published; run the date again to curate the drop as it is now")


def _stored(lake: Lake, run: str) -> list[list]:
    try:
        return [json.loads(line) for line in lake.iter_lines(join(run, SNAPSHOT))]
    except ObjectNotFound:
        return []


def redelivery(lake: Lake, dataset: str, date: str | dt.date, snap: dict) -> dict | None:
    """How the drop differs from the one the date's published run curated (None: the same, or nothing published,
    or a run from before snapshots)."""
    from aigc.lake.keys import partition

    try:
        pointer = resolve(lake, partition("curated", dataset, date))
        previous = lake.get_json(join(pointer["run_prefix"], "_manifest.json")).get("drop")
    except (NotPublished, ObjectNotFound):
        return None
    if not previous or previous["digest"] == snap["digest"]:
        return None
    before = _stored(lake, pointer["run_prefix"])
    report = {"previous_run_id": pointer["run_id"], "previous_digest": previous["digest"],
              **_changes(before, snap["listing"])}
    log.warning("the raw drop of %s is not the delivery its published run %s curated: %s; this run curates the drop "
                "as it is now", date, pointer["run_id"], _describe(before, snap["listing"]))
    return report


def _changes(before: list[list], now: list[list]) -> dict:
    old, new = {o[0]: tuple(o[1:]) for o in before}, {o[0]: tuple(o[1:]) for o in now}
    added = sorted(new.keys() - old.keys())
    removed = sorted(old.keys() - new.keys())
    replaced = sorted(k for k in new.keys() & old.keys() if new[k] != old[k])
    return {"added": len(added), "removed": len(removed), "replaced": len(replaced),
            "examples": {"added": added[:EXAMPLES], "removed": removed[:EXAMPLES], "replaced": replaced[:EXAMPLES]}}


def _describe(before: list[list], now: list[list]) -> str:
    c = _changes(before, now)
    named = [f"{c[kind]} {kind} ({', '.join(c['examples'][kind][:3])}{', …' if c[kind] > 3 else ''})"
             for kind in ("replaced", "added", "removed") if c[kind]]
    return "; ".join(named) or "its listing differs"
