"""Warm starts: a nightly run starts from production's weights when they fit, from scratch when they do not, and
a retry keeps the start its checkpoint names."""

import dataclasses

import pytest
import torch
from safetensors.torch import load as load_safetensors

from aigc.lake.keys import join
from aigc.registry import Registry
from aigc.registry.safeload import UnsafeWeights
from aigc.train import distributed as D
from aigc.train import loop
from aigc.train.artifacts import training_run_prefix
from aigc.workloads import workload_of
from tests.training_fixtures import DATE, image_workload, tiny_config

SOLO = D.Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"), backend=None)
MODEL = "shapes-cvae"


def train(lake, cfg, run_id="20261120T000000000000Z-warm01"):
    torch.set_num_threads(1)
    return loop.train_rank(lake, DATE, cfg, run_id, SOLO, workload_of(cfg))


@pytest.fixture
def in_production(deployed_lake):
    """The deployed template's version made production: what a nightly run finds."""
    registry = Registry(deployed_lake, MODEL)
    version = registry.versions()[-1]["version"]
    registry.move("production", version, reason="the test's production")
    return deployed_lake, registry.get(version)


def test_a_run_starts_from_production_and_keeps_its_vocabulary(in_production):
    lake, production = in_production
    summary = train(lake, tiny_config(steps=4, eval_every=4, checkpoint_every=4))
    start = summary["start"]
    assert start["version"] == production["version"] and start["weights_sha256"] == production["weights_sha256"]
    # Gate 2's yardstick is still the untrained model; production on this window is far better than it.
    assert start["val_loss"] < 0.5 * summary["initial_val_loss"]
    card = lake.get_json(join(training_run_prefix(MODEL, DATE, summary["run_id"]), "model.json"))
    production_card = lake.get_json(join(Registry(lake, MODEL).version_prefix(production["version"]), "model.json"))
    assert card["vocab"] == production_card["vocab"] and card["lineage"]["start"]["version"] == production["version"]
    # Four steps on from production's weights: close to them, not a fresh initialisation.
    weights = load_safetensors(lake.get_bytes(join(training_run_prefix(MODEL, DATE, summary["run_id"]),
                                                   "model.safetensors")))
    theirs = load_safetensors(lake.get_bytes(join(Registry(lake, MODEL).version_prefix(production["version"]),
                                                  "model.safetensors")))
    moved = max(float((weights[k] - theirs[k]).abs().max()) for k in theirs)
    assert 0 < moved < 0.1


def test_scratch_is_a_setting_and_what_a_model_without_production_gets(in_production, curated_lake):
    lake, _ = in_production
    summary = train(lake, tiny_config(steps=2, eval_every=2, checkpoint_every=2, init_from="scratch"))
    assert summary["start"] == {"version": None, "weights_sha256": None, "reason": "train.init_from is 'scratch'",
                                "val_loss": None}
    first = train(curated_lake, tiny_config(steps=2, eval_every=2, checkpoint_every=2))
    assert first["start"]["version"] is None and "no production version to start from" in first["start"]["reason"]


def test_production_of_another_shape_is_not_loaded_and_the_reason_is_kept(in_production):
    lake, production = in_production
    wider = dataclasses.replace(tiny_config(steps=2, eval_every=2, checkpoint_every=2),
                                workload=image_workload(channels=8, latent_dim=12, text_dim=16))
    summary = train(lake, wider)
    assert summary["start"]["version"] is None
    assert f"production {production['version']} does not fit: its model shape" in summary["start"]["reason"]
    assert "'latent_dim': 8" in summary["start"]["reason"] and "'latent_dim': 12" in summary["start"]["reason"]


def test_a_window_with_words_production_never_saw_starts_from_scratch(in_production):
    lake, production = in_production
    cfg = tiny_config(steps=2)
    task = workload_of(cfg).training_task(lake, _window(lake, cfg), cfg)
    card = lake.get_json(join(Registry(lake, MODEL).version_prefix(production["version"]), "model.json"))
    before = list(task.vocab.tokens)
    card["vocab"]["tokens"] = [t for t in card["vocab"]["tokens"] if t != "red"]
    assert task.adopt(card) == ("the window's captions have 1 word(s) its vocabulary lacks (red)")
    assert task.vocab.tokens == before  # left as it was: the run trains with the window's own vocabulary


def test_production_weights_that_are_not_the_recorded_bytes_are_refused(in_production):
    lake, production = in_production
    key = join(Registry(lake, MODEL).version_prefix(production["version"]), "model.safetensors")
    weights = load_safetensors(lake.get_bytes(key))
    from safetensors.torch import save

    lake.put_bytes(key, save({k: v + 1 for k, v in weights.items()}, metadata={"format": "pt"}))
    with pytest.raises(UnsafeWeights, match="hash mismatch"):
        train(lake, tiny_config(steps=2))


def test_a_retry_keeps_the_start_its_checkpoint_names_though_production_moved(in_production, monkeypatch):
    lake, production = in_production
    cfg = tiny_config(steps=4, eval_every=2, checkpoint_every=2)
    run_id = "20261120T000000000000Z-retry1"
    real_save = loop.save_checkpoint

    def save_then_die(lake_, prefix, step, state):
        real_save(lake_, prefix, step, state)
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train(lake, cfg, run_id=run_id)
    monkeypatch.setattr(loop, "save_checkpoint", real_save)
    # Meanwhile production is withdrawn (a rollback with nothing before it is refused: drop the alias by hand).
    aliases_key = join("models", MODEL, "aliases.json")
    doc = lake.get_json(aliases_key)
    doc["aliases"].pop("production")
    lake.put_json(aliases_key, doc)
    resumed = train(lake, cfg, run_id=run_id)
    assert resumed["resumed_from_step"] == 2
    assert resumed["start"]["version"] == production["version"] and resumed["start"]["val_loss"] is not None


def _window(lake, cfg):
    from aigc.train.data import load_window

    w = workload_of(cfg)
    return load_window(lake, cfg.prepare.dataset, DATE, cfg.train.window_days, w.index_columns,
                       lambda columns: w.sample_costs(columns, cfg))
