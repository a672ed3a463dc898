"""The text workload: its reference corpus, stage 1's rules on a dirty drop, the tokenizer, the model's KV cache,
and a few training steps by the core's loop."""

from __future__ import annotations

import json
import random

import pytest
import torch

from aigc.config import PipelineConfig, PrepareConfig
from aigc.lake import LocalLake
from aigc.stages import configure
from aigc.workloads import load_workload, workload_of
from aigc.workloads.text import corpus
from aigc.workloads.text.config import TextSettings
from aigc.workloads.text.model import TextLM
from aigc.workloads.text.records import TextRecords, clean_fraction, normalise
from aigc.workloads.text.tokenizer import train_tokenizer
from aigc.workloads.world import parse_caption

DATE = "2026-11-20"


def smoke() -> PipelineConfig:
    return configure("smoke", "text").override({"prepare": {"workers": 1}, "raw": {"n": 150}})


def test_documents_are_long_tailed_logs_whose_every_line_can_be_checked():
    rng = random.Random(3)
    sizes = [corpus.item_count(rng, 60, 1800) for _ in range(2000)]
    assert min(sizes) == 3 and max(sizes) > 1000  # a long tail
    assert sorted(sizes)[1000] in range(45, 80)  # around the median asked for
    doc = corpus.document(random.Random(1), 40, "abc")
    lines = doc.split("\n")
    assert lines[0] == "Log abc." and len(lines) == 1 + 40 + 4
    items = {}
    for line in lines[1:41]:
        head, caption = line[:-1].split(": ", 1)
        assert parse_caption(caption) is not None  # a valid scene of the reference grammar
        items[int(head.split()[1])] = caption
    for line in lines[41:]:
        k, caption = line[len("Recall: item "):-1].split(" is ", 1)
        assert items[int(k)] == caption  # a recall restates the fact the log gave
    assert corpus.document(random.Random(1), 40, "abc") == doc  # deterministic


def test_stage_1_quarantines_each_planted_defect_with_its_reason_and_loses_nothing(tmp_path):
    from aigc.stages import PREPARE

    cfg = smoke()
    lake = LocalLake(tmp_path)
    drop = PREPARE.make_raw(lake.sub("raw/logs"), DATE, cfg)
    assert drop == PREPARE.make_raw(lake.sub("raw/logs"), DATE, cfg)  # the same seed and date, the same drop
    assert sum(drop["planted"].values()) > 10
    summary = PREPARE.produce(lake.sub("raw/logs"), lake, DATE, cfg)
    expected: dict[str, int] = {}
    for kind, n in drop["planted"].items():
        expected[corpus.EXPECTED_REASON[kind]] = expected.get(corpus.EXPECTED_REASON[kind], 0) + n
    assert summary["reasons"] == expected
    assert summary["input"] == 150 == summary["curated"] + summary["quarantined"]
    assert summary["curated"] == drop["clean"]
    gate = PREPARE.gate(lake, cfg, summary)
    assert gate["success"]


def test_normalisation_makes_a_resaved_copy_equal_and_the_checks_name_the_limit():
    rules = TextRecords(TextSettings())

    base = {"id": "a", "source": "s", "created_at": "t"}
    text = "Log a.\nItem 1: a small red circle at the top.\nItem 2: a large blue square on the left."
    assert normalise(text.replace("\n", "\r\n") + "  \n") == text
    row = rules.examine({**base, "text": text}, None, PrepareConfig())
    assert row["chars"] == len(text) and row["words"] == 20 and row["bytes"] == len(text)
    short = rules.examine({**base, "text": "Log."}, None, PrepareConfig())
    assert short.reason == "text_too_short" and "4 characters" in short.detail and "min_chars=40" in short.detail
    junk = rules.examine({**base, "text": text + "\x00\x01\x02" * 10}, None, PrepareConfig())
    assert junk.reason == "text_charset" and "min_clean_fraction=0.98" in junk.detail
    assert clean_fraction("héllo, wörld! 42\n") == 1.0


def test_the_tokenizer_is_learnt_the_same_way_twice_and_round_trips():
    texts = [corpus.document(random.Random(i), 30, f"d{i}") for i in range(50)]
    a, b = train_tokenizer(texts, 400), train_tokenizer(texts, 400)
    assert a.to_str() == b.to_str() and a.get_vocab_size() == 400
    ids = a.encode(texts[0]).ids
    assert a.decode(ids) == texts[0] and len(ids) < len(texts[0]) / 2.5  # merges learnt: ~4 characters per token
    assert a.decode(a.encode("ünïcode ✓ never seen").ids) == "ünïcode ✓ never seen"  # byte level: nothing unknown


def test_decoding_with_the_kv_cache_gives_the_logits_of_a_full_forward_pass():
    torch.manual_seed(0)
    model = TextLM(97, layers=2, width=32, heads=4).eval()
    ids = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        full = model(ids)
        from aigc.workloads.text.model import KVCache

        cache = KVCache(model.layers)
        steps = [model(ids[:, :5], cache=cache)]  # a prompt, then token by token, then 3 at once
        for t in range(5, 9):
            steps.append(model(ids[:, t:t + 1], start=t, cache=cache))
        steps.append(model(ids[:, 9:12], start=9, cache=cache))
    assert cache.length == 12
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    changed = ids.clone()
    changed[:, 8] = (changed[:, 8] + 1) % 97
    with torch.no_grad():
        assert torch.allclose(model(changed)[:, :8], full[:, :8], atol=1e-6)  # causal: the future is not seen


def test_costs_grow_faster_than_length_and_stop_at_the_context():
    cfg = configure("demo", "text")
    costs = load_workload("text").sample_costs({"bytes": [400, 800, 1600, 10**6, 10**7]}, cfg)
    assert costs[1] > 2 * costs[0] and costs[2] > 2 * costs[1] and costs[3] == costs[4]


def tiny(cfg: PipelineConfig) -> PipelineConfig:
    return cfg.override({"train": {"steps": 12, "eval_every": 6, "checkpoint_every": 6, "batch_size": 8,
                                   "warmup_steps": 2, "lr": 1e-2, "nproc": 1, "threads": 1},
                         "workload": {"settings": {"context": 128, "layers": 1, "width": 32, "heads": 2,
                                                  "vocab_size": 300, "new_tokens": 8}},
                         "deploy": {"variants": "fp32,bf16,int8", "smoke_prompts": 4, "latency_batch": 4,
                                    "latency_repeats": 1}})


SOLO_RUN = "20261120T000000000000Z-text01"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A lake with the smoke drop curated and a tiny text model trained on it (not yet published)."""
    from aigc.stages import PREPARE
    from aigc.train import distributed as D
    from aigc.train.loop import train_rank

    torch.set_num_threads(1)
    cfg = tiny(smoke())
    lake = LocalLake(tmp_path_factory.mktemp("text"))
    PREPARE.make_raw(lake.sub("raw/logs"), DATE, cfg)
    PREPARE.finish(lake, cfg, PREPARE.produce(lake.sub("raw/logs"), lake, DATE, cfg))
    solo = D.Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"), backend=None)
    return lake, cfg, solo, train_rank(lake, DATE, cfg, SOLO_RUN, solo, workload_of(cfg))


def test_the_core_loop_trains_the_text_model_and_resumes_only_with_the_same_settings(trained):
    from aigc.train.checkpoint import ResumeMismatch
    from aigc.train.loop import train_rank

    lake, cfg, solo, summary = trained
    assert summary["workload"] == "text" and summary["final_val_loss"] < 0.8 * summary["initial_val_loss"]
    card = lake.get_json(f"training/logs-gpt/dt={DATE}/run={SOLO_RUN}/model.json")
    assert card["model"]["context"] == 128 and '"vocab"' in card["tokenizer"]
    again = train_rank(lake, DATE, cfg, SOLO_RUN, solo, workload_of(cfg))  # a retry: nothing left to train
    assert again["resumed_from_step"] == 12 and again["weights_sha256"] == summary["weights_sha256"]
    shorter = cfg.override({"workload": {"settings": {"context": 64}}})
    with pytest.raises(ResumeMismatch, match=r"settings: checkpoint .*'context': 128.*now .*'context': 64"):
        train_rank(lake, DATE, shorter, SOLO_RUN, solo, workload_of(cfg))


@pytest.fixture(scope="module")
def deployed(trained):
    """The tiny model published by gate 2, registered, its variants built, gate 3 run."""
    import logging

    from aigc.stages import DEPLOY, TRAIN

    lake, cfg, _, summary = trained
    TRAIN.finish(lake, cfg, summary)  # gate 2 (the smoke bar) and publication: stage 3's input
    registered = DEPLOY.register(lake, DATE, cfg)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("aigc.registry.torch_variants").addHandler(handler)
    try:
        built = DEPLOY.build(lake, cfg, registered["version"])
    finally:
        logging.getLogger("aigc.registry.torch_variants").removeHandler(handler)
    gate = DEPLOY.gate(lake, cfg, {**registered, "date": DATE})
    return lake, cfg, built, gate, [r.getMessage() for r in records]


def test_stage_3_registers_builds_the_torch_variants_and_gates_them(deployed):
    from aigc.registry.loader import load_serving

    lake, cfg, built, gate, messages = deployed
    assert set(built["variants"]) == {"fp32", "bf16"}  # int8 is an ONNX variant: the image workload's alone
    assert any("variant(s) ['int8'] not built: workload 'text' builds ['fp32', 'bf16']" in m for m in messages)
    fp32, bf16 = built["variants"]["fp32"], built["variants"]["bf16"]
    assert fp32["agreement_vs_fp32"] == 1.0 and 0.0 <= bf16["agreement_vs_fp32"] <= 1.0
    assert bf16["size_vs_fp32"] == pytest.approx(0.5, abs=0.02) and fp32["latency_ms_b1"] > 0
    assert gate["success"] and "fp32" in gate["eligible_variants"]
    bar = cfg.workload.settings.min_text_agreement
    fast_enough = bf16["latency_ms_b1"] <= cfg.deploy_gate.max_slowdown_vs_fp32 * fp32["latency_ms_b1"]
    assert ("bf16" in gate["eligible_variants"]) == (bf16["agreement_vs_fp32"] >= bar and fast_enough)
    serving = load_serving(lake, "logs-gpt", "candidate", "fp32", "cpu", load_workload("text").serving)
    prompts = ["Log a.\nItem 1: a small red circle at the top.\nItem 2:", "Log b.\nItem 1:"]
    outputs = serving.generate(prompts, [0, 1])
    assert len(outputs) == 2 and all(isinstance(o, str) and o for o in outputs)
    assert serving.generate(prompts[::-1], [1, 0]) == outputs[::-1]  # the same output whatever the batch order


def test_stage_4_answers_every_prompt_once_refuses_the_blocked_and_caches(deployed):
    from aigc.generate.run import generation_rows
    from aigc.stages import GENERATE

    lake, cfg, *_ = deployed
    cfg = cfg.override({"generate": {"prompts": 12, "blocked_prompts": 2, "shards": 2}})
    plan = GENERATE.plan(lake, DATE, cfg, demo_prompts=True)
    entries = [GENERATE.shard(lake, plan, shard, cfg) for shard in plan["shards"]]
    assert GENERATE.shard(lake, plan, plan["shards"][0], cfg)["already_done"]  # a retried shard writes nothing
    produced = GENERATE.finish_run(lake, plan, cfg)
    assert produced["rows"] == 14 and produced["generated"] == 12 and produced["refused"] == 2
    assert produced["gallery_uri"].endswith("samples.md") and sum(e["rows"] for e in entries) == 14
    gated = GENERATE.finish(lake, cfg, produced)
    assert gated["gate_result"]["success"] and not gated["published"]  # a candidate's run waits for gate 5
    manifest = lake.get_json(f"generations/logs-gpt/dt={DATE}/run={plan['run_id']}/_MANIFEST.json")
    rows = generation_rows(lake, manifest).to_pylist()
    assert sorted(r["prompt_id"] for r in rows) == [f"p-{i:06d}" for i in range(14)]
    for r in rows:
        if r["status"] == "refused":
            assert r["text"] is None and "blocked term" in r["reason"]
        else:
            own = cfg.workload.settings
            assert isinstance(r["text"], str) and 0 <= r["new_tokens"] <= own.new_tokens
            assert r["prompt_tokens"] <= own.context - own.new_tokens  # kept its last tokens only
    again = GENERATE.plan(lake, DATE, cfg, demo_prompts=True, prompts_key=plan["prompts_key"])
    for shard in again["shards"]:
        GENERATE.shard(lake, again, shard, cfg)
    assert GENERATE.finish_run(lake, again, cfg)["cached"] == 12  # the same prompts: every output from the cache


def test_the_checker_judges_lines_numbers_and_recalled_facts():
    from aigc.workloads.text.checker import judge, recall_right

    log = "Log a.\nItem 1: a small red circle at the top.\nItem 2: a large blue square on the left.\nItem 3:"
    good = judge(log, " a medium green triangle in the center.\nRecall: item 1 is a small red circle at the top.\nIt")
    assert good["valid"] and good["lines"] == 2 and good["recalls_right"] == 1  # the cut-off line is not judged
    assert not judge(log, " a medium green hexagon in the center.\n")["valid"]  # not a scene of the grammar
    assert not judge(log, " a medium green triangle in the center.\nItem 5: a small red circle at the top.\n")[
        "valid"]  # item 4 comes next
    wrong_fact = " a medium green triangle in the center.\nRecall: item 2 is a small red circle at the top.\n"
    assert not judge(log, wrong_fact)["valid"]
    assert not judge(log, " a medium green tri")["valid"]  # nothing complete: nothing shown to be right
    probe = log.rsplit("\n", 1)[0] + "\nRecall: item 2 is"
    assert recall_right(probe, " a large blue square on the left.\nItem 3")
    assert not recall_right(probe, " a small red circle at the top.")


def test_stage_5_measures_with_intervals_gates_and_promotes(deployed):
    from aigc.stages import EVALUATE, GENERATE

    lake, cfg, *_ = deployed
    cfg = cfg.override({"generate": {"prompts": 10, "blocked_prompts": 2, "shards": 1},
                        "evaluate": {"eval_prompts": 16, "latency_prompts": 4, "latency_rounds": 2}})
    plan = GENERATE.plan(lake, DATE, cfg, demo_prompts=True)
    GENERATE.shard(lake, plan, plan["shards"][0], cfg)
    produced = GENERATE.finish_run(lake, plan, cfg)
    evaluated = EVALUATE.produce(lake, produced, cfg, run_id="20261120T010000000000Z-eval01")
    metrics = lake.get_json(f"evaluations/logs-gpt/dt={DATE}/run=20261120T010000000000Z-eval01/metrics.json")
    iv = metrics["intervals"]
    assert iv["alignment"]["n"] == 10 and iv["alignment"]["lo"] <= metrics["alignment"]["all"] <= iv["alignment"]["hi"]
    assert iv["perplexity"]["lo"] <= metrics["perplexity"] <= iv["perplexity"]["hi"] and metrics["perplexity"] > 1
    assert set(metrics["recall"]) == {"512", "2048", "4096"} and metrics["recall"]["4096"]["beyond_context"]
    assert metrics["safety_violations"] == 0 and metrics["review"]["queued"] > 0
    assert evaluated["recommended"]["variant"] in ("fp32", "bf16") and metrics["eval_prompts"] == 16
    run = f"evaluations/logs-gpt/dt={DATE}/run=20261120T010000000000Z-eval01"
    queue = [json.loads(x) for x in lake.get_bytes(f"{run}/review/queue.jsonl").decode().splitlines()]
    logprobs = [x["mean_logprob"] for x in queue]  # the least sure first, each with the checker's verdict to label
    assert logprobs == sorted(logprobs) and all(isinstance(x["checker_correct"], bool) for x in queue)
    assert lake.get_bytes(f"{run}/pareto.png").startswith(b"\x89PNG")  # the skeleton's, for every workload
    done = EVALUATE.finish(lake, cfg, evaluated)  # the smoke bars: validity ≥ 0, perplexity ≤ 10⁶
    report = lake.get_bytes(f"{run}/report.html").decode()
    assert "<h2>Samples</h2><pre>" in report  # the report rewritten with gate 5's verdict keeps its samples
    assert "<h2>GPU use</h2>" in report and "<th>training</th><td>GPU</td><td>not recorded" in report
    assert done["gate_result"]["success"] and done["promoted"] and done["production"] == "v0001"
    checks = {c["check"]: c for c in lake.get_json(
        f"evaluations/logs-gpt/dt={DATE}/run=20261120T010000000000Z-eval01/metrics.json")["gates"]["evaluation"]["checks"]}
    assert set(checks) == {"content_alignment", "model_alignment", "perplexity", "safety_violations"}
    strict = cfg.override({"workload": {"settings": {"max_perplexity": 1.0001}}})  # no model of this size is that sure
    from aigc.quality.gate import GateFailed

    with pytest.raises(GateFailed, match="held-out perplexity is .* significantly above the maximum 1.0001"):
        EVALUATE.gate(lake, strict, evaluated)


def test_a_nightly_run_continues_production_with_its_tokenizer(trained, deployed):
    """A warm start (``train.init_from``): the run adopts production's tokenizer, whatever its window would learn,
    and refuses (starting from scratch, saying why) a production of another model size."""
    from aigc.registry import Registry
    from aigc.train.loop import train_rank

    lake, cfg, *_ = deployed
    registry = Registry(lake, "logs-gpt")
    registry.move("production", "v0001", reason="the test's production")
    production_card = lake.get_json("models/logs-gpt/v0001/model.json")
    solo = trained[2]
    later = cfg.override({"train": {"steps": 2, "eval_every": 2, "checkpoint_every": 2}})
    run = train_rank(lake, DATE, later, "20261121T000000000000Z-warm01", solo, workload_of(later))
    assert run["start"]["version"] == "v0001" and run["start"]["val_loss"] < run["initial_val_loss"]
    card = lake.get_json("training/logs-gpt/dt=2026-11-20/run=20261121T000000000000Z-warm01/model.json")
    assert card["tokenizer"] == production_card["tokenizer"]
    wider = later.override({"workload": {"settings": {"width": 2 * later.workload.settings.width}}})
    run = train_rank(lake, DATE, wider, "20261121T000000000000Z-warm02", solo, workload_of(wider))
    assert run["start"]["version"] is None and "its model settings" in run["start"]["reason"]

