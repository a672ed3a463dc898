"""The seed's two memory-leak patterns, checked on the tasks that repeat in one worker process: memory a task keeps
after it ends (on a GPU, cached blocks never released; here the tensors still alive and the process's resident
memory) and workers it leaves behind (threads, child processes). Many generation shards, then many training runs,
one after another in this process: after the first has warmed what is cached on purpose, nothing grows."""

from __future__ import annotations

import gc
import threading

import psutil
import torch

from aigc.generate import run as gen_run
from aigc.workloads.image import IMAGE
from tests.training_fixtures import DATE, tiny_config
from tests.unit.generate.test_generate import config
from tests.unit.train.test_loop import train

MIB = 1 << 20


def live_tensors() -> int:
    gc.collect()
    return sum(issubclass(type(o), torch.Tensor) for o in gc.get_objects())  # type(): no proxy's __class__


def leftovers() -> tuple[set[str], set[int]]:
    """This process's threads (by name) and child processes (by pid)."""
    return {t.name for t in threading.enumerate()}, {p.pid for p in psutil.Process().children(recursive=True)}


def test_twelve_generation_shards_in_one_worker_keep_no_tensor_thread_or_process(deployed_lake):
    cfg = config(prompts=96, blocked_prompts=0, shards=12)
    plan = gen_run.plan_generation(deployed_lake, DATE, cfg, IMAGE, demo_prompts=True)
    before = leftovers()
    tensors, resident = [], []
    for shard in plan["shards"]:
        assert gen_run.generate_shard(deployed_lake, plan, shard, cfg, IMAGE)["generated"] == 8
        tensors.append(live_tensors())
        resident.append(psutil.Process().memory_info().rss)
    assert tensors[2:] == [tensors[2]] * 10, tensors  # each shard ends holding what the one before it did
    assert max(resident[2:]) - resident[2] < 64 * MIB, [r // MIB for r in resident]
    assert leftovers() == before


def test_six_training_runs_in_one_process_keep_no_tensor_thread_or_process(curated_lake):
    cfg = tiny_config(steps=6, eval_every=6, checkpoint_every=6)
    before = leftovers()
    tensors = []
    for run in range(6):
        assert train(curated_lake, cfg, run_id=f"20261120T000000000000Z-leak{run:02d}")["steps"] == 6
        tensors.append(live_tensors())
    assert tensors[2:] == [tensors[2]] * 4, tensors
    assert leftovers() == before  # the prefetch thread and the loaders of every run joined
