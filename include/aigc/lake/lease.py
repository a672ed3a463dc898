"""A lease in the lake: one run at a time may write a partition date.

Each run writes into its own folder and publishes with a conditional write, so two runs of
one date never corrupt a file. But a pipeline is several publishes in a row: without more,
run A could publish its curated data, run B its own, and A then train on B's data and
publish a model over B's. The lease makes whole runs of one date take turns.

The lease is one small JSON object, ``leases/<name>.json``, created with If-None-Match and
replaced with If-Match, so two claimants cannot both win; it holds its owner and an expiry.
Every writing task *renews* it before it writes (``hold``): a run whose lease expired and
was taken over learns so before it writes anything more (the lease is also a fence). A run
that dies without releasing holds the date until the expiry, then anyone may take it over.

Releasing is a conditional write too: the holder replaces its own record (If-Match on the ETag it read)
with a released one, which the next claimant takes like an expired lease. A plain delete after a read
could remove another run's takeover that landed in between; S3 has no conditional delete on every server.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from aigc.lake.base import Lake, ObjectNotFound, PreconditionFailed, json_bytes
from aigc.lake.cas import update_json
from aigc.lake.keys import join

log = logging.getLogger(__name__)
LEASES = "leases"


class LeaseHeld(RuntimeError):
    """Another owner holds the lease and it has not expired."""

    def __init__(self, name: str, holder: dict):
        self.holder = holder
        super().__init__(f"lease {name!r} is held by {holder['owner']!r} until {holder['expires_at']} "
                         f"(taken {holder['acquired_at']}); this run waits for it, or for the expiry")


@dataclass(frozen=True)
class Lease:
    lake: Lake
    name: str  # e.g. "aigc_pipeline/dt=2026-11-28"

    @property
    def key(self) -> str:
        return join(LEASES, f"{self.name}.json")

    def read(self) -> tuple[dict | None, str | None]:
        """(holder record, ETag); the record is None when nobody holds the lease (never taken, or released)."""
        try:
            raw, etag = self.lake.get_with_etag(self.key)
        except ObjectNotFound:
            return None, None
        record = json.loads(raw)
        return (record if record.get("owner") is not None else None), etag

    def hold(self, owner: str, ttl: dt.timedelta, now: dt.datetime | None = None) -> dict:
        """Take the lease for ``owner``, or renew it if ``owner`` holds it already.

        Raises LeaseHeld while another owner's lease is unexpired. Safe to call from parallel
        tasks of one owner: a lost race against oneself re-reads and finds oneself the holder.
        """
        def take(holder: dict | None) -> dict:
            moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
            if holder is not None and holder.get("owner") is None:  # released
                holder = None
            if holder is not None and holder["owner"] != owner and _expires(holder) > moment:
                raise LeaseHeld(self.name, holder)
            mine = holder is not None and holder["owner"] == owner
            return {"owner": owner,
                    "acquired_at": holder["acquired_at"] if mine else moment.isoformat(timespec="seconds"),
                    "renewed_at": moment.isoformat(timespec="seconds"),
                    "expires_at": (moment + ttl).isoformat(timespec="seconds"),
                    "taken_over_from": holder["owner"] if holder and not mine else None}

        return update_json(self.lake, self.key, take, what="lease")

    @contextlib.contextmanager
    def holding(self, owner: str, ttl: dt.timedelta) -> Iterator[dict]:
        """Hold the lease for the ``with`` block, renewing it every fifth of ``ttl``, then release it: a
        holder killed outright (no cleanup) blocks the lease for ``ttl`` at most. LeaseHeld if another
        owner holds it; a renewal that fails is logged and tried again at the next tick."""
        record = self.hold(owner, ttl)
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(ttl.total_seconds() / 5):
                try:
                    self.hold(owner, ttl)
                except Exception as e:  # noqa: BLE001 - tried again at the next tick
                    log.warning("could not renew lease %r: %s", self.name, e)

        renewer = threading.Thread(target=renew, name=f"lease-{self.name}", daemon=True)
        renewer.start()
        try:
            yield record
        finally:
            stop.set()
            renewer.join()
            self.release(owner)

    def release(self, owner: str, now: dt.datetime | None = None) -> bool:
        """Give the lease up if ``owner`` holds it; True if it was released.

        A lease another owner has taken over (after ours expired) is left alone, even one taken between our read
        and our write: the release is written only over the very record we read."""
        holder, etag = self.read()
        if holder is None or holder["owner"] != owner:
            return False
        moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).isoformat(timespec="seconds")
        released = {"owner": None, "released_by": owner, "released_at": moment, "expires_at": moment}
        try:
            self.lake.put_if_match(self.key, json_bytes(released), etag)
        except PreconditionFailed:
            holder, _etag = self.read()  # our own write, replayed after a lost reply, finds the lease released
            return holder is None
        return True

    def holder(self) -> dict | None:
        """Who holds the lease now (None: nobody)."""
        return self.read()[0]


PIPELINE = "aigc_pipeline"
"""The name every DAG (the stage DAGs and aigc_pipeline) and every ``aigc`` command that writes a date share its
lease under: one writer per date, whichever way it runs."""


def date_lease(lake: Lake, date: dt.date | str, pipeline: str = PIPELINE) -> Lease:
    """The lease that lets one run at a time (a DAG run or an ``aigc`` command) write a date's partitions."""
    return Lease(lake, f"{pipeline}/dt={date if isinstance(date, str) else date.isoformat()}")


def _expires(holder: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(holder["expires_at"])
