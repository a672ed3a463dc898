"""The stage API (aigc.stages): what each stage publishes after its gate, the same under the DAGs and the CLI."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from aigc.config import BatchingConfig, GenerateConfig, GenerateGateThresholds
from aigc.evaluate.runs import latest_generation
from aigc.generate.prompts import CLAIM, claim_prompt_file, prompts_key_of
from aigc.lake import LocalLake
from aigc.lake.keys import partition
from aigc.lake.lease import date_lease
from aigc.lake.publish import NotPublished, resolve
from aigc.registry import Registry
from aigc.stages import GENERATE, PRODUCTION, DateBusy, holding_date
from tests.training_fixtures import DATE, tiny_config


def config():
    cfg = tiny_config()
    return dataclasses.replace(
        cfg, generate=dataclasses.replace(GenerateConfig(), variant="fp32", prompts=12, blocked_prompts=2, shards=2),
        generate_gate=GenerateGateThresholds(), batching=BatchingConfig(backoff_s=0.0))


def produce(lake, cfg, **plan):
    planned = GENERATE.plan(lake, DATE, cfg, **plan)
    for shard in planned["shards"]:
        GENERATE.shard(lake, planned, shard, cfg)
    return GENERATE.finish_run(lake, planned, cfg)


def drop_prompts(lake, date: str, n: int, text: str = "a small red circle on the left") -> str:
    key = f"prompts/shapes/dt={date}/prompts.jsonl"
    lake.put_bytes(key, "".join(json.dumps({"prompt_id": f"p{i}", "prompt": text, "seed": i}) + "\n"
                                for i in range(n)).encode())
    return key


def test_a_candidates_content_waits_for_gate_5_and_productions_is_published_after_gate_4(deployed_lake):
    cfg = config()
    candidate = produce(deployed_lake, cfg, model_ref="candidate", demo_prompts=True)
    done = GENERATE.finish(deployed_lake, cfg, candidate)
    assert done["gate_result"]["success"] and done["published"] is False  # handed to evaluation
    with pytest.raises(NotPublished):
        resolve(deployed_lake, partition("generations", "shapes-cvae", DATE))

    Registry(deployed_lake, "shapes-cvae").move(PRODUCTION, "v0001", reason="test")
    key = drop_prompts(deployed_lake, DATE, 6)
    content = produce(deployed_lake, cfg, model_ref=PRODUCTION, prompts_key=key)
    assert content["model_ref"] == PRODUCTION and content["rows"] == 6
    done = GENERATE.finish(deployed_lake, cfg, content)
    assert done["published"] is True
    pointer = resolve(deployed_lake, partition("generations", "shapes-cvae", DATE))
    assert pointer["run_id"] == content["run_id"] and done["generations_uri"].endswith(pointer["run_prefix"])
    manifest = deployed_lake.get_json(f"{pointer['run_prefix']}/_MANIFEST.json")
    assert manifest["model_ref"] == PRODUCTION and manifest["prompts_key"] == key and manifest["generated"] == 6
    # `aigc evaluate` with no run named judges the candidate's run, not production's newer one.
    assert latest_generation(deployed_lake, "shapes-cvae", DATE)["run_id"] == candidate["run_id"]


def test_a_generation_started_by_hand_picks_its_model_by_one_rule():
    cfg = config()
    assert GENERATE.model_for(cfg, "v0007", prompt_file=True) == "v0007"  # chosen
    assert GENERATE.model_for(cfg, None, prompt_file=True) == PRODUCTION  # content someone asked for
    assert GENERATE.model_for(cfg, None, prompt_file=False) == cfg.generate.model_ref == "candidate"


def test_production_answers_dropped_prompts_only(deployed_lake):
    from aigc.generate.prompts import BadPrompts

    Registry(deployed_lake, "shapes-cvae").move(PRODUCTION, "v0001", reason="test")
    with pytest.raises(BadPrompts, match="no prompt file at"):
        GENERATE.plan(deployed_lake, DATE, config(), model_ref=PRODUCTION, demo_prompts=False)


def test_each_dropped_prompt_file_is_claimed_once_and_again_when_it_changes(tmp_path):
    lake = LocalLake(tmp_path / "lake")
    assert claim_prompt_file(lake, "shapes") is None
    first = drop_prompts(lake, "2026-11-01", 3)
    drop_prompts(lake, "2026-11-02", 2)
    lake.put_bytes("prompts/shapes/inbox/prompts.jsonl", b"{}\n")  # not a date partition: not a drop
    claims = [claim_prompt_file(lake, "shapes") for _ in range(3)]
    assert [c["date"] for c in claims[:2]] == ["2026-11-01", "2026-11-02"] and claims[2] is None
    assert claims[0]["prompts_key"] == first and claims[0]["prompts_uri"] == lake.url(first)
    assert lake.get_json(f"prompts/shapes/dt=2026-11-01/{CLAIM}")["sha256"] == claims[0]["sha256"]
    drop_prompts(lake, "2026-11-01", 5)  # dropped again, other content
    again = claim_prompt_file(lake, "shapes")
    assert again["date"] == "2026-11-01" and again["sha256"] != claims[0]["sha256"]
    assert claim_prompt_file(lake, "shapes") is None


def test_a_claim_no_run_acknowledged_is_fired_again_and_an_acknowledged_one_is_not(tmp_path):
    """The watcher may die between writing its claim and Airflow storing the event: no run acknowledges it, so
    after REFIRE_AFTER the file is fired again. A run that started acknowledges it first (its `wanted` task)."""
    from aigc.generate.prompts import REFIRE_AFTER, acknowledge_prompt_file

    lake = LocalLake(tmp_path / "lake")
    key = drop_prompts(lake, "2026-11-01", 3)
    start = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    first = claim_prompt_file(lake, "shapes", now=start)
    assert claim_prompt_file(lake, "shapes", now=start + REFIRE_AFTER / 2) is None  # a run may still come
    again = claim_prompt_file(lake, "shapes", now=start + REFIRE_AFTER * 1.5)  # none came: the event was lost
    assert again["sha256"] == first["sha256"] and again["claimed_at"] != first["claimed_at"]
    assert acknowledge_prompt_file(lake, key, again["sha256"], by="aigc_generate/asset_triggered__1")
    assert claim_prompt_file(lake, "shapes", now=start + REFIRE_AFTER * 10) is None
    claim = lake.get_json(f"prompts/shapes/dt=2026-11-01/{CLAIM}")
    assert claim["acknowledged_by"] == "aigc_generate/asset_triggered__1"
    assert not acknowledge_prompt_file(lake, key, "another-content", by="x")  # a newer claim is not taken


def test_two_watchers_never_both_claim_one_file(tmp_path, monkeypatch):
    """The claim is a conditional write: a watcher that finds the claim written meanwhile gives the file up."""
    from aigc.generate import prompts as P

    lake = LocalLake(tmp_path / "lake")
    drop_prompts(lake, "2026-11-01", 3)
    real_get_json = lake.get_json
    raced = []

    def another_watcher_claims_first(key):
        if key.endswith(CLAIM) and not raced:
            raced.append(key)
            other = LocalLake(tmp_path / "lake")
            assert P.claim_prompt_file(other, "shapes") is not None  # the other watcher wins the race
            raise P.ObjectNotFound(key)  # …after this one looked for a claim and found none
        return real_get_json(key)

    monkeypatch.setattr(lake, "get_json", another_watcher_claims_first)
    assert claim_prompt_file(lake, "shapes") is None and raced


def test_a_prompt_file_is_named_by_a_uri_under_the_lake_or_by_its_key(tmp_path):
    lake = LocalLake(tmp_path / "lake")
    key = "prompts/shapes/dt=2026-11-01/prompts.jsonl"
    assert prompts_key_of(lake, lake.url(key)) == key == prompts_key_of(lake, key)
    assert prompts_key_of(lake, f"{lake.root}/{key}") == key  # a folder lake's path names it as its file:// URL does
    with pytest.raises(ValueError, match="is not in the lake"):
        prompts_key_of(lake, "s3://elsewhere/prompts.jsonl")


def test_a_writer_holding_the_date_keeps_every_other_writer_out(tmp_path):
    lake = LocalLake(tmp_path / "lake")
    with holding_date(lake, DATE, "aigc_generate/manual__1", dt.timedelta(minutes=5)), \
            pytest.raises(DateBusy, match="aigc_generate/manual__1"), \
            holding_date(lake, DATE, "aigc prepare on host", dt.timedelta(minutes=5)):
        pass
    with holding_date(lake, DATE, "aigc prepare on host", dt.timedelta(minutes=5)):  # released: free again
        pass
    assert date_lease(lake, DATE).holder() is None


def test_a_candidates_content_no_scorer_reads_fails_evaluation_naming_it_instead_of_scoring_0(deployed_lake):
    from aigc.evaluate.metrics import NoScorer
    from aigc.stages import EVALUATE

    cfg = config()
    key = "requests/free-form.jsonl"
    rows = [{"prompt_id": "a", "prompt": "a small red circle on the left", "seed": 1},
            {"prompt_id": "b", "prompt": "a photo of a cat on a sofa", "seed": 2}]
    deployed_lake.put_bytes(key, "".join(json.dumps(r) + "\n" for r in rows).encode())
    generated = produce(deployed_lake, cfg, model_ref="candidate", prompts_key=key)
    with pytest.raises(NoScorer, match=r"1 of 2 generated prompts of run .* 'a photo of a cat on a sofa'"):
        EVALUATE.produce(deployed_lake, generated, cfg, run_id="20261120T000000000000Z-eval09")
