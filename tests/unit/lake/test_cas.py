"""The one compare-and-swap loop: races re-apply, a replayed write of our own is recognised as ours."""

import pytest

from aigc.lake import LocalLake, PreconditionFailed
from aigc.lake.cas import TOKEN, create_json, update_json
from aigc.lake.keys import join, run_prefix
from aigc.lake.lease import Lease, LeaseHeld
from aigc.lake.publish import new_run_id, publish, resolve
from aigc.registry.store import Registry


class LostReplies(LocalLake):
    """A lake whose next ``lose`` conditional writes are stored, but whose reply is lost: the client's retry
    of the same request is then refused, as S3 answers 412 to a conditional PUT that its own first try
    already satisfied."""

    def __init__(self, root, lose=0):
        super().__init__(root)
        self.lose = lose

    def _put(self, key, data, *, if_none_match=False, if_match=None):
        etag = super()._put(key, data, if_none_match=if_none_match, if_match=if_match)
        if (if_none_match or if_match) and self.lose > 0:
            self.lose -= 1
            return super()._put(key, data, if_none_match=if_none_match, if_match=if_match)  # the replay: refused
        return etag


class Interloper(LocalLake):
    """A lake where another writer slips in just before each of our next ``races`` conditional writes."""

    def __init__(self, root, races=0):
        super().__init__(root)
        self.races = races

    def _put(self, key, data, *, if_none_match=False, if_match=None):
        if (if_none_match or if_match) and self.races > 0:
            self.races -= 1
            super()._put(key, b'{"n": %d, "by": "someone else"}' % (100 + self.races))
        return super()._put(key, data, if_none_match=if_none_match, if_match=if_match)


def bump(doc):
    return {"n": (doc or {"n": 0})["n"] + 1}


def test_a_replayed_write_of_our_own_is_ours_not_a_lost_race(tmp_path):
    lake = LostReplies(tmp_path, lose=2)
    first = update_json(lake, "doc.json", bump)  # created, reply lost
    second = update_json(lake, "doc.json", bump)  # replaced, reply lost
    assert first["n"] == 1 and second["n"] == 2  # applied once each, not re-applied on top of itself
    assert lake.get_json("doc.json") == second and second[TOKEN] != first[TOKEN]


def test_a_lost_race_re_reads_and_re_applies(tmp_path):
    lake = Interloper(tmp_path, races=3)
    lake.put_json("doc.json", {"n": 1})
    assert update_json(lake, "doc.json", bump)["n"] == 101  # on top of the other writer's last (100), not our 1


def test_endless_races_give_up_naming_the_object(tmp_path):
    lake = Interloper(tmp_path, races=50)
    with pytest.raises(PreconditionFailed, match=r"gave up on the update of .*doc.json after 5 races"):
        update_json(lake, "doc.json", bump, attempts=5)


def test_create_once_tells_our_replay_from_someone_elses_object(tmp_path):
    lake = LostReplies(tmp_path, lose=1)
    assert create_json(lake, "claim.json", {"by": "us"})["by"] == "us"  # reply lost: still ours
    assert create_json(lake, "claim.json", {"by": "them"}) is None  # ours is there: theirs was not written
    assert lake.get_json("claim.json")["by"] == "us"


def test_a_lost_reply_after_publishing_keeps_the_real_previous_run(tmp_path):
    part = "curated/shapes/dt=2026-11-28"
    lake = LostReplies(tmp_path)
    old, new = new_run_id(), new_run_id()
    for run in (old, new):
        lake.put_bytes(join(run_prefix(part, run), "part-0.txt"), run.encode())
    publish(lake, part, old)
    lake.lose = 1
    pointer = publish(lake, part, new)
    assert pointer["previous_run_id"] == resolve(lake, part)["previous_run_id"] == old  # not itself
    assert lake.list(run_prefix(part, old))  # the previous run is kept for readers


def test_the_lease_and_the_registry_survive_lost_replies(tmp_path):
    import datetime as dt

    lake = LostReplies(tmp_path, lose=1)
    lease = Lease(lake, "pipeline/dt=2026-11-28")
    assert lease.hold("run-a", dt.timedelta(minutes=5))["owner"] == "run-a"
    with pytest.raises(LeaseHeld):
        lease.hold("run-b", dt.timedelta(minutes=5))
    registry = Registry(lake, "shapes-cvae")
    lake.lose = 3  # the claim, version.json and the alias move each lose their reply
    version, _ = registry.claim_next()
    registry.complete(version, {"metrics": {}})
    registry.move("candidate", version, reason="test")
    assert version == "v0001" and registry.resolve("candidate") == "v0001"
    assert registry.claim_next()[0] == "v0002"  # no number was skipped by a replay


class PointerDown(LocalLake):
    """Every conditional write answered 503 (after retries): the pointer cannot be written."""

    def _put(self, key, data, *, if_none_match=False, if_match=None):
        if if_none_match or if_match:
            raise RuntimeError(f"PutObject {self.url(key)} failed: 503 SlowDown (reached max retries: 6)")
        return super()._put(key, data)


def test_a_pointer_that_cannot_be_written_leaves_the_previous_publication_whole(tmp_path):
    part, quarantine = "curated/shapes/dt=2026-11-28", "quarantine/shapes/dt=2026-11-28"
    lake = PointerDown(tmp_path)
    old, new = new_run_id(), new_run_id()
    for run in (old, new):
        for p in (part, quarantine):
            lake.put_bytes(join(run_prefix(p, run), "part-0.txt"), run.encode())
    LocalLake(tmp_path).put_json(join(part, "_PUBLISHED.json"), {"run_id": old, "run_prefix": run_prefix(part, old),
                                                               "companions": {quarantine: run_prefix(quarantine, old)}})
    with pytest.raises(RuntimeError, match="503"):
        publish(lake, part, new, companions=[quarantine])
    pointer = resolve(lake, part)
    assert pointer["run_id"] == old and pointer["companions"] == {quarantine: run_prefix(quarantine, old)}
    assert all(lake.list(run_prefix(p, r)) for p in (part, quarantine) for r in (old, new))  # nothing collected
