"""Stage 4 on a real (tiny) model: prompts, shards, OOM backoff, cache, exactly-once ledger, gate 4."""

import dataclasses
import io
import json

import pyarrow.parquet as pq
import pytest

from aigc.config import BatchingConfig, GenerateConfig, PipelineConfig
from aigc.generate import run as gen_run
from aigc.generate.prompts import prompts_key
from aigc.quality.gate import GateFailed
from aigc.quality.generation import validate_generation
from aigc.workloads.image import IMAGE
from aigc.workloads.image.serving import Generator
from tests.training_fixtures import DATE, rewrite_recorded, tiny_config


def config(**generate) -> PipelineConfig:
    base = tiny_config()
    settings = {"variant": "fp32", "prompts": 40, "blocked_prompts": 4, "shards": 3, **generate}
    g = dataclasses.replace(GenerateConfig(), **settings)
    return dataclasses.replace(base, generate=g, batching=BatchingConfig(backoff_s=0.0, backoff_max_s=0.0))


def run_all(lake, cfg, run_id=None):
    plan = gen_run.plan_generation(lake, DATE, cfg, IMAGE, run_id=run_id, demo_prompts=True)
    entries = [gen_run.generate_shard(lake, plan, s, cfg, IMAGE) for s in plan["shards"]]
    return plan, entries, gen_run.finish_generation(lake, plan, cfg, IMAGE)


def rows_of(lake, plan):
    prefix = gen_run.generation_prefix(plan["model"], plan["date"], plan["run_id"])
    manifest = lake.get_json(f"{prefix}/_MANIFEST.json")
    return gen_run.generation_rows(lake, manifest).to_pylist()


def test_injected_oom_still_answers_every_prompt_exactly_once_then_the_gate_passes(deployed_lake):
    cfg = dataclasses.replace(config(), batching=BatchingConfig(oom_rate=0.5, backoff_s=0.0, backoff_max_s=0.0))
    plan, entries, summary = run_all(deployed_lake, cfg, run_id="20261120T000000000000Z-oom001")  # fixed faults
    rows = rows_of(deployed_lake, plan)
    ids = [r["prompt_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 44 and summary["rows"] == 44
    assert summary["refused"] == 4 and all(r["image"] is None for r in rows if r["status"] == "refused")
    assert sum(e["batching"]["ooms"] for e in entries) > 0
    # On CPU too the memory model is calibrated from measured peaks, and says how far off its prior was.
    assert all(e["batching"]["measured_peaks"] >= 1 and e["batching"]["memory_prediction_error"] is not None
               for e in entries), entries
    assert validate_generation(deployed_lake, summary, cfg, IMAGE)["success"]


def test_a_rerun_reuses_the_cache_and_says_so(deployed_lake):
    cfg = config()
    _, entries, first = run_all(deployed_lake, cfg)
    _, _, second = run_all(deployed_lake, cfg)
    assert first["cached"] == 0 and second["cached"] == second["generated"] == 40
    # On the CPU no GPU telemetry is recorded, and each shard's entry and the run's summary say so, with no figure.
    assert all(e["gpu"] == {"recorded": False, "reason": f"no GPU: generation shard {e['shard']} ran on the CPU, so "
                                                         "nothing was sampled"} for e in entries)
    assert first["gpu"] == {"recorded": False, "reason": entries[0]["gpu"]["reason"]}


def test_a_shard_killed_midway_is_finished_by_its_retry_with_one_ledger_entry(deployed_lake, monkeypatch):
    cfg = config(shards=1)
    plan = gen_run.plan_generation(deployed_lake, DATE, cfg, IMAGE, demo_prompts=True)
    real = Generator.generate
    calls = {"n": 0}

    def dies_on_the_third_batch(self, prompts, seeds):
        calls["n"] += 1
        if calls["n"] == 3:
            raise SystemExit("worker killed")  # not an OOM: the batcher must not swallow it
        return real(self, prompts, seeds)

    monkeypatch.setattr(Generator, "generate", dies_on_the_third_batch)
    with pytest.raises(SystemExit):
        gen_run.generate_shard(deployed_lake, plan, plan["shards"][0], cfg, IMAGE)
    prefix = gen_run.generation_prefix(plan["model"], plan["date"], plan["run_id"])
    assert not deployed_lake.exists(f"{prefix}/_SHARD-00000.json")
    monkeypatch.setattr(Generator, "generate", real)
    retry = gen_run.generate_shard(deployed_lake, plan, plan["shards"][0], cfg, IMAGE)
    assert retry["rows"] == 44 and retry["cached"] > 0  # the killed attempt's batches were kept
    again = gen_run.generate_shard(deployed_lake, plan, plan["shards"][0], cfg, IMAGE)
    assert again["already_done"] and again["prompt_ids_sha256"] == retry["prompt_ids_sha256"]


def test_a_variant_that_did_not_pass_gate_3_is_refused(deployed_lake):
    with pytest.raises(gen_run.VariantNotEligible, match=r"variant 'bf16' has not passed gate 3; eligible .*fp32"):
        gen_run.plan_generation(deployed_lake, DATE, config(variant="bf16"), IMAGE, demo_prompts=True)


def test_a_plan_for_a_named_version_ignores_the_alias_another_run_moved(deployed_lake):
    """As in a backfill of two dates at once: the other date registers v0002 (not yet through gate 3)
    and moves `candidate` while this run plans generation for the v0001 it registered."""
    from aigc.registry import Registry

    registry = Registry(deployed_lake, "shapes-cvae")
    version, _prefix = registry.claim_next()
    registry.complete(version, {"variants": {}})
    registry.move("candidate", version, reason="the other date's run")
    with pytest.raises(gen_run.VariantNotEligible, match=rf"{version} \(candidate\)"):
        gen_run.plan_generation(deployed_lake, DATE, config(), IMAGE, demo_prompts=True)
    plan = gen_run.plan_generation(deployed_lake, DATE, config(), IMAGE, demo_prompts=True, model_ref="v0001")
    assert plan["version"] == "v0001"


def test_an_overlong_prompt_is_refused_with_its_length(deployed_lake):
    cfg = config(max_prompt_chars=20, shards=1)
    deployed_lake.put_bytes(prompts_key("shapes", DATE), "".join(json.dumps(r) + "\n" for r in [
        {"prompt_id": "short", "prompt": "a red circle"},
        {"prompt_id": "long", "prompt": "a small red circle at the top left of the picture"}]).encode())
    plan, _, summary = run_all(deployed_lake, cfg)
    rows = {r["prompt_id"]: r for r in rows_of(deployed_lake, plan)}
    assert rows["short"]["status"] == "generated"
    assert rows["long"]["status"] == "refused" and "max_prompt_chars=20 (got 49)" in rows["long"]["reason"]


def test_gate_4_fails_when_a_blocked_prompt_was_generated(deployed_lake):
    cfg = config(shards=1)
    plan, _, summary = run_all(deployed_lake, cfg)
    prefix = gen_run.generation_prefix(plan["model"], plan["date"], plan["run_id"])
    key = f"{prefix}/shard-00000.parquet"
    table = pq.read_table(io.BytesIO(deployed_lake.get_bytes(key))).to_pylist()
    image = next(r["image"] for r in table if r["status"] == "generated")
    for r in table:
        if r["status"] == "refused":
            r.update(status="generated", image=image, reason=None)
            break
    buf = io.BytesIO()
    pq.write_table(__import__("pyarrow").Table.from_pylist(table, schema=gen_run.generation_schema(IMAGE)), buf)
    rewrite_recorded(deployed_lake, f"{prefix}/_MANIFEST.json", key, buf.getvalue())
    with pytest.raises(GateFailed, match="should_refuse"):
        validate_generation(deployed_lake, summary, cfg, IMAGE)


def test_a_rerun_of_the_date_with_another_prompt_count_draws_its_own_demo_set(deployed_lake):
    """The demo set belongs to its run: changing "prompts" in the form on a re-run takes effect."""
    first, _, first_summary = run_all(deployed_lake, config(prompts=12, shards=1))
    second, _, second_summary = run_all(deployed_lake, config(prompts=6, shards=1))
    assert (first_summary["generated"], second_summary["generated"]) == (12, 6)
    assert first["prompts_key"] != second["prompts_key"]
    assert first["prompts_key"].startswith(gen_run.generation_prefix(first["model"], DATE, first["run_id"]))
    assert not deployed_lake.exists(prompts_key("shapes", DATE))  # the producers' location stays theirs


def test_a_dropped_prompt_file_wins_over_the_demo_set(deployed_lake):
    deployed_lake.put_bytes(prompts_key("shapes", DATE), b'{"prompt_id": "mine", "prompt": "a red circle"}\n')
    plan, _, summary = run_all(deployed_lake, config(prompts=12, shards=1))
    assert plan["prompts_key"] == prompts_key("shapes", DATE) and summary["rows"] == 1



def test_the_plan_sends_a_variant_that_serves_on_the_cpu_to_the_cpu_queue(deployed_lake):
    """int8 (ONNX Runtime) built where there is no CUDA provider serves on the CPU: its shards go to the CPU queue.
    Torch variants take a GPU wherever the worker has one."""
    from aigc.config import DeployConfig
    from aigc.registry import Registry
    from aigc.workloads.image.variants import build_variants

    plan = gen_run.plan_generation(deployed_lake, DATE, config(variant="fp32"), IMAGE, demo_prompts=True)
    assert plan["serves_on"] == "gpu"
    build_variants(deployed_lake, "shapes-cvae", "v0001",
                   DeployConfig(variants="fp32,int8", smoke_prompts=4, latency_batch=4, latency_repeats=1))
    record = Registry(deployed_lake, "shapes-cvae").get("v0001")
    assert {k: v["device"] for k, v in record["variants"].items() if k in ("fp32", "int8")} == \
        {"fp32": "cpu", "int8": "cpu"}  # this machine has no GPU: gate 3 timed both on the CPU
    assert (gen_run.serves_on("int8", record), gen_run.serves_on("fp32", record)) == ("cpu", "gpu")
    # Built on a GPU worker with onnxruntime's CUDA provider, int8 would serve there.
    on_gpu = {**record, "variants": {**record["variants"], "int8": {**record["variants"]["int8"], "device": "cuda:0"}}}
    assert gen_run.serves_on("int8", on_gpu) == "gpu"


def test_auto_serves_what_the_shards_worker_runs_best_bf16_on_cuda_fp32_on_a_cpu(deployed_lake, monkeypatch):
    """generate.variant=auto (the hf-causal-lm workload's default): each shard's worker chooses, and its rows, its
    cache and its ledger entry name what it served. The CUDA worker is faked here (its device as pick_device says it);
    the model itself runs on this machine's CPU."""
    import torch

    from aigc.config import DeployGateThresholds
    from aigc.quality.deploy import smoke_test
    from tests.training_fixtures import image_workload

    cfg = config(variant="auto", prompts=8, blocked_prompts=0, shards=2)
    plan, entries, summary = run_all(deployed_lake, cfg)
    assert plan["serves_on"] == "gpu" and plan["eligible_variants"] == ["fp32"]
    assert [e["variant"] for e in entries] == ["fp32", "fp32"] and summary["variant"] == "fp32"
    assert {r["variant"] for r in rows_of(deployed_lake, plan)} == {"fp32"}  # this machine has no CUDA

    monkeypatch.setattr(gen_run, "pick_device", lambda: torch.device("cuda", 0))
    # The worker's GPU as pynvml would read it (scripted: tests/unit/test_telemetry.py), sampled beside each shard.
    from tests.unit.test_telemetry import ScriptedNvml

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr("aigc.devices.nvml", lambda: ScriptedNvml({0: [20]}, {0: [3 << 30]}))
    _, entries, summary = run_all(deployed_lake, cfg)
    assert summary["variant"] == "fp32" and summary["cached"] == 8  # bf16 did not pass gate 3: fp32, from cache
    assert all(e["gpu"]["recorded"] and e["gpu"]["gpus"][0]["name"] == "NVIDIA Scripted 80GB" for e in entries)
    assert summary["gpu"]["recorded"] and summary["gpu"]["peak_memory_bytes"] == 3 << 30
    assert summary["gpu"]["low_utilisation"] and summary["gpu"]["low_utilisation_tasks"] == [0, 1]  # 20 % < 30 %

    loose = PipelineConfig(workload=image_workload(max_pixel_mae=1.0),
                           deploy_gate=DeployGateThresholds(max_latency_ms=1e6, max_slowdown_vs_fp32=1e6))
    assert "bf16" in smoke_test(deployed_lake, "shapes-cvae", "v0001", loose, DATE, IMAGE)["eligible_variants"]
    plan, entries, summary = run_all(deployed_lake, cfg)
    assert [e["variant"] for e in entries] == ["bf16", "bf16"] and summary["cached"] == 0  # its own cache entries
    manifest = deployed_lake.get_json(f"{gen_run.generation_prefix(plan['model'], plan['date'], plan['run_id'])}"
                                      "/_MANIFEST.json")
    assert (manifest["variant"], manifest["variant_asked"]) == ("bf16", "auto")
    assert {r["variant"] for r in rows_of(deployed_lake, plan)} == {"bf16"}
