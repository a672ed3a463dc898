"""The one shard engine with a workload's own ShardModel: items of different lengths, its own length limit, its
cache key (the image and text workloads run through it in test_generate.py and test_text_generation.py)."""

import json

from aigc.batching import MemoryModel
from aigc.config import PipelineConfig
from aigc.generate.engine import ShardModel, answer_shard
from aigc.lake import LocalLake

PLAN = {"model": "m", "version": "v0001", "variant": "fp32", "run_id": "r1"}


def words_model(calls: list) -> ShardModel:
    """Counts a prompt's words; an item is the prompt's words, its length their number."""

    def run(items):
        calls.append([len(x) for x in items])
        return [len(x) for x in items]

    def finish(item, count):
        values = {"count": count}
        return values, json.dumps(values).encode()

    return ShardModel("cpu", run=run, finish=finish, key=lambda p: [p["prompt"]],
                      prepare=lambda ps: [p["prompt"].split() for p in ps], length=len,
                      memory=MemoryModel(width=4), max_chars=(40, "max_words_chars"))


def test_every_prompt_is_answered_once_in_order_refused_by_the_workloads_own_limit_then_served_from_its_cache(
        tmp_path):
    lake, cfg = LocalLake(tmp_path), PipelineConfig()
    prompts = [{"prompt_id": f"p{i}", "prompt": " ".join(["w"] * (1 + i * 3)), "seed": i} for i in range(20)]
    prompts.append({"prompt_id": "blocked", "prompt": "a gore scene", "seed": 0})
    calls: list = []
    rows, report = answer_shard(lake, PLAN, prompts, cfg, words_model(calls), ["count"], "generations/m/r1")
    assert [r["prompt_id"] for r in rows] == [p["prompt_id"] for p in prompts]
    long = [r for r in rows if r["reason"] and "max_words_chars=40" in r["reason"]]
    assert {r["prompt_id"] for r in long} == {f"p{i}" for i in range(20) if len(prompts[i]["prompt"]) > 40}
    assert rows[-1]["status"] == "refused" and "gore" in rows[-1]["reason"] and rows[-1]["count"] is None
    answered = [r for r in rows if r["status"] == "generated"]
    assert [r["count"] for r in answered] == [len(p["prompt"].split()) for p in prompts[: len(answered)]]
    assert sorted(n for batch in calls for n in batch) == sorted(r["count"] for r in answered)  # each run once
    assert report["items"] == len(answered) and not any(r["cached"] for r in rows)

    again: list = []
    rows2, report2 = answer_shard(lake, PLAN, prompts, cfg, words_model(again), ["count"], "generations/m/r1")
    assert not again and report2["items"] == 0
    assert [r["count"] for r in rows2] == [r["count"] for r in rows]
    assert all(r["cached"] for r in rows2 if r["status"] == "generated")
    other = answer_shard(lake, {**PLAN, "version": "v0002"}, prompts[:3], cfg, words_model(again), ["count"], "x")
    assert len(again) >= 1 and not any(r["cached"] for r in other[0])  # the version is part of the key


def test_the_batchers_settings_reach_stage_4s_batcher_and_hf_causal_lm_judges_a_size_on_one_batch(tmp_path,
                                                                                                   monkeypatch):
    import pytest

    from aigc.generate import engine
    from aigc.stages import configure

    assert configure("default", "hf-causal-lm").batching.judge_batches == 1
    assert configure("default").batching.judge_batches == 2
    with pytest.raises(ValueError, match="judge_batches"):
        PipelineConfig().override({"batching": {"judge_batches": 0}})
    seen: dict = {}
    real = engine.AdaptiveBatcher

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "AdaptiveBatcher", spy)
    cfg = PipelineConfig().override({"batching": {"judge_batches": 3, "tolerance": 0.07}})
    prompts = [{"prompt_id": f"p{i}", "prompt": f"w{i} x", "seed": i} for i in range(5)]
    answer_shard(LocalLake(tmp_path), PLAN, prompts, cfg, words_model([]), ["count"], "generations/m/r1")
    assert (seen["judge_batches"], seen["tolerance"]) == (3, 0.07)


def test_a_runs_first_shard_starts_from_the_size_the_last_run_learned_on_this_device_class(tmp_path):
    """Fixed-size items (remember_sizes): a shard's batcher starts from what the run's earlier shards learned, else
    from what the last run of the same version and variant learned on this device class, kept beside that version's
    cache; another version starts afresh."""
    from aigc.devices import device_class
    from aigc.generate.engine import CARRIED

    def fixed_size_model(calls: list) -> ShardModel:
        def run(items):
            calls.append(len(items))
            return [1] * len(items)

        return ShardModel("cpu", run=run, finish=lambda _item, one: ({"count": one}, b"1"), key=lambda p: [p["prompt"]],
                          memory=MemoryModel(width=4), remember_sizes=True)

    lake, cfg = LocalLake(tmp_path), PipelineConfig()
    night = [[{"prompt_id": f"{n}-{i}", "prompt": f"night {n} prompt {i}", "seed": i} for i in range(64)]
             for n in range(3)]
    first: list = []
    _, report = answer_shard(lake, PLAN, night[0], cfg, fixed_size_model(first), ["count"], "generations/m/r1")
    key = f"cache/generations/m/v0001/fp32/{CARRIED.format(device=device_class('cpu'))}"
    assert lake.get_json(key) == {str(k): v for k, v in report["learned_sizes"].items()}
    (bucket,) = lake.get_json(key)
    lake.put_json(key, {bucket: 3})  # a size no cold start takes (it starts at an eighth of the items: 8)
    second: list = []
    answer_shard(lake, {**PLAN, "run_id": "r2"}, night[1], cfg, fixed_size_model(second), ["count"], "generations/m/r2")
    assert first[0] == 8 and second[0] == 3  # the last night's size, from the first batch
    fresh: list = []
    answer_shard(lake, {**PLAN, "version": "v0002", "run_id": "r3"}, night[2], cfg, fixed_size_model(fresh),
                 ["count"], "generations/m/r3")
    assert fresh[0] == first[0]
