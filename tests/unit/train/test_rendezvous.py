"""Nodes meet through a lake record they can trust: created once, bound to the run, signed with the deployment's
secret; and no pickle crosses between ranks."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from aigc.lake import LocalLake
from aigc.train.rendezvous import (
    SECRET_ENV,
    RendezvousTimeout,
    announce,
    await_endpoint,
    rendezvous_key,
)

RUN = "20261101T000000Z-abc123"
KEY = rendezvous_key("shapes-cvae", "2026-11-01", RUN)


def no_wait(lake, run_id=RUN):
    return await_endpoint(lake, KEY, run_id, 0, sleep=lambda s: None)


@pytest.fixture
def lake(tmp_path, monkeypatch):
    monkeypatch.setenv("AIGC_RDZV_HOST", "127.0.0.1")
    monkeypatch.setenv(SECRET_ENV, "the-deployments-secret-0123456789")
    return LocalLake(tmp_path / "lake")


def test_node_0s_signed_record_is_joined_and_its_retry_moves_it(lake):
    first = announce(lake, KEY, RUN)
    assert first.startswith("127.0.0.1:") and no_wait(lake) == first
    record = lake.get_json(KEY)
    assert record["run_id"] == RUN and len(record["signature"]) == 64
    again = announce(lake, KEY, RUN)  # a retry of node 0: the same run replaces its own record
    assert no_wait(lake) == again and lake.get_json(KEY)["nonce"] != record["nonce"]


def test_a_record_written_by_someone_with_lake_access_but_not_the_secret_is_never_joined(lake, monkeypatch):
    forged = {"endpoint": "attacker.example:29400", "run_id": RUN, "announced_at": "x", "started": 0}
    lake.put_json(KEY, forged)
    with pytest.raises(RendezvousTimeout, match="not signed"):
        no_wait(lake)
    lake.put_json(KEY, {**forged, "signature": "0" * 64})  # a guessed signature
    with pytest.raises(RendezvousTimeout):
        no_wait(lake)
    endpoint = announce(lake, KEY, RUN)  # node 0 replaces what no node would join
    assert no_wait(lake) == endpoint and not endpoint.startswith("attacker")
    monkeypatch.setenv(SECRET_ENV, "another-deployments-secret-000000")
    with pytest.raises(RendezvousTimeout):  # signed with another secret: not this deployment's
        no_wait(lake)


def test_a_record_of_another_run_or_key_is_never_joined_and_node_0_replaces_it(lake):
    other_key = rendezvous_key("shapes-cvae", "2026-10-01", RUN)
    announce(lake, other_key, RUN)  # authentic, for this run id, but another key (another date)
    lake.put_bytes(KEY, lake.get_bytes(other_key))  # copied here
    with pytest.raises(RendezvousTimeout):
        no_wait(lake)
    announce(lake, KEY, "20261101T000000Z-other")
    with pytest.raises(RendezvousTimeout):
        no_wait(lake)
    mine = announce(lake, KEY, RUN)  # node 0 owns its key: whatever else is there is replaced
    assert no_wait(lake) == mine


def test_a_planted_record_that_is_not_even_well_formed_neither_crashes_nor_is_joined(lake):
    non_ascii = json.dumps({"endpoint": "x:1", "run_id": RUN, "key": KEY, "signature": "é"}).encode()
    for planted in (non_ascii, b"not json", b'{"endpoint": 5}', b"[]"):
        lake.put_bytes(KEY, planted)
        with pytest.raises(RendezvousTimeout):
            no_wait(lake)
    assert announce(lake, KEY, RUN) == no_wait(lake)


def test_without_a_secret_the_run_binding_still_holds_and_node_0_warns(lake, monkeypatch, caplog):
    monkeypatch.delenv(SECRET_ENV)
    endpoint = announce(lake, KEY, RUN)
    assert "not signed" in caplog.text and "signature" not in lake.get_json(KEY)
    assert no_wait(lake) == endpoint
    with pytest.raises(RendezvousTimeout):
        no_wait(lake, run_id="20261101T000000Z-other")


def test_no_rank_unpickles_what_another_sends():
    """No ``*_object`` collective (all_gather_object, broadcast_object_list …: each unpickles a peer's bytes) in the
    training code; the RNG states a checkpoint keeps are gathered as tensors."""
    root = Path(__file__).resolve().parents[3] / "include" / "aigc"
    calls = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.endswith(("_object", "_object_list")) \
                    and node.attr in {"all_gather_object", "gather_object", "broadcast_object_list",
                                      "scatter_object_list", "send_object_list", "recv_object_list"}:
                calls.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not calls, calls


def _gather_in_rank(rank: int, world: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from aigc.train import distributed as D

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(100 + rank)
        states = D.gather_rng_states(D.Dist(rank, world, rank, world, torch.device("cpu"), "gloo"))
        draws = torch.rand(4)  # what this rank draws next, from the state it just gave away
        torch.save({"states": states, "draws": draws}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_two_ranks_gather_their_rng_states_as_tensors_and_each_restores_its_own_draws(tmp_path):
    import socket

    import torch
    import torch.multiprocessing as mp

    from aigc.train import distributed as D

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "gathered")
    mp.spawn(_gather_in_rank, args=(2, port, out), nprocs=2, join=True)
    results = [torch.load(f"{out}.{r}", weights_only=True) for r in range(2)]
    assert len(results[0]["states"]) == 2 and json.dumps(sorted(results[0]["states"][1])) == '["cpu"]'
    for rank in range(2):
        D.restore_rng(results[0]["states"][rank], torch.device("cpu"))  # what a resumed rank does
        assert torch.equal(torch.rand(4), results[rank]["draws"])
    assert not torch.equal(results[0]["draws"], results[1]["draws"])
