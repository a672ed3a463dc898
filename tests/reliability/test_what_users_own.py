"""What users own survives the nightly chain, twice, through 20 % faults: a producer's drop and prompt file, content
made for users in between, and the data behind every registered version.

The chain runs as an operator runs it (`aigc prepare` of the producer's drop, `train` under torchrun, `deploy`,
`generate`, `evaluate`, each with its lease, gate and publication) on S3 through the fault proxy; between the two
nights, production answers a user's prompt file for the same date. Afterwards every object a user owns is compared
with what it was, and every published pointer with what should be published. Marked ``reliability_full``.
"""

import hashlib
import json
import uuid

import pytest

from aigc.cli import main
from aigc.config import RawDropConfig
from aigc.devtools.faultproxy import FaultPlan, fault_proxy
from aigc.lake import S3Lake
from aigc.lake.keys import join, partition
from aigc.lake.lease import date_lease
from aigc.lake.publish import resolve
from aigc.registry import Registry
from aigc.registry.lineage import lineage
from aigc.workloads.image.rawdrop import make_raw_drop

pytestmark = pytest.mark.reliability_full

DATE = "2026-11-28"
MODEL = "shapes-cvae"
SHAPES = ("a small red circle on the left", "a large blue square at the top", "a medium green triangle in the center")
NIGHT = [("prepare", "--drop", "producer"), ("train",), ("deploy",), ("generate", "--model-ref", "candidate"),
         ("evaluate",)]
SECOND_NIGHT = [NIGHT[0], ("train", "--steps", "44"), *NIGHT[2:]]  # other weights: a version of its own


def aigc(capsys, *argv) -> dict:
    rc = main([*argv, "--preset", "smoke"])
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert rc == 0 and summary["ok"], (argv, summary, err[-3000:])
    return summary


def prompt_file(prefix: str, n: int) -> bytes:
    return "".join(json.dumps({"prompt_id": f"{prefix}-{i}", "prompt": SHAPES[i % 3], "seed": i}) + "\n"
                   for i in range(n)).encode()


def snapshot(lake, prefix: str) -> dict[str, str]:
    return {key: hashlib.sha256(lake.get_bytes(key)).hexdigest() for key in lake.list(prefix)}


def test_the_nightly_chain_twice_with_content_in_between_loses_nothing_a_user_owns(s3_server, monkeypatch, capsys,
                                                                                  reliability_record):
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{s3_server.bucket}/owned-{uuid.uuid4().hex[:8]}"
    lake = S3Lake(uri, s3_server.options())  # fault-free: the producer's and the user's own writes, and the checks
    make_raw_drop(lake.sub("raw/shapes"), DATE, RawDropConfig(n=300, seed=9))  # the producer's drop
    lake.put_bytes(f"prompts/shapes/dt={DATE}/prompts.jsonl", prompt_file("eval", 24))  # the producer's prompts
    lake.put_bytes("requests/content.jsonl", prompt_file("req", 12))  # a user's prompt file
    owned = snapshot(lake, "raw") | snapshot(lake, "prompts") | snapshot(lake, "requests")

    with fault_proxy(s3_server.endpoint_url, FaultPlan(rate=0.2, seed=7, delay_s=0.05)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint_url)  # the CLI and its torchrun workers alike
        first = [aigc(capsys, *stage, "--lake", uri, "--date", DATE) for stage in NIGHT]
        content = aigc(capsys, "generate", "--model-ref", "production", "--prompts-uri", "requests/content.jsonl",
                       "--lake", uri, "--date", DATE)
        second = [aigc(capsys, *stage, "--lake", uri, "--date", DATE) for stage in SECOND_NIGHT]
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    print(f"{proxy.injected} faults in {proxy.requests} requests {dict(proxy.counts)}")
    assert proxy.counts["cut"] and proxy.counts["cut_headers"] and proxy.counts["lost"], proxy.counts

    # What producers and users dropped: every byte as it was (nothing under their roots written or deleted).
    assert snapshot(lake, "raw/shapes") | snapshot(lake, "prompts/shapes") | snapshot(lake, "requests") == owned | {
        k: v for k, v in snapshot(lake, "prompts").items() if k.endswith("_CLAIMED.json")}
    # Content made for users: still the date's content after the second night, every prompt answered once.
    pointer = resolve(lake, partition("generations", MODEL, DATE))
    assert pointer["run_id"] == content["run_id"] and content["published"]
    manifest = lake.get_json(join(pointer["run_prefix"], "_MANIFEST.json"))
    assert manifest["model_ref"] == "production" and manifest["prompts_key"] == "requests/content.jsonl"
    rows = lake.read_parquet(manifest["shards"], columns=["prompt_id", "status"]).to_pylist()
    assert sorted(r["prompt_id"] for r in rows) == sorted(f"req-{i}" for i in range(12))
    for shard in manifest["shards"]:  # the bytes each shard's writer recorded
        lake.get_bytes(shard["key"], sha256=shard["sha256"])
    # The evaluation is the second night's, with its own evaluation set; the first night's is kept by v0001.
    evaluation = resolve(lake, partition("evaluations", MODEL, DATE))
    assert evaluation["run_id"] == second[-1]["run_id"]
    assert lake.exists(join(evaluation["generations"], "_MANIFEST.json"))
    registry = Registry(lake, MODEL)
    versions = {s[2]["version"] for s in (first, second)}
    assert versions == {"v0001", "v0002"}
    for version in sorted(versions):
        chain = lineage(lake, MODEL, version)
        assert chain["complete"] and chain["evaluated"], (version, chain["missing"])
        assert [d["version"] for d in chain["decisions"]] == [version]
    first_curated = first[0]["run_id"]
    assert lake.exists(f"curated/shapes/dt={DATE}/run={first_curated}/_manifest.json")  # v0001's training data
    assert resolve(lake, partition("curated", "shapes", DATE))["run_id"] == second[0]["run_id"]
    assert registry.aliases()["aliases"]["production"] in versions
    assert date_lease(lake, DATE).holder() is None
    compared = len(owned) + len(rows) + 2 * len(lineage(lake, MODEL, "v0001")["links"])
    reliability_record(faults_injected=proxy.injected, faults_survived=proxy.injected, objects_compared=compared,
                       rows_compared=len(rows), rows_lost=0, half_published=0)
