"""Stage 1 as an operator runs it (`aigc prepare`: the date's lease, prepare, gate 1, publish), on S3 through
a proxy that injects 20 % faults, resets inside GET bodies included: it must exit 0 with the same curated
data and quarantine, byte for byte, as a run without faults."""

import json
import uuid

import pytest

from aigc.cli import main
from aigc.devtools.faultproxy import FaultPlan, fault_proxy
from aigc.lake import S3Lake
from aigc.lake.keys import partition
from aigc.lake.lease import date_lease
from aigc.lake.publish import resolve

DATE = "2026-11-28"
RAW = ["--n", "600", "--seed", "3"]
PREPARE = ["--min-rows", "100", "--workers", "1", "--drop", "synthetic"]  # the drop make-raw wrote
# Names and timings, compared apart; "drop": the snapshot of a drop whose _SUCCESS marker holds the time it was written.
VOLATILE = {"run_id", "seconds", "raw", "quarantine", "shards", "dedup_keys", "drop"}


def aigc(capsys, *argv) -> tuple[int, dict]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, json.loads(out.strip().splitlines()[-1]) | {"stderr_tail": err[-2000:]}


def published(lake) -> dict:
    """Everything a reader of the date gets: the manifest (less names and timings), every curated and
    quarantine shard's bytes in order, and which run the pointer and its companion name."""
    pointer = resolve(lake, partition("curated", "shapes", DATE))
    manifest = lake.get_json(f"{pointer['run_prefix']}/_manifest.json")
    quarantine = next(iter(pointer["companions"].values()))
    return {
        "manifest": {k: v for k, v in manifest.items() if k not in VOLATILE},
        "record_files": manifest["drop"]["record_files"],  # the same drop's record files, hashed through the faults
        "curated": [lake.get_bytes(s["key"]) for s in manifest["shards"]],
        "quarantine": [lake.get_bytes(s["key"]) for s in manifest["quarantine"]["shards"]],
        "dedup_keys": [lake.get_bytes(s["key"]) for s in manifest["dedup_keys"]],
        "same_run": quarantine.endswith(f"run={pointer['run_id']}") and manifest["run_id"] == pointer["run_id"],
    }


@pytest.fixture(scope="module")
def fault_free(s3_server):
    """One fault-free `aigc make-raw` + `aigc prepare` into a lake of its own: what every faulty run must match."""
    return f"s3://{s3_server.bucket}/prepare-clean-{uuid.uuid4().hex[:8]}"


# One seed in `make test` (a seed is a whole stage 1 through faults, ~15 s); all three in `make test-reliability`.
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.reliability_full),
                                  pytest.param(2, marks=pytest.mark.reliability_full)])
def test_prepare_through_twenty_percent_faults_is_byte_identical(s3_server, fault_free, monkeypatch, capsys, seed,
                                                                 reliability_record):
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    lake_uri = f"s3://{s3_server.bucket}/prepare-faulty-{uuid.uuid4().hex[:8]}"
    clean = S3Lake(fault_free, s3_server.options())
    if not clean.exists(f"curated/shapes/dt={DATE}/_PUBLISHED.json"):
        assert aigc(capsys, "make-raw", "--date", DATE, "--lake", fault_free, *RAW)[0] == 0
        rc, summary = aigc(capsys, "prepare", "--date", DATE, "--lake", fault_free, *PREPARE)
        assert rc == 0, summary
    assert aigc(capsys, "make-raw", "--date", DATE, "--lake", lake_uri, *RAW)[0] == 0

    with fault_proxy(s3_server.endpoint_url, FaultPlan(rate=0.2, seed=seed, delay_s=0.05)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint_url)
        rc, summary = aigc(capsys, "prepare", "--date", DATE, "--lake", lake_uri, *PREPARE)
    print(f"seed {seed}: {proxy.injected} faults in {proxy.requests} requests {dict(proxy.counts)}")
    assert rc == 0 and summary["published"] is True, summary
    assert proxy.counts["cut"] >= 1 and proxy.injected >= 10, proxy.counts

    faulty = S3Lake(lake_uri, s3_server.options())
    expected, got = published(clean), published(faulty)
    assert got["same_run"] and expected["same_run"]  # curated and quarantine from one run: nothing half-published
    assert got == expected
    assert date_lease(faulty, DATE).holder() is None  # the lease was given back through the faults
    assert not [k for k in faulty.list("") if "/run=" in k and summary["run_id"] not in k and "raw/" not in k]
    reliability_record(faults_injected=proxy.injected, faults_survived=proxy.injected,
                       objects_compared=len(got["curated"]) + len(got["quarantine"]) + 1,
                       rows_compared=summary["input"],
                       rows_lost=summary["input"] - summary["curated"] - summary["quarantined"], half_published=0)
