"""Training fixtures (a pytest plugin, see tests/conftest.py): a published curated partition made by the
real stage 1 (small: seconds), and a tiny configuration."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from aigc.config import PipelineConfig, PrepareConfig, RawDropConfig, TrainConfig, WorkloadConfig, preset
from aigc.lake import LocalLake
from aigc.prepare import publish_prepared
from aigc.workloads import workload_of
from aigc.workloads.image import IMAGE, prepare_image
from aigc.workloads.image.config import ImageSettings
from aigc.workloads.image.rawdrop import make_raw_drop

DATE = "2026-11-20"


def publish_day(lake, date: str, n: int = 500, seed: int = 0) -> dict:
    make_raw_drop(lake.sub("raw/shapes"), date, RawDropConfig(n=n, seed=seed, dirt_rate=0.05))
    summary = prepare_image(lake.sub("raw/shapes"), lake, date, PrepareConfig(workers=1))
    publish_prepared(lake, "shapes", date, summary["run_id"])
    return summary


@pytest.fixture(scope="session")
def curated_template(tmp_path_factory):
    """One prepared lake for the session; tests copy it rather than prepare again."""
    root = tmp_path_factory.mktemp("curated-template")
    publish_day(LocalLake(root), DATE)
    return root


def copy_of(template: Path, dest: Path) -> LocalLake:
    """A lake of one's own: a copy of a session template (tests may write; the template stays as made)."""
    shutil.copytree(template, dest)
    return LocalLake(dest)


@pytest.fixture
def curated_lake(curated_template, tmp_path):
    return copy_of(curated_template, tmp_path / "lake")


def rewrite_recorded(lake, manifest_key: str, shard_key: str, data: bytes) -> None:
    """Replace a shard and what its manifest recorded of it (size, SHA-256), as if its writer had written these
    bytes: how a test feeds a gate content a stage would never write (readers check shards against manifests)."""
    import hashlib

    lake.put_bytes(shard_key, data)
    manifest = lake.get_json(manifest_key)
    for shard in manifest["shards"]:
        if shard["key"] == shard_key:
            shard.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    lake.put_json(manifest_key, manifest)


def tiny_config(**train) -> PipelineConfig:
    """A model and a schedule small enough for a unit test (a few seconds on one core)."""
    settings = dict(steps=12, batch_size=16, warmup_steps=2, eval_every=6, checkpoint_every=6, health_every=2,
                    val_max=64, nproc=1, threads=1)
    t = dataclasses.replace(TrainConfig(), **{**settings, **train})
    # The image workload's configuration (its names, variants and stage-4 variant), with a tiny model and schedule.
    return dataclasses.replace(preset("default", IMAGE), workload=image_workload(channels=8, latent_dim=8,
                                                                                   text_dim=16), train=t)


def image_workload(**settings) -> WorkloadConfig:
    """The image workload with these of its settings (the rest its defaults)."""
    return WorkloadConfig("image", ImageSettings(**settings))


@pytest.fixture(scope="session")
def trained_template(curated_template, tmp_path_factory):
    """A lake with a published (gated) training run of a tiny model, made once per session."""
    import torch

    from aigc.quality.training import publish_trained
    from aigc.train import distributed as D
    from aigc.train.loop import train_rank

    root = tmp_path_factory.mktemp("trained-template") / "lake"
    lake = copy_of(curated_template, root)
    solo = D.Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"), backend=None)
    cfg = tiny_config(steps=30, eval_every=30, checkpoint_every=30)
    summary = train_rank(lake, DATE, cfg, "20261120T000000000000Z-model1", solo, workload_of(cfg))
    publish_trained(lake, "shapes-cvae", DATE, summary["run_id"])
    return root


@pytest.fixture
def trained_lake(trained_template, tmp_path):
    return copy_of(trained_template, tmp_path / "trained")


@pytest.fixture(scope="session")
def deployed_template(trained_template, tmp_path_factory):
    """A lake with a registered version, fp32 and bf16 variants, gate 3 passed with only fp32 eligible:
    made once per session; tests copy it (deployed_lake)."""
    from aigc.config import DeployConfig, DeployGateThresholds
    from aigc.quality.deploy import smoke_test
    from aigc.registry.deploy import register_trained
    from aigc.workloads.image.variants import build_variants

    root = tmp_path_factory.mktemp("deployed-template") / "lake"
    lake = copy_of(trained_template, root)
    version = register_trained(lake, "shapes-cvae", DATE)["version"]
    build_variants(lake, "shapes-cvae", version,
                   DeployConfig(variants="fp32,bf16", smoke_prompts=4, latency_batch=4, latency_repeats=1))
    only_fp32 = PipelineConfig(workload=image_workload(max_pixel_mae=0.0),
                               deploy_gate=DeployGateThresholds(max_latency_ms=1e6))
    smoke_test(lake, "shapes-cvae", version, only_fp32, DATE, IMAGE)
    return root


@pytest.fixture
def deployed_lake(deployed_template, tmp_path):
    """A copy of deployed_template for one test."""
    return copy_of(deployed_template, tmp_path / "deployed")


from bench.demo_model import DEMO_MODEL, install_demo_model  # noqa: E402, F401 - re-exported for the tests


@pytest.fixture(scope="session")
def demo_model_template(tmp_path_factory):
    """The shipped demo model in a lake (install_demo_model): a model of demo quality without minutes of training."""
    root = tmp_path_factory.mktemp("demo-model") / "lake"
    install_demo_model(root)
    return root
