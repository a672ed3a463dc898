"""The lake through a fault-injecting proxy in front of the real S3 server: 500/503, resets, bodies cut
mid-way, replies lost after the store did the work, delays. Nothing may be lost, doubled or half-published."""

import uuid

import pyarrow as pa
import pytest

from aigc.devtools.faultproxy import FaultPlan, fault_proxy
from aigc.lake import S3Lake, S3Options
from aigc.lake.keys import join, run_prefix
from aigc.lake.publish import new_run_id, publish, resolve
from aigc.lake.s3 import LakeRequestFailed

PART, QUARANTINE = "curated/shapes/dt=2026-11-28", "quarantine/shapes/dt=2026-11-28"


def lake_via(proxy, server, prefix, attempts=6):
    return S3Lake(f"s3://{server.bucket}/{prefix}", S3Options(
        endpoint_url=proxy.endpoint_url, access_key=server.options().access_key,
        secret_key=server.options().secret_key, max_attempts=attempts, connect_timeout_s=2, read_timeout_s=5))


def workload(lake) -> dict:
    """What a stage does to the lake: objects written and read back, a Parquet shard, listings, a publication
    of a run with its quarantine, then a second run replacing it. Returns everything it read."""
    seen = {}
    runs = [new_run_id(), new_run_id()]
    for run in runs:
        for part in (PART, QUARANTINE):
            for i in range(10):
                lake.put_bytes(join(run_prefix(part, run), f"part-{i}.bin"), f"{run}/{part}/{i}".encode() * 2000)
        table = pa.table({"id": list(range(500)), "caption": [f"a red circle {i}" for i in range(500)]})
        with lake.parquet_writer(join(run_prefix(PART, run), "shard-00000.parquet"), table.schema) as writer:
            writer.write_table(table)
        publish(lake, PART, run, companions=[QUARANTINE], manifest="_MANIFEST.json")
        pointer = resolve(lake, PART)
        seen[run] = {
            "pointer": {k: pointer[k] for k in ("run_id", "run_prefix", "previous_run_id", "companions")},
            "objects": {k: lake.get_bytes(k) for k in lake.list(PART) + lake.list(QUARANTINE) if k.endswith(".bin")},
            "rows": lake.read_parquet([join(pointer["run_prefix"], "shard-00000.parquet")]).to_pylist(),
        }
    return {"runs": runs, "seen": seen, "keys": lake.list("")}


def normalised(result: dict) -> dict:
    """Run ids differ from one execution to the next: name them by their order."""
    text = repr({"seen": list(result["seen"].values()), "keys": result["keys"]})
    for i, run in enumerate(result["runs"]):
        text = text.replace(run, f"RUN{i}")
    return {"text": text}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_twenty_percent_faults_change_nothing_that_is_read_or_published(s3_server, seed, reliability_record):
    with fault_proxy(s3_server.endpoint_url, FaultPlan(rate=0.0)) as clean:
        expected_run = workload(lake_via(clean, s3_server, f"clean-{uuid.uuid4().hex[:8]}"))
    expected = normalised(expected_run)
    with fault_proxy(s3_server.endpoint_url, FaultPlan(rate=0.2, seed=seed, delay_s=0.05)) as proxy:
        got = normalised(workload(lake_via(proxy, s3_server, f"faulty-{uuid.uuid4().hex[:8]}", attempts=10)))
    print(f"seed {seed}: {proxy.injected} faults injected in {proxy.requests} requests {dict(proxy.counts)}, "
          "all survived; outputs identical to the fault-free run")
    assert proxy.counts["cut"] >= 1 and proxy.counts["lost"] >= 1 and proxy.injected >= 5, proxy.counts
    assert got == expected
    seen = expected_run["seen"].values()
    reliability_record(faults_injected=proxy.injected, faults_survived=proxy.injected,
                       objects_compared=sum(len(v["objects"]) + 1 for v in seen),
                       rows_compared=sum(len(v["rows"]) for v in seen), rows_lost=0, half_published=0)


def one_published_one_staged(s3_server, name: str):
    """A fresh prefix with two runs (each with its quarantine), the older one published, written without faults."""
    with fault_proxy(s3_server.endpoint_url, FaultPlan(rate=0.0)) as clean:
        prefix = f"{name}-{uuid.uuid4().hex[:8]}"
        lake = lake_via(clean, s3_server, prefix)
        old, new = new_run_id(), new_run_id()
        for run in (old, new):
            for part in (PART, QUARANTINE):
                lake.put_bytes(join(run_prefix(part, run), "part-0.bin"), run.encode())
        publish(lake, PART, old, companions=[QUARANTINE])
    return prefix, S3Lake(f"s3://{s3_server.bucket}/{prefix}", s3_server.options()), old, new


def test_a_lost_reply_to_the_pointer_write_keeps_the_true_previous_run(s3_server, reliability_record):
    plan = FaultPlan(rate=1.0, kinds=("lost",), only_methods=("PUT",), only_paths=("_PUBLISHED.json",), limit=1)
    prefix, lake, old, new = one_published_one_staged(s3_server, "lost")
    with fault_proxy(s3_server.endpoint_url, plan) as proxy:
        pointer = publish(lake_via(proxy, s3_server, prefix), PART, new, companions=[QUARANTINE])
    assert proxy.counts["lost"] == 1
    reliability_record(faults_injected=1, faults_survived=1, objects_compared=1, half_published=0)
    assert pointer["previous_run_id"] == resolve(lake, PART)["previous_run_id"] == old
    assert lake.list(run_prefix(PART, old)) and lake.list(run_prefix(QUARANTINE, old))  # kept for readers


def test_a_pointer_write_that_keeps_failing_leaves_the_previous_publication_whole_and_says_where(
        s3_server, reliability_record):
    plan = FaultPlan(rate=1.0, kinds=("error",), only_methods=("PUT",), only_paths=("_PUBLISHED.json",))
    prefix, lake, old, new = one_published_one_staged(s3_server, "down")
    before = resolve(lake, PART)
    with fault_proxy(s3_server.endpoint_url, plan) as proxy, \
            pytest.raises(LakeRequestFailed, match=r"PutObject s3://.*/_PUBLISHED.json failed: .*(SlowDown|Internal)"
                                                   r".*check that the endpoint is up") as failure:
        publish(lake_via(proxy, s3_server, prefix, attempts=3), PART, new, companions=[QUARANTINE])
    assert proxy.counts["error"] == 4  # every attempt refused: the first and its 3 retries
    assert prefix in str(failure.value) and s3_server.bucket in str(failure.value)
    assert resolve(lake, PART) == before  # the previous publication, curated and quarantine, whole
    assert all(lake.list(run_prefix(p, r)) for p in (PART, QUARANTINE) for r in (old, new))
    # The command failed, as it must when the store refuses every write: injected, not survived.
    reliability_record(faults_injected=proxy.injected, objects_compared=1, half_published=0)
