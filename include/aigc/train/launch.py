"""Starting training: torchrun as a child process group, its output streamed, stopped as a whole.

``aigc train`` and the Airflow operator both call :func:`run_training`: it builds the torchrun
command (one node, or several by c10d rendezvous), runs it in its own session so that a kill
reaches every worker, streams the output line by line, turns the exit code into a clear error,
and reads the run's summary back from the lake.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aigc.config import PipelineConfig
from aigc.devices import processes_per_node, visible_gpus
from aigc.lake import Lake
from aigc.lake.credentials import children_credentials
from aigc.lake.keys import join, parse_date, validate_run_id
from aigc.lake.publish import new_run_id
from aigc.procs import available_cpus
from aigc.telemetry import NODE_FILE, GpuSampler
from aigc.train.artifacts import SUMMARY, training_run_prefix
from aigc.train.rendezvous import HOST_ENV, announce, await_endpoint, rendezvous_key

if TYPE_CHECKING:  # annotations only: the workload interface imports the stages' modules
    from aigc.workload import Workload

log = logging.getLogger(__name__)
RENDEZVOUS_WAIT_S = 30 * 60  # how long another node waits for node 0's task to start (a queue, a pool slot)
SUMMARY_WAIT_S = 120


class TrainingFailed(RuntimeError):
    """torchrun exited non-zero, or training ended without writing its summary."""


def torchrun_command(cfg: PipelineConfig, *, lake_uri: str, date: str, run_id: str,
                     endpoint: str | None = None) -> list[str]:
    """``endpoint``: the rendezvous found through the lake (several nodes without ``rdzv_endpoint``)."""
    t = cfg.train
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={processes_per_node(t.nproc)}",
           f"--nnodes={t.nnodes}",
           "--max-restarts=0"]  # restarts belong to the orchestrator (task retries), which resume from checkpoints
    if endpoint or t.rdzv_endpoint:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint or t.rdzv_endpoint}", f"--rdzv-id={run_id}"]
        if os.environ.get(HOST_ENV):  # the address the deployment names for this node, not whatever resolves
            cmd += [f"--local-addr={os.environ[HOST_ENV]}"]
    else:
        cmd += ["--standalone"]
    return cmd + ["-m", "aigc", "train", "--worker", "--lake", lake_uri, "--date", date, "--run-id", run_id,
                  "--config-json", json.dumps(cfg.to_dict())]


def thread_env(cfg: PipelineConfig) -> dict[str, str]:
    """OMP threads per worker: the cores shared among the local processes (torchrun would say 1). Idle OpenMP
    threads sleep rather than spin (unless the user chose otherwise): a spinning team burns a core that another
    rank on the host needs, and its spin counts as a rank's CPU time, so gate 2 read bursts of ~0.35 s of
    spinning, now on one rank and now on the other, as 50 % imbalance in 20-step runs."""
    threads = cfg.train.threads or max(1, available_cpus() // processes_per_node(cfg.train.nproc))
    return {"OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (PR_SET_PDEATHSIG).

    A task process killed with SIGKILL runs no cleanup; without this, torchrun and its workers
    would train on as orphans beside the retry that resumes the same run.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, int(sig))  # 1 = PR_SET_PDEATHSIG


def kill_process_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the whole group (torchrun forwards it to the workers), SIGKILL what is left after grace."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_training(lake: Lake, date: str | dt.date, cfg: PipelineConfig, *, run_id: str | None = None,
                 env: dict[str, str] | None = None, on_line: Callable[[str], None] | None = None,
                 on_start: Callable[[subprocess.Popen], None] | None = None, node_rank: int = 0) -> dict:
    """Train under torchrun and return the run's summary; a run id that has checkpoints resumes.

    Several nodes without ``rdzv_endpoint`` meet through the lake (``aigc.train.rendezvous``): node 0 announces
    its endpoint, ``node_rank`` > 0 waits for it, joins, and returns a short record of its part (node 0 returns
    the summary, which gate 2 reads)."""
    date = parse_date(date).isoformat()
    run_id = validate_run_id(run_id or new_run_id())
    if not 0 <= node_rank < cfg.train.max_nodes:
        raise ValueError(f"node rank {node_rank} is not one of the {cfg.train.max_nodes} node(s) of "
                         f"TrainConfig.nnodes={cfg.train.nnodes!r}")
    endpoint = None
    if cfg.train.nnodes != "1" and not cfg.train.rdzv_endpoint:
        key = rendezvous_key(cfg.model.name, date, run_id)
        endpoint = announce(lake, key, run_id) if node_rank == 0 else await_endpoint(lake, key, run_id,
                                                                                     RENDEZVOUS_WAIT_S)
        log.info("node %d: rendezvous at %s (through %s)", node_rank, endpoint, lake.url(key))
    cmd = torchrun_command(cfg, lake_uri=lake.uri, date=date, run_id=run_id, endpoint=endpoint)
    log.info("training run %s: %s", run_id, " ".join(cmd[:8]) + " …")
    on_line = on_line or (lambda line: print(line, file=sys.stderr, flush=True))
    base = {**os.environ, **thread_env(cfg), **(env or {}), "PYTHONUNBUFFERED": "1"}
    # This node's GPUs, one a worker (torchrun's local ranks 0…nproc-1 take cuda:0…), sampled from here.
    gpus = range(min(processes_per_node(cfg.train.nproc), visible_gpus()))
    sampler = GpuSampler(gpus, cfg.telemetry, what=f"training run {run_id} (node {node_rank})")
    with children_credentials(lake, base) as child_env, sampler:  # a role's credentials: never the long-lived keys
        code, tail, errors = _run_torchrun(cmd, child_env, cfg.train.timeout_s, run_id, on_line, on_start)
    prefix = training_run_prefix(cfg.model.name, date, run_id)
    summary_key = join(prefix, SUMMARY)
    if code == 0:  # what this node's GPUs did, beside the run's summary (each node its own)
        gpu = sampler.summary()
        lake.put_json(join(prefix, NODE_FILE.format(node_rank)), gpu)
    if code == 0 and node_rank:
        return {"node_rank": node_rank, "run_id": run_id, "date": date, "rendezvous": endpoint, "gpu": gpu}
    if code != 0:
        what = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        # A worker's own one-line `error:` says what went wrong; torchrun's report only says that it did.
        causes = sorted({line for line in errors}) or tail[-12:]
        raise TrainingFailed(f"torchrun for training run {run_id} failed ({what}):\n" + "\n".join(causes)
                             + f"\na retry with run id {run_id} resumes from its last checkpoint")
    # Global rank 0, which writes the summary, may live on another node that finishes a moment later.
    deadline = time.monotonic() + (SUMMARY_WAIT_S if endpoint else 0)
    while not lake.exists(summary_key):
        if time.monotonic() >= deadline:
            raise TrainingFailed(f"training run {run_id} ended without {lake.url(summary_key)}")
        time.sleep(1.0)
    return {**lake.get_json(summary_key), "gpu": gpu}


def _run_torchrun(cmd: list[str], env: dict[str, str], timeout_s: float, run_id: str, on_line: Callable[[str], None],
                  on_start: Callable[[subprocess.Popen], None] | None) -> tuple[int, list[str], list[str]]:
    """torchrun in its own session, its output streamed to ``on_line``: (exit code, last lines, ``error:`` lines)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env,
                            start_new_session=True, preexec_fn=die_with_parent)
    if on_start:
        on_start(proc)
    tail: list[str] = []
    errors: list[str] = []

    def pump() -> None:  # a thread, so that the timeout holds even while the workers print nothing
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            del tail[:-30]
            if line.startswith("error: "):
                errors.append(line)
            on_line(line)

    reader = threading.Thread(target=pump, name="torchrun-output", daemon=True)
    reader.start()
    try:
        return proc.wait(timeout=timeout_s), tail, errors
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"training run {run_id} exceeded TrainConfig.timeout_s={timeout_s}; "
                           "its workers were stopped, a retry resumes from the last checkpoint") from None
    finally:
        if proc.poll() is None:  # interrupted, timed out, or the caller was killed: leave no worker behind
            kill_process_group(proc)
        reader.join(timeout=5)


def worker_main(lake_uri: str, date: str, run_id: str, cfg: PipelineConfig, workload: Workload) -> dict | None:
    """What each torchrun worker runs (``aigc train --worker``, which resolves the workload by name)."""
    from aigc.lake import open_lake
    from aigc.train import distributed as D
    from aigc.train.loop import train_rank

    die_with_parent(signal.SIGKILL)  # torchrun gone (even by SIGKILL) → so are its workers
    if os.getppid() == 1:
        raise SystemExit("torchrun exited before this worker started")
    ctx = D.init_distributed(cfg.train.threads, timeout_s=min(cfg.train.timeout_s, 1800))
    try:
        return train_rank(open_lake(lake_uri), date, cfg, run_id, ctx, workload)
    finally:
        D.shutdown(ctx)
