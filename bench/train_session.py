"""Several training runs in one torchrun launch, for the benches that compare training configurations (B3, B5).

A launch costs more than the steps these benches time: per rank, importing torch, torch._dynamo at the first
optimizer, joining the process group (about 3 s a rank, 5-20 s a launch on 2 cores, against under a second of
B3's steps). So a bench starts torchrun once for a round of runs of one world size and runs them there in turn,
alternating the configurations: each run is ``train_rank``, the function the workers of ``aigc train`` call, on
the launch's process group, with a run id of its own; the parent reads each run's summary from the lake as
``run_training`` does, and its metrics. The runs after a launch's first find the process warm (imports done);
step 1, which pays a run's own first-step costs, is left out by the benches as before.

A run marked ``solo`` is trained by rank 0 alone as a plain process (no process group, no DDP: the 1-rank
baseline at its strongest) while the other ranks wait at a barrier, which blocks without using a core.

    python -m torch.distributed.run --standalone --nproc-per-node W bench/train_session.py PLAN.json
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aigc.config import PipelineConfig
from aigc.lake import Lake
from aigc.lake.keys import join
from aigc.lake.publish import new_run_id
from aigc.stages import configuration_of
from aigc.train.artifacts import SUMMARY, training_run_prefix
from aigc.train.launch import thread_env
from aigc.workloads import workload_of


@dataclasses.dataclass(frozen=True)
class Run:
    cfg: PipelineConfig
    solo: bool = False  # rank 0 alone, no process group
    run_id: str = dataclasses.field(default_factory=new_run_id)


def alternating(items: list, rounds: range) -> list:
    """``items`` once per round, each round in its own rotated order (round r starts at item r), so that no item is
    always a launch's first run: what a bench puts in one launch."""
    return [items[(i + r) % len(items)] for r in rounds for i in range(len(items))]


def launch(lake: Lake, date: str, world: int, runs: list[Run], timeout_s: float = 1800) -> list[dict]:
    """Train ``runs`` in one torchrun launch of ``world`` ranks on this host; their summaries, in order."""
    if not runs:
        return []
    threads = {thread_env(r.cfg)["OMP_NUM_THREADS"] for r in runs}
    if len(threads) > 1 or any(r.cfg.train.nproc != (1 if r.solo else world) for r in runs):
        raise ValueError(f"one launch runs one world: every run's nproc must be {world} (1 if solo) and its "
                         f"threads alike; got {[(r.cfg.train.nproc, r.solo) for r in runs]}, threads {threads}")
    plan = {"lake": lake.uri, "date": date,
            "runs": [{"run_id": r.run_id, "solo": r.solo, "config": r.cfg.to_dict()} for r in runs]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="train-session-", delete=False) as f:
        json.dump(plan, f)
    try:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
               "--max-restarts=0", __file__, f.name]
        env = {**os.environ, **thread_env(runs[0].cfg), "PYTHONUNBUFFERED": "1"}
        code = subprocess.run(cmd, env=env, timeout=timeout_s).returncode
    finally:
        os.unlink(f.name)
    if code:
        raise RuntimeError(f"the training session of {len(runs)} run(s) on {world} rank(s) failed "
                           f"(exit status {code}); its ranks' output is above")
    return [lake.get_json(join(training_run_prefix(r.cfg.model.name, date, r.run_id), SUMMARY)) for r in runs]


def worker(plan_path: str) -> None:
    """One rank of a session: every run of the plan in turn, a barrier after each."""
    import logging

    import torch.distributed as dist

    from aigc.lake import open_lake
    from aigc.train import distributed as D
    from aigc.train.loop import train_rank

    logging.basicConfig(level=logging.WARNING)
    plan = json.loads(Path(plan_path).read_text())
    lake = open_lake(plan["lake"])
    ctx = D.init_distributed(threads=int(os.environ["OMP_NUM_THREADS"]))
    alone = dataclasses.replace(ctx, rank=0, world=1, local_rank=0, local_world=1, backend=None)
    try:
        for i, run in enumerate(plan["runs"], 1):
            cfg = configuration_of(run["config"])
            started = time.perf_counter()
            if not run["solo"]:
                train_rank(lake, plan["date"], cfg, run["run_id"], ctx, workload_of(cfg))
            elif ctx.is_main:
                train_rank(lake, plan["date"], cfg, run["run_id"], alone, workload_of(cfg))
            dist.barrier()  # rank 0 has written the run's summary; the next run starts together
            if ctx.is_main:
                who = "rank 0 alone" if run["solo"] else f"{ctx.world} ranks"
                print(f"  session run {i}/{len(plan['runs'])} ({who}): {time.perf_counter() - started:.1f} s",
                      file=sys.stderr, flush=True)
    finally:
        D.shutdown(ctx)


if __name__ == "__main__":
    worker(sys.argv[1])
