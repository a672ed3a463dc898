"""Replies cut inside their headers or at any point of their bodies, on every method: never read as a success.

urllib3 only logs headers cut part-way, and botocore then reports what it never received (a HEAD of 0 bytes, an
empty body, an empty listing). Each test cuts the first reply of one method and checks the lake read the truth.
Those marked so fail on d70b129.
"""

import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aigc.devtools.faultproxy import FaultPlan, fault_proxy
from aigc.lake.cas import update_json
from tests.reliability.test_lake_faults import lake_via

DATA = b"0123456789abcdef" * 4096  # 64 KiB: a body long enough to be cut anywhere


def seeded(s3_server) -> tuple[str, str]:
    prefix = f"cut-{uuid.uuid4().hex[:8]}"
    with fault_proxy(s3_server.endpoint_url, FaultPlan(rate=0.0)) as clean:
        lake = lake_via(clean, s3_server, prefix)
        for i in range(3):
            lake.put_bytes(f"d/obj-{i}.bin", DATA)
        table = pa.table({"i": list(range(5000)), "s": [f"row {i}" for i in range(5000)]})
        with lake.parquet_writer("d/t.parquet", table.schema) as writer:
            writer.write_table(table)
    return prefix, "d/obj-0.bin"


def cut_first(s3_server, method: str, kind: str, seed: int = 0, limit: int = 1) -> FaultPlan:
    return FaultPlan(rate=1.0, kinds=(kind,), only_methods=(method,), limit=limit, seed=seed)


@pytest.mark.parametrize("kind", ["cut_headers", "cut"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cut_get_is_fetched_again_never_returned_short(s3_server, kind, seed, reliability_record):
    """Fails on d70b129 for a cut inside the headers: with no Content-Length, the empty body passed as the
    object."""
    prefix, key = seeded(s3_server)
    with fault_proxy(s3_server.endpoint_url, cut_first(s3_server, "GET", kind, seed)) as proxy:
        assert lake_via(proxy, s3_server, prefix).get_bytes(key) == DATA
    assert proxy.counts[kind] == 1
    reliability_record(faults_injected=1, faults_survived=1, objects_compared=1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_head_cut_inside_its_headers_is_asked_again_never_read_as_a_size(s3_server, seed, reliability_record):
    """Fails on d70b129: the cut HEAD's size was whatever botocore made of the headers it got (0, or a KeyError)."""
    prefix, key = seeded(s3_server)
    with fault_proxy(s3_server.endpoint_url, cut_first(s3_server, "HEAD", "cut_headers", seed)) as proxy:
        lake = lake_via(proxy, s3_server, prefix)
        assert lake.size(key) == len(DATA) and lake.exists(key)
    assert proxy.counts["cut_headers"] == 1
    reliability_record(faults_injected=1, faults_survived=1, objects_compared=1)


@pytest.mark.parametrize("kind", ["cut_headers", "cut"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cut_listing_is_listed_again_never_taken_for_an_empty_one(s3_server, kind, seed, reliability_record):
    prefix, _ = seeded(s3_server)
    with fault_proxy(s3_server.endpoint_url, cut_first(s3_server, "GET", kind, seed)) as proxy:
        listed = lake_via(proxy, s3_server, prefix).list("d")
    assert listed == ["d/obj-0.bin", "d/obj-1.bin", "d/obj-2.bin", "d/t.parquet"] and proxy.counts[kind] == 1
    reliability_record(faults_injected=1, faults_survived=1, objects_compared=4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_writes_whose_replies_were_cut_land_once(s3_server, seed, reliability_record):
    """An unconditional PUT is made again; a conditional one is told from a rival's by its token (lake/cas.py)."""
    prefix, _ = seeded(s3_server)
    with fault_proxy(s3_server.endpoint_url, cut_first(s3_server, "PUT", "cut_headers", seed, limit=2)) as proxy:
        lake = lake_via(proxy, s3_server, prefix)
        lake.put_bytes("w/plain.bin", DATA)
        written = update_json(lake, "w/pointer.json", lambda old: {"n": (old or {}).get("n", 0) + 1})
        with proxy.pause():
            assert lake.get_bytes("w/plain.bin") == DATA and lake.get_json("w/pointer.json")["n"] == written["n"] == 1
    assert proxy.counts["cut_headers"] == 2
    reliability_record(faults_injected=2, faults_survived=2, objects_compared=2)


def test_pyarrows_reader_never_takes_a_cut_heads_size(s3_server, reliability_record):
    """The failure the issue saw: pyarrow's own HEAD cut inside its headers reads as a 0-byte file. The lake checks
    the size its reader saw against the writer's (a manifest's) and opens it again."""
    prefix, _ = seeded(s3_server)
    size = None
    with fault_proxy(s3_server.endpoint_url, FaultPlan(rate=0.0)) as clean:
        size = lake_via(clean, s3_server, prefix).size("d/t.parquet")
    naive_plan = FaultPlan(rate=1.0, kinds=("cut_headers",), only_methods=("HEAD",), limit=1, seed=3)
    with fault_proxy(s3_server.endpoint_url, naive_plan) as proxy:
        lake = lake_via(proxy, s3_server, prefix)
        with pytest.raises((pa.ArrowInvalid, OSError, ValueError)):  # the fault is real: a plain reader fails
            pq.ParquetFile(lake.arrow_fs.open_input_file(lake.arrow_path("d/t.parquet"))).read()
    with fault_proxy(s3_server.endpoint_url, naive_plan) as proxy:
        table = lake_via(proxy, s3_server, prefix).parquet_file("d/t.parquet", size).read()
    assert table.num_rows == 5000 and proxy.counts["cut_headers"] == 1
    reliability_record(faults_injected=2, faults_survived=1, objects_compared=1)
