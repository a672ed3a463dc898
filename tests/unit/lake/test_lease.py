"""The partition lease: one owner at a time, renewals, expiry and take-over, races."""

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

import pytest

from aigc.lake.lease import Lease, LeaseHeld

T0 = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def test_one_owner_at_a_time_until_release(lake):
    lease = Lease(lake, "aigc_pipeline/dt=2026-11-28")
    first = lease.hold("run-a", HOUR, now=T0)
    assert first["owner"] == "run-a" and first["taken_over_from"] is None
    with pytest.raises(LeaseHeld, match=r"held by 'run-a' until 2026-11-28T13:00:00\+00:00") as held:
        lease.hold("run-b", HOUR, now=T0 + dt.timedelta(minutes=30))
    assert held.value.holder["owner"] == "run-a"
    assert not lease.release("run-b")  # not the holder: nothing happens
    assert lease.read()[0]["owner"] == "run-a"
    assert lease.release("run-a")
    assert lease.hold("run-b", HOUR, now=T0 + dt.timedelta(minutes=31))["owner"] == "run-b"


def test_renewal_by_the_holder_extends_it_and_keeps_when_it_was_taken(lake):
    lease = Lease(lake, "p/dt=2026-11-28")
    lease.hold("run-a", HOUR, now=T0)
    renewed = lease.hold("run-a", HOUR, now=T0 + dt.timedelta(minutes=50))
    assert renewed["acquired_at"] == T0.isoformat(timespec="seconds")
    assert renewed["expires_at"] == (T0 + dt.timedelta(minutes=110)).isoformat(timespec="seconds")
    with pytest.raises(LeaseHeld):  # the renewal, not the first expiry, counts
        lease.hold("run-b", HOUR, now=T0 + dt.timedelta(minutes=70))


def test_an_expired_lease_is_taken_over_and_fences_its_old_owner(lake):
    lease = Lease(lake, "p/dt=2026-11-28")
    lease.hold("crashed-run", HOUR, now=T0)
    taken = lease.hold("run-b", HOUR, now=T0 + 2 * HOUR)
    assert taken["taken_over_from"] == "crashed-run"
    with pytest.raises(LeaseHeld, match="held by 'run-b'"):  # the old owner's next task must not write
        lease.hold("crashed-run", HOUR, now=T0 + 2 * HOUR + dt.timedelta(minutes=1))
    assert not lease.release("crashed-run") and lease.read()[0]["owner"] == "run-b"


def test_racing_claimants_exactly_one_wins(lake):
    lease = Lease(lake, "p/dt=2026-11-29")

    def claim(owner):
        try:
            return lease.hold(owner, HOUR)["owner"]
        except LeaseHeld:
            return None

    with ThreadPoolExecutor(8) as pool:
        winners = [w for w in pool.map(claim, [f"run-{i}" for i in range(8)]) if w]
    assert len(winners) == 1 and lease.read()[0]["owner"] == winners[0]


def test_parallel_renewals_by_one_owner_all_succeed(lake):
    """Mapped tasks of one run renew at once: losing a race to oneself is not an error."""
    lease = Lease(lake, "p/dt=2026-11-30")
    lease.hold("run-a", HOUR)
    with ThreadPoolExecutor(6) as pool:
        records = list(pool.map(lambda _: lease.hold("run-a", HOUR), range(6)))
    assert {r["owner"] for r in records} == {"run-a"}


def test_a_release_never_removes_a_takeover_that_landed_after_its_read(lake, monkeypatch):
    """Fails on a read-then-delete release: run-a read its own (expired) lease, run-b took it over, and run-a's
    delete then removed run-b's lease, letting a third run write the date beside run-b."""
    lease = Lease(lake, "p/dt=2026-11-28")
    lease.hold("run-a", HOUR, now=T0)
    stale = lease.read()  # what run-a's release reads, just before run-b takes over
    lease.hold("run-b", HOUR, now=T0 + 2 * HOUR)
    monkeypatch.setattr(Lease, "read", lambda self: stale)
    assert not lease.release("run-a")
    monkeypatch.undo()
    assert lease.holder()["owner"] == "run-b"
    with pytest.raises(LeaseHeld, match="held by 'run-b'"):
        lease.hold("run-c", HOUR, now=T0 + 2 * HOUR + dt.timedelta(minutes=1))


def test_a_released_lease_is_free_to_the_next_claimant_and_says_who_released_it(lake):
    lease = Lease(lake, "p/dt=2026-11-28")
    lease.hold("run-a", HOUR, now=T0)
    assert lease.release("run-a", now=T0 + dt.timedelta(minutes=5)) and lease.holder() is None
    assert lake.get_json(lease.key)["released_by"] == "run-a"
    assert not lease.release("run-a")  # released already
    taken = lease.hold("run-b", HOUR, now=T0 + dt.timedelta(minutes=6))
    assert taken["owner"] == "run-b" and taken["taken_over_from"] is None
