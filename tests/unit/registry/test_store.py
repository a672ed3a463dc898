"""The registry on both lake backends: versions, aliases, history, races and refusals."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from aigc.lake.keys import join
from aigc.registry import AliasError, Registry, RegistryCorrupt, VersionNotFound


def make_versions(registry, n):
    out = []
    for i in range(n):
        version, _prefix = registry.claim_next()
        out.append(registry.complete(version, {"weights_sha256": f"{i:064d}", "variants": {}})["version"])
    return out


def test_versions_are_numbered_and_aliases_promote_and_roll_back_with_history(lake):
    registry = Registry(lake, "shapes-cvae")
    v1, v2, v3 = make_versions(registry, 3)
    assert (v1, v2, v3) == ("v0001", "v0002", "v0003")
    registry.move("production", v1)
    registry.move("production", v2)
    assert registry.aliases()["aliases"] == {"production": v2, "previous": v1}
    registry.move("production", v3, reason="nightly")
    assert registry.aliases()["aliases"] == {"production": v3, "previous": v2}

    registry.rollback(reason="v3 draws squares as blobs")
    assert registry.aliases()["aliases"] == {"production": v2, "previous": v1}
    assert registry.get("production")["version"] == v2
    history = registry.aliases()["history"]
    assert [(h["alias"], h["from"], h["to"]) for h in history][-2:] == [("production", v3, v2), ("previous", v2, v1)]
    assert history[-1]["reason"] == "v3 draws squares as blobs"

    registry.rollback()
    assert registry.aliases()["aliases"] == {"production": v1}
    with pytest.raises(AliasError, match="no 'previous' version to roll back to"):
        registry.rollback()


def test_an_alias_never_points_at_an_incomplete_or_missing_version(lake):
    registry = Registry(lake, "shapes-cvae")
    version, _ = registry.claim_next()  # claimed, version.json not written yet
    with pytest.raises(VersionNotFound, match=r"has no version 'v0001' .* versions: none"):
        registry.move("candidate", version)
    with pytest.raises(VersionNotFound, match="not a version name"):
        registry.move("candidate", "latest")
    with pytest.raises(AliasError, match="unknown alias 'staging'"):
        registry.move("staging", version)
    assert registry.aliases()["aliases"] == {}


def test_two_registrations_at_once_get_different_numbers(lake):
    registry = Registry(lake, "shapes-cvae")
    with ThreadPoolExecutor(4) as pool:
        claimed = list(pool.map(lambda _: registry.claim_next()[0], range(8)))
    assert sorted(claimed) == [f"v{i:04d}" for i in range(1, 9)]


def test_racing_alias_moves_lose_nothing(lake):
    registry = Registry(lake, "shapes-cvae")
    versions = make_versions(registry, 4)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda v: registry.move("candidate", v), versions))
    history = registry.aliases()["history"]
    assert len(history) == 4 and {h["to"] for h in history} == set(versions)
    assert registry.aliases()["aliases"]["candidate"] == history[-1]["to"]


def test_a_broken_alias_file_is_named_and_left_unchanged(lake):
    registry = Registry(lake, "shapes-cvae")
    (v1,) = make_versions(registry, 1)
    key = join("models", "shapes-cvae", "aliases.json")
    lake.put_bytes(key, b"{not json")
    with pytest.raises(RegistryCorrupt, match=r"aliases.json is not valid JSON"):
        registry.move("production", v1)
    assert lake.get_bytes(key) == b"{not json"
    lake.put_bytes(key, json.dumps({"aliases": []}).encode())
    with pytest.raises(RegistryCorrupt, match="must hold"):
        registry.aliases()


def test_a_version_record_is_written_once(lake):
    from aigc.lake.base import PreconditionFailed

    registry = Registry(lake, "shapes-cvae")
    (v1,) = make_versions(registry, 1)
    with pytest.raises(PreconditionFailed):
        registry.complete(v1, {"weights_sha256": "x"})
    assert registry.update_record(v1, smoke_test={"passed": True})["smoke_test"] == {"passed": True}
    assert registry.get(v1)["weights_sha256"] == f"{0:064d}"
