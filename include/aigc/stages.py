"""One API per stage, under both the DAGs and the CLI: produce → gate → publish, on a leased date.

Each stage writes its run into a staging folder (``produce``: the stage's own functions, whose
summary names the run), its gate audits what was stored (``gate``), and only then does
``publish`` move a pointer or an alias. A DAG runs each step as its own task; ``aigc <stage>``
runs produce, then ``finish`` (gate, then publish) in one process. Both call the methods here, so
both publish the same objects at the same point under the same rules:

    prepare   gate 1 → curated partition (and its quarantine, one pointer)
    train     gate 2 → training partition (the candidate's weights for stage 3)
    deploy    gate 3 → the version's eligible variants in the registry (nothing else moves)
    generate  gate 4 → generations partition, when the model is ``production`` (content for users);
                       a candidate's run is handed to evaluation instead, which publishes it after gate 5
    evaluate  gate 5 → generations and evaluation partitions, production → the version (unless worse)

Every writer holds the date's lease (``holding_date``): one DAG run or one command at a time.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the DAG files import this module at parse time: no pyarrow or boto3 then
    from aigc.config import PipelineConfig
    from aigc.lake import Lake

log = logging.getLogger(__name__)
PRODUCTION = "production"


class DateBusy(RuntimeError):
    """Another run (a DAG run or a command) is writing the date."""


@contextlib.contextmanager
def holding_date(lake: Lake, date: dt.date | str, owner: str, ttl: dt.timedelta) -> Iterator[Callable[[], None]]:
    """Hold the date's lease for the block, renewed in the background; DateBusy (saying who holds it and until
    when) if another owner has it. A DAG run takes the same lease task by task (aigc_airflow.runtime).

    Yields a fence: call it just before publishing. It renews the lease now and raises DateBusy if another owner
    took it over meanwhile (a pause longer than the lease: the background renewal only logs its failures)."""
    from aigc.lake.lease import LeaseHeld, date_lease

    lease = date_lease(lake, date)

    def busy(e: LeaseHeld) -> DateBusy:
        return DateBusy(f"{date} is being written by {e.holder['owner']!r} (lease {lake.url(lease.key)}, until "
                        f"{e.holder['expires_at']}): try again once it has finished")

    def fence() -> None:
        try:
            lease.hold(owner, ttl)
        except LeaseHeld as e:
            raise busy(e) from None

    with contextlib.ExitStack() as held:
        try:
            held.enter_context(lease.holding(owner, ttl))
        except LeaseHeld as e:
            raise busy(e) from None
        yield fence


def configure(preset: str, workload: str | None = None) -> PipelineConfig:
    """The named preset for the workload called ``workload`` (None: the default), its own changes (and settings)
    applied first."""
    from aigc.config import preset as named
    from aigc.workloads import default_workload, load_workload

    cfg = named(preset, load_workload(workload or default_workload()))
    # the name as given (an entry point, a module path): torchrun's workers resolve it again
    return cfg.override({"workload": {"name": workload}}) if workload else cfg


def configuration_of(doc: dict[str, Any]) -> PipelineConfig:
    """A configuration written out whole (``PipelineConfig.to_dict``: a run's record, a torchrun worker's
    ``--config-json``) as the object again, its workload's settings typed by their class."""
    return configure("default", doc.get("workload", {}).get("name")).override(doc)


def _workload(cfg: PipelineConfig, stage: str):
    """The configured workload, which provides ``stage`` (else NotImplementedError naming what it provides)."""
    from aigc.workloads import workload_of

    workload = workload_of(cfg)
    workload.require(stage)
    return workload


def _require(cfg: PipelineConfig, stage: str) -> None:
    _workload(cfg, stage)


class Stage(ABC):
    """A stage's gate and publication over what its ``produce`` step wrote (``produced``: that step's summary)."""

    name: ClassVar[str]
    gate_name: ClassVar[str]

    @abstractmethod
    def gate(self, lake: Lake, cfg: PipelineConfig, produced: dict) -> dict:
        """Audit the staged run; GateFailed if it does not pass. The result names its ``result_uri``."""

    def publish(self, lake: Lake, cfg: PipelineConfig, produced: dict) -> dict | None:
        """Make the gated run visible to readers; None when this stage publishes nothing itself."""
        return None

    def finish(self, lake: Lake, cfg: PipelineConfig, produced: dict,
               fence: Callable[[], None] | None = None) -> dict:
        """Gate, then publish: the CLI's last step (a DAG runs the two as tasks, each renewing the date's lease
        first). ``fence`` (``holding_date``'s) runs between the two: a writer whose lease was taken over while it
        worked publishes nothing."""
        gated = self.gate(lake, cfg, produced)
        if fence is not None:
            fence()
        published = self.publish(lake, cfg, produced)
        return {"gate": gated["result_uri"], "gate_result": gated, "published": published is not None,
                **(published or {})}


class PrepareStage(Stage):
    name, gate_name = "prepare", "curated"

    def produce(self, raw: Lake, lake: Lake, date, cfg: PipelineConfig) -> dict:
        """The drop on this host: streamed through local processes, or with ``prepare.parts`` > 1 the fan-out's
        plan, parts and merge one after another (what the DAG runs as mapped tasks)."""
        from aigc.prepare import prepare

        workload = _workload(cfg, self.name)
        if cfg.prepare.parts > 1:
            plan = self.plan(raw, lake, date, cfg)
            for part in plan["parts"]:
                self.part(raw, lake, plan, part, cfg)
            return self.merge(raw, lake, plan, cfg)
        return prepare(raw, lake, date, cfg.prepare, rules=workload.records(cfg), workload=workload.name)

    def plan(self, raw: Lake, lake: Lake, date, cfg: PipelineConfig, run_id: str | None = None) -> dict:
        from aigc.prepare.fanout import plan_prepare

        _require(cfg, self.name)
        return plan_prepare(raw, lake, date, cfg.prepare, run_id)

    def part(self, raw: Lake, lake: Lake, plan: dict, part: dict, cfg: PipelineConfig) -> dict:
        from aigc.prepare.fanout import prepare_part

        return prepare_part(raw, lake, plan, part, cfg.prepare, _workload(cfg, self.name).records(cfg))

    def merge(self, raw: Lake, lake: Lake, plan: dict, cfg: PipelineConfig) -> dict:
        from aigc.prepare.fanout import merge_parts

        workload = _workload(cfg, self.name)
        return merge_parts(raw, lake, plan, cfg.prepare, workload.records(cfg), workload.name)

    def make_raw(self, raw: Lake, date, cfg: PipelineConfig) -> dict:
        """A synthetic raw drop of the workload's records for ``date`` (the demo's data)."""
        return _workload(cfg, self.name).make_raw_drop(raw, date, cfg)

    def gate(self, lake, cfg, produced):
        from aigc.quality.curated import validate_curated

        return validate_curated(lake, cfg.prepare.dataset, produced["date"], produced["run_id"], cfg.curated_gate,
                                cfg.prepare, _workload(cfg, self.name).records(cfg))

    def publish(self, lake, cfg, produced):
        from aigc.prepare import publish_prepared

        return publish_prepared(lake, cfg.prepare.dataset, produced["date"], produced["run_id"])


class TrainStage(Stage):
    name, gate_name = "train", "training"

    def produce(self, lake: Lake, date, cfg: PipelineConfig, **launch) -> dict:
        """torchrun on the date's window (``launch``: run_id, env, on_line, on_start of run_training)."""
        from aigc.train.launch import run_training

        return run_training(lake, date, cfg, **launch)

    def gate(self, lake, cfg, produced):
        from aigc.quality.training import validate_training

        workload = _workload(cfg, self.name)  # its own tables read the summary gate 2 reads (stored, not in memory)
        return validate_training(lake, cfg.model.name, produced["date"], produced["run_id"], cfg.train_gate,
                                 lambda summary: workload.training_checks(summary, cfg))

    def publish(self, lake, cfg, produced):
        from aigc.quality.training import publish_trained

        return publish_trained(lake, cfg.model.name, produced["date"], produced["run_id"])


class DeployStage(Stage):
    """Registering moves ``candidate`` (a version is in the registry from then on); gate 3 then records which of
    its variants may serve. Nothing else is published: a version whose gate 3 passed is deployable."""

    name, gate_name = "deploy", "deploy"

    def register(self, lake: Lake, date, cfg: PipelineConfig) -> dict:
        from aigc.registry.deploy import register_trained

        _require(cfg, self.name)
        return register_trained(lake, cfg.model.name, date)

    def build(self, lake: Lake, cfg: PipelineConfig, version: str) -> dict:
        return _workload(cfg, self.name).build_variants(lake, cfg.model.name, version, cfg)

    def gate(self, lake, cfg, produced):
        from aigc.quality.deploy import smoke_test

        return smoke_test(lake, cfg.model.name, produced["version"], cfg, str(produced["date"]),
                          _workload(cfg, self.name))


class GenerateStage(Stage):
    """Produce is plan → one ``shard`` per mapped task → ``finish_run``."""

    name, gate_name = "generate", "generate"

    def plan(self, lake: Lake, date, cfg: PipelineConfig, *, run_id: str | None = None, demo_prompts: bool = False,
             model_ref: str | None = None, prompts_key: str | None = None) -> dict:
        from aigc.generate.run import plan_generation

        return plan_generation(lake, date, cfg, _workload(cfg, self.name), run_id=run_id, demo_prompts=demo_prompts,
                               model_ref=model_ref, prompts_key=prompts_key)

    def shard(self, lake: Lake, plan: dict, shard: dict, cfg: PipelineConfig) -> dict:
        from aigc.generate.run import generate_shard

        return generate_shard(lake, plan, shard, cfg, _workload(cfg, self.name))

    def finish_run(self, lake: Lake, plan: dict, cfg: PipelineConfig) -> dict:
        from aigc.generate.run import finish_generation

        return finish_generation(lake, plan, cfg, _workload(cfg, self.name))

    @staticmethod
    def model_for(cfg: PipelineConfig, chosen: str | None, *, prompt_file: bool) -> str:
        """The model a generation started by hand uses: the one chosen; else production for a named prompt
        file (content someone asked for); else the configuration's (``candidate``: a run to evaluate)."""
        return chosen or (PRODUCTION if prompt_file else cfg.generate.model_ref)

    @staticmethod
    def publishes_content(produced: dict) -> bool:
        """Production's output is content for users once gate 4 passes (the model already passed gate 5); any
        other model's run is evaluated first, and aigc_evaluate publishes it after gate 5."""
        return produced.get("model_ref") == PRODUCTION

    def gate(self, lake, cfg, produced):
        from aigc.quality.generation import validate_generation

        return validate_generation(lake, produced, cfg, _workload(cfg, self.name))

    def publish(self, lake, cfg, produced):
        from aigc.generate.run import publish_generations

        if not self.publishes_content(produced):
            return None
        published = publish_generations(lake, cfg.model.name, produced["date"], produced["run_id"])
        return {**published, "generations_uri": published["run_uri"]}


class EvaluateStage(Stage):
    name, gate_name = "evaluate", "evaluation"

    def produce(self, lake: Lake, generation: dict, cfg: PipelineConfig, *, run_id: str,
                timings: list[dict] | None = None, time_local_gpus: bool = True) -> dict:
        """Reviewers' Label Studio exports dropped in ``review/<model>/inbox/`` since the last evaluation are
        imported first (``labelstudio.import_pending``: what ``aigc review import`` does), so this evaluation's
        agreement and gate 5 read them; then the evaluation."""
        from aigc.evaluate.labelstudio import import_pending
        from aigc.evaluate.stage import evaluate

        imported = import_pending(lake, cfg.model.name)
        evaluated = evaluate(lake, generation, cfg, run_id=run_id, workload=_workload(cfg, self.name), timings=timings,
                             time_local_gpus=time_local_gpus)
        return {**evaluated, "labels_imported": imported["labels"], "label_exports_refused": imported["refused"]}

    def time_here(self, lake: Lake, generation: dict, cfg: PipelineConfig) -> dict:
        """The version's variants timed on this worker's GPU (``produce``'s ``timings``), or why not: a timing that
        fails says so and the evaluation goes on without that class (its recommendation is advice; the CPU's and
        gate 5 do not wait on it)."""
        from aigc.evaluate.stage import time_on_this_worker

        try:
            return time_on_this_worker(lake, generation, cfg, _workload(cfg, self.name))
        except Exception as e:  # noqa: BLE001 - see the docstring
            log.warning("timing the variants on this worker failed: %s", e, exc_info=True)
            return {"device_class": None, "reason": f"the timing on this worker failed: {type(e).__name__}: {e}"}

    def gate(self, lake, cfg, produced):
        from aigc.quality.evaluation import validate_evaluation

        return validate_evaluation(lake, produced, cfg, _workload(cfg, self.name))

    def publish(self, lake, cfg, produced):
        from aigc.quality.evaluation import promote_and_publish

        return promote_and_publish(lake, produced, cfg)


PREPARE, TRAIN, DEPLOY, GENERATE, EVALUATE = (PrepareStage(), TrainStage(), DeployStage(), GenerateStage(),
                                              EvaluateStage())
STAGES: dict[str, Stage] = {s.name: s for s in (PREPARE, TRAIN, DEPLOY, GENERATE, EVALUATE)}
GATES: dict[str, Stage] = {s.gate_name: s for s in STAGES.values()}
