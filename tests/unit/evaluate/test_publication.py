"""What stage 5 publishes, and what no later run may take away: content for users, evaluation sets, lineage.

Each test fails on d70b129: an evaluation published its candidate's generations through the content pointer
(replacing a prompt file's content, whose run garbage collection then deleted), production moved before
anything was published, and re-publishing a date deleted the curated run a registered version was trained on.
"""

import json

import pytest

from aigc.cli import main
from aigc.config import PrepareConfig
from aigc.generate import run as gen_run
from aigc.lake import refs
from aigc.lake.keys import join, partition
from aigc.lake.publish import resolve
from aigc.prepare import publish_prepared
from aigc.quality.evaluation import promote_and_publish, validate_evaluation
from aigc.registry import Registry
from aigc.registry.lineage import lineage
from aigc.workloads import workload_of
from aigc.workloads.image import IMAGE, prepare_image
from tests.training_fixtures import DATE
from tests.unit.evaluate.test_evaluate import LENIENT, config, evaluate, generate

MODEL = "shapes-cvae"


def content_for_a_prompt_file(lake, cfg, run_id: str) -> dict:
    """Production's answers to a dropped prompt file, published after its run (gate 4 is not what this tests)."""
    key = f"prompts/shapes/dt={DATE}/prompts.jsonl"
    if not lake.exists(key):
        rows = [{"prompt_id": f"req-{i}", "prompt": "a small red circle on the left", "seed": i} for i in range(6)]
        lake.put_bytes(key, "".join(json.dumps(r) + "\n" for r in rows).encode())
    plan = gen_run.plan_generation(lake, DATE, cfg, IMAGE, run_id=run_id, model_ref="production", prompts_key=key)
    for s in plan["shards"]:
        gen_run.generate_shard(lake, plan, s, cfg, IMAGE)
    finished = gen_run.finish_generation(lake, plan, cfg, IMAGE)
    gen_run.publish_generations(lake, MODEL, DATE, finished["run_id"])
    return finished


def nightly_evaluation(lake, cfg, run_id: str) -> dict:
    evaluated = evaluate(lake, generate(lake, cfg), cfg, run_id=run_id)
    validate_evaluation(lake, evaluated, LENIENT, IMAGE)
    return {**evaluated, "published": promote_and_publish(lake, evaluated, cfg)}


def test_content_and_the_nightly_evaluation_are_both_published_in_either_order(deployed_lake):
    lake, cfg = deployed_lake, config()
    Registry(lake, MODEL).move("production", "v0001")
    first = content_for_a_prompt_file(lake, cfg, "20261120T010000000000Z-content1")
    evaluated = nightly_evaluation(lake, cfg, "20261120T020000000000Z-eval01")
    second = nightly_evaluation(lake, cfg, "20261120T030000000000Z-eval02")  # evaluation, then content
    later = content_for_a_prompt_file(lake, cfg, "20261120T040000000000Z-content2")

    content = resolve(lake, partition("generations", MODEL, DATE))
    assert content["run_id"] == later["run_id"]  # the content pointer names content, never an evaluation set
    evaluation = resolve(lake, partition("evaluations", MODEL, DATE))
    assert evaluation["run_id"] == second["run_id"]
    assert evaluation["generations"] == gen_run.generation_prefix(MODEL, DATE, second["generation_run"])
    for run in (first["run_id"], later["run_id"], evaluated["generation_run"], second["generation_run"]):
        assert lake.exists(join(gen_run.generation_prefix(MODEL, DATE, run), gen_run.MANIFEST)), run
    assert lake.exists(join(gen_run.generation_prefix(MODEL, DATE, first["run_id"]), "shard-00000.parquet"))


def test_a_registered_versions_training_data_survives_any_number_of_later_publications(deployed_lake, capsys):
    lake = deployed_lake
    record = Registry(lake, MODEL).get("v0001")
    trained_on = record["lineage"]["curated"][0]["run_id"]
    curated_run = f"{partition('curated', 'shapes', DATE)}/run={trained_on}"
    for _ in range(3):  # re-curate the date: each publication collects the run two publications back
        again = prepare_image(lake.sub("raw/shapes"), lake, DATE, PrepareConfig(workers=1))
        publish_prepared(lake, "shapes", DATE, again["run_id"])
    assert lake.exists(f"{curated_run}/_manifest.json") and lake.list(curated_run.replace("curated", "quarantine", 1))
    assert refs.holders(lake, curated_run) == [f"models/{MODEL}/v0001"]
    chain = lineage(lake, MODEL, "v0001")
    assert chain["complete"], chain["missing"]
    kinds = [link["link"] for link in chain["links"]]
    assert kinds[:4] == [f"raw drop {DATE}", f"curated run {DATE}", "training run", "model"]
    assert next(link for link in chain["links"] if link["link"] == f"curated run {DATE}")["verified"] is True
    assert main(["registry", "lineage", "--lake", lake.uri, "--version", "v0001"]) == 0
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert shown["complete"] and shown["version"] == "v0001"
    lake.delete_prefix(curated_run)  # what garbage collection must never do: the chain says what broke
    broken = lineage(lake, MODEL, "v0001")
    assert not broken["complete"] and broken["missing"] == [f"curated run {DATE}"]
    assert main(["registry", "lineage", "--lake", lake.uri, "--version", "v0001"]) == 1
    assert f"v0001's lineage is broken: curated run {DATE} missing" in capsys.readouterr().err


STEPS = [("references", "aigc.lake.refs.hold"), ("the version's record", "aigc.registry.store.Registry.update_record"),
         ("the evaluation's publication", "aigc.quality.evaluation.publish"),
         ("the alias move", "aigc.registry.store.Registry.decide")]


@pytest.mark.parametrize(("step", "target"), STEPS, ids=[s for s, _ in STEPS])
def test_promotion_is_the_last_step_and_a_failure_at_any_step_leaves_production_in_force(deployed_lake, monkeypatch,
                                                                                          step, target):
    """Production is v0001 (trained on the date); a second version, v0002, passed gate 5 and is to replace it. A
    failure at each write in turn must leave production on v0001; a retry then completes the step."""
    from aigc.config import DeployConfig
    from aigc.quality.deploy import smoke_test
    from aigc.workloads.image.variants import build_variants

    lake, cfg = deployed_lake, config()
    registry = Registry(lake, MODEL)
    registry.move("production", "v0001")
    v2 = _second_version(lake)
    build_variants(lake, MODEL, v2, DeployConfig(variants="fp32", smoke_prompts=4, latency_batch=4, latency_repeats=1))
    smoke_test(lake, MODEL, v2, cfg.override({"deploy_gate": {"max_latency_ms": 1e6}}), DATE, IMAGE)
    evaluated = evaluate(lake, generate(lake, cfg), cfg, run_id="20261120T050000000000Z-step01")
    validate_evaluation(lake, evaluated, LENIENT, IMAGE)
    metrics_key = f"{partition('evaluations', MODEL, DATE)}/run={evaluated['run_id']}/metrics.json"
    metrics = lake.get_json(metrics_key)
    metrics["promotion"] = {"promote": True, "regression": None, "reason": f"{v2} replaces production v0001"}
    lake.put_json(metrics_key, metrics)

    def fail(*_args, **_kwargs):
        raise ConnectionResetError(f"injected: {step} failed")

    monkeypatch.setattr(target, fail)
    with pytest.raises(ConnectionResetError):
        promote_and_publish(lake, evaluated, cfg)
    monkeypatch.undo()
    assert registry.aliases()["aliases"]["production"] == "v0001"
    assert not registry.aliases().get("decisions")
    published = promote_and_publish(lake, evaluated, cfg)  # the task's retry
    assert published["promoted"] and registry.aliases()["aliases"]["production"] == v2
    assert registry.aliases()["aliases"]["previous"] == "v0001"
    (decision,) = registry.aliases()["decisions"]
    assert decision["version"] == v2 and decision["promoted"] and decision["evaluation"].endswith(evaluated["run_id"])
    assert resolve(lake, partition("evaluations", MODEL, DATE))["run_id"] == evaluated["run_id"]
    promote_and_publish(lake, evaluated, cfg)  # once more: the same decision is not recorded twice
    assert len(registry.aliases()["decisions"]) == 1 and registry.aliases()["aliases"]["previous"] == "v0001"


def _second_version(lake) -> str:
    """v0002: the date's training run again, with other weights (two more steps of the same tiny model)."""
    import torch

    from aigc.quality.training import publish_trained
    from aigc.registry.deploy import register_trained
    from aigc.train import distributed as D
    from aigc.train.loop import train_rank
    from tests.training_fixtures import tiny_config

    solo = D.Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"), backend=None)
    two_steps = tiny_config(steps=2, eval_every=2, checkpoint_every=2)
    run = train_rank(lake, DATE, two_steps, "20261120T000000000000Z-two", solo, workload_of(two_steps))
    publish_trained(lake, MODEL, DATE, run["run_id"])
    return register_trained(lake, MODEL, DATE)["version"]
