"""DistributedTrainOperator: torchrun from a task, its output in the task log, stopped as a whole."""

from __future__ import annotations

import subprocess

from airflow.sdk import BaseOperator

from aigc_airflow.runtime import (
    dag_run_scoped_id,
    hold_partition_or_fail,
    lake_env,
    open_task_lake,
    partition_date,
    pipeline_config,
    run_params,
)


def training_run_id(context, cfg) -> str:
    """The same id for every try of the task in one DAG run, so a retry resumes from its checkpoints."""
    return dag_run_scoped_id(context, cfg, "train")


class DistributedTrainOperator(BaseOperator):
    """Train the generator under torchrun with the run's configuration (``train`` section of the params).

    Processes per node, node count and rendezvous come from the configuration, so the same task
    runs one CPU process on a laptop, every GPU of a worker (``queue="gpu"``), or one node of several: the DAG
    maps ``train_node`` tasks over nodes 1…N-1 beside ``train`` (node 0), and they meet through the lake.
    A non-zero exit fails the task with the worker's own error line; ``on_kill`` (a timeout, a
    user marking the task failed) stops torchrun and every worker with it. Returns the summary
    of the run (a small dict: URIs and numbers) for gate 2.
    """

    ui_color = "#fde9d9"

    def __init__(self, node_rank: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.node_rank = node_rank
        """0: the task that announces the rendezvous and returns the summary gate 2 reads; 1…N-1: the mapped
        ``train_node`` tasks that join it (several nodes: the form's "Training nodes")."""
        self._proc: subprocess.Popen | None = None

    def execute(self, context) -> dict:
        from aigc.devices import processes_per_node
        from aigc.stages import TRAIN

        cfg = pipeline_config(run_params(context))  # first: refused values read and write nothing
        lake = open_task_lake()
        hold_partition_or_fail(context, lake)
        run_id = training_run_id(context, cfg)
        self.log.info("training run %s: %s process(es) per node × %s node(s), this is node %d", run_id,
                      processes_per_node(cfg.train.nproc), cfg.train.nnodes, self.node_rank)
        return TRAIN.produce(lake, partition_date(context), cfg, run_id=run_id, env=lake_env(),
                             on_line=self.log.info, on_start=self._started, node_rank=self.node_rank)

    def _started(self, proc: subprocess.Popen) -> None:
        self._proc = proc

    def on_kill(self) -> None:
        from aigc.train.launch import kill_process_group

        if self._proc is not None and self._proc.poll() is None:
            self.log.warning("stopping torchrun (process group %d) and its workers", self._proc.pid)
            kill_process_group(self._proc)
