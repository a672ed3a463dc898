"""The workload interface: what a model and its data bring to the pipeline's core.

The core owns everything that does not depend on the model: the lake layout, leases, staging and
publication, gates, DDP under torchrun (ranks balanced by cost, gradient accumulation, mixed precision,
clipping, checkpoints a retry resumes from), the registry, the batcher, the cache and the ledger. A
workload owns what does: how a curated row costs compute, how rows become tensors, the model and its
loss. A workload is chosen by name (``aigc.workloads.registry``): ``image`` is built in, a user's comes
from an entry point of the ``aigc.workloads`` group or a ``module:attribute`` path.

Every stage runs every workload through this interface: 1 (``records``: record rules, the synthetic
drop), 2 (``training_task``), 3 (``serving`` and the variant hooks), 4 (``shard_model`` and the output
hooks) and 5 (``judge``, ``evaluation_checks``, ``write_report``). A workload lists the stages it
provides (``stages``); a stage it lacks is refused by name (``Workload.require``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import pyarrow as pa
    import torch

    from aigc.config import PipelineConfig, PrepareConfig
    from aigc.evaluate.stage import Evaluation, Judge
    from aigc.generate.engine import ShardModel
    from aigc.generate.pinned import PromptOption
    from aigc.lake import Lake
    from aigc.prepare.records import Examined
    from aigc.train.data import WindowIndex


@dataclass
class Loss:
    """A micro-batch's loss: ``total`` is what backward runs on; ``parts`` are logged per step (their names are
    the workload's ``loss_parts``), detached by the core."""

    total: torch.Tensor
    parts: dict[str, torch.Tensor] = field(default_factory=dict)


class TrainingTask(ABC):
    """One rank's view of a training run's data and model, built from the window's index on every rank.

    Everything here must be a function of the index and the configuration (every rank builds the same
    task without talking, and a resumed run rebuilds it)."""

    data_state: Any = None
    """JSON-able state the data defines for the model (a vocabulary): stored in checkpoints, and a resumed run
    is refused when the window now gives another one."""

    @abstractmethod
    def build_model(self) -> torch.nn.Module:
        """A freshly initialised model (the core seeds torch first, so every rank builds the same weights)."""

    @abstractmethod
    def batch(self, samples: np.ndarray) -> tuple[torch.Tensor, ...]:
        """The tensors of these sample indices (of the window index), on the CPU. Called in a background thread
        that builds the next batches while the model trains: read the lake and decode here."""

    @abstractmethod
    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...], *, train: bool) -> Loss:
        """The loss of ``batch`` (already on the device). ``model`` is the DDP-wrapped model when training (call
        it, not its inner module, or gradients are not synchronised) and the bare model for validation."""

    def card(self) -> dict[str, Any]:
        """Entries of the model card (``model.json``) beside the core's: what loading the weights needs."""
        return {}

    def files(self) -> dict[str, bytes]:
        """Files (plain names) that the training run keeps beside its weights, and the registry beside a version's:
        what another tool needs to load them (the hf-causal-lm workload's ``config.json`` and tokenizer files make
        both a ``save_pretrained`` folder). Their sha256 are the model card's ``loader_files``, checked when
        registered."""
        return {}

    def adopt(self, card: dict[str, Any]) -> str | None:
        """Before a warm start from a registry version (``aigc.train.warm_start``): take over what its model card
        (``card``, as ``card()`` wrote it) says the data defined, so its weights' token ids mean what they meant, and
        return None; or leave the task as it is and say why the version does not fit (another model shape, words
        its vocabulary lacks): the run then starts from scratch. The default fits when the data define nothing."""
        return None if self.data_state is None else (
            f"{type(self).__name__} defines a data state (data_state) but no adopt() to take over a version's")

    def weights(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The trained weights to register (``model.safetensors``), by the names ``Workload.serving`` loads: the
        model's state dict, unless training wraps the model (adapters merged into the base weights they adapt)."""
        return model.state_dict()

    def stats(self) -> dict[str, Any]:
        """Figures for the run's summary (shards decoded, bytes read …)."""
        return {}


class RecordRules(ABC):
    """Stage 1's rules for a workload's raw records (``aigc.prepare.records.PerRecordRules`` is the short way to
    write them). ``examine_lines`` runs in worker processes; ``deduplicator`` in the one parent, in drop order."""

    record_fields: tuple[str, ...] = ("id", "source", "created_at")
    """String fields every raw record must have (else it is quarantined as ``missing_field``)."""
    attachment_field: str | None = None
    """A record field naming an object in the drop (an image): fetched for ``examine`` and quarantined with a
    rejected record."""
    reasons: tuple[str, ...] = ()
    """The quarantine reasons the workload's own checks give (besides ``records.CORE_REASONS``)."""
    payload_columns: tuple[str, ...] = ()
    """Heavy curated columns (image bytes, long texts) that gate 1 does not load."""
    stats_columns: tuple[str, ...] = ()
    """Numeric curated columns summarised (min, max, mean) in the partition's manifest."""
    dedup_keys: tuple[str, ...] = ("id", "content_hash")
    """What the deduplicator reads of a row: all the parent receives of a row before keeping it."""

    @property
    @abstractmethod
    def curated_schema(self) -> pa.Schema:
        """The curated shards' Arrow schema. It has ``id``, ``content_hash``, ``source`` and ``created_at``."""

    @abstractmethod
    def examine_lines(self, lines: list, fetch_all: Callable[[list[str]], list[bytes | None]],
                      cfg: PrepareConfig) -> Examined:
        """A batch of raw lines (``aigc.prepare.drop.RawLine``) → per line a curated candidate or a rejection
        (``aigc.prepare.records.Examined``). ``fetch_all`` reads objects of the drop by key, concurrently: None for
        a missing one, an ``aigc.prepare.records.Unreadable`` for a key the lake refused (quarantine its record)."""

    @abstractmethod
    def deduplicator(self, cfg: PrepareConfig) -> Any:
        """An object whose ``check_batch(rows)`` says, per candidate (its ``dedup_keys``) in drop order, why it
        duplicates an earlier one (a ``Rejected``) or None when it is kept."""

    def expectations(self, cfg: PrepareConfig) -> list:
        """Gate 1's expectations (Great Expectations) on the curated rows (all but ``payload_columns``) beyond the
        core's (row count, unique ids and content, reconciliation, quarantine ratios)."""
        return []


class Serving(ABC):
    """A registered version's variant, loaded to generate (stage 3's smoke test and timings, stage 4)."""

    version: str
    variant: str

    @abstractmethod
    def generate(self, prompts: list[str], seeds: list[int]) -> list:
        """One output per prompt (the same prompt and seed give the same output, whatever the batch)."""

    def divergence(self, reference: Serving, prompts: list[str], seeds: list[int]) -> dict[str, Any]:
        """How far this variant's predictions are from ``reference``'s (fp32's) on the smoke prompts, beyond what
        ``Workload.measure_variant`` reads in the outputs (a language model: its next-token distributions' KL).
        Recorded in variant.json for every variant, fp32 against itself included; nothing by default."""
        return {}


class Workload(ABC):
    """A model and its data, plugged into the five stages (subclass it; see ``aigc.workloads.image``)."""

    name: ClassVar[str]
    """How users choose it: the DAG Param and the CLI's ``--workload``, the config's ``workload.name``."""
    description: ClassVar[str] = ""
    index_columns: ClassVar[tuple[str, ...]] = ()
    """Curated columns (besides ``id``) every rank reads into the training window's index; keep them small
    (captions, lengths), not the payload: payload is read by ``TrainingTask.batch``, shard by shard."""
    prompt_column: ClassVar[str | None] = None
    """The index column that holds a sample's prompt (a caption), if one does: what a reviewer's label on an output
    traces back to in the next training window (``TrainConfig.review_feedback``, ``aigc.train.feedback``)."""
    loss_parts: ClassVar[tuple[str, ...]] = ()
    """Names of the ``Loss.parts`` logged per step in ``metrics.parquet``."""
    loss_title: ClassVar[str] = "training loss"
    """The loss chart's title: what the loss measures."""
    stages: ClassVar[frozenset[str]] = frozenset({"train"})
    """The stages whose hooks this workload provides (the built-in ``image`` workload: all five)."""
    settings_class: ClassVar[type | None] = None
    """Its own settings: a frozen dataclass with defaults that checks its fields (``aigc.config._checks``), found in
    ``cfg.workload.settings``. A preset's, a form's (the "Workload settings" field, JSON) and the CLI's changes to it
    go through it, so a workload adds settings without editing the core's configuration."""
    cli_settings: ClassVar[dict[str, tuple[str, ...]]] = {}
    """Which of its settings each ``aigc`` command takes as flags (``{"train": ("hidden",)}``: ``aigc train
    --workload NAME --hidden 32``)."""
    preload_modules: ClassVar[tuple[str, ...]] = ()
    """The modules its stage hooks import when they run: an Airflow deployment imports them once, before it forks
    task processes (``aigc_airflow.preload``), so that a task does not spend seconds importing them again."""

    def config_overrides(self, preset: str) -> dict[str, dict[str, Any]]:
        """Changes to the named preset when this workload is chosen (``PipelineConfig.override`` form): its own
        model and dataset names, sizes that suit it. Applied before the user's own changes."""
        return {}

    def records(self, cfg: PipelineConfig | None) -> RecordRules:
        """Stage 1: how raw records become curated rows under ``cfg`` (None: the defaults). The rules are pickled
        to the decoding processes: keep them small (settings, not data)."""
        raise NotImplementedError(f"workload {self.name!r} has no record rules")

    def make_raw_drop(self, raw: Lake, date: str, cfg: PipelineConfig) -> dict:
        """A synthetic raw drop for ``date`` (the demo's data, and the form's "Generate a synthetic raw drop"):
        records and their attachments, then ``_SUCCESS`` (``cfg.raw``: how many, how dirty, the seed). Returns a
        summary (records, uri)."""
        raise NotImplementedError(f"workload {self.name!r} cannot write a synthetic drop: drop real data under "
                                  "the raw URI (see docs/stages/prepare.md, the raw-drop format)")

    # Stage 3: the core registers the trained weights as a version and builds the torch variants (fp32, bf16,
    # pruned: encodings of any state dict) of ``variant_kinds``; a workload measures each against fp32 on its own
    # smoke prompts and says which may serve. (The image workload overrides the build with its ONNX variants.)
    variant_kinds: ClassVar[tuple[str, ...]] = ("fp32", "bf16")
    """The variants this workload's models can be built as (others in ``deploy.variants`` are skipped)."""
    variant_steps: ClassVar[bool] = False
    """Whether its models serve with a number of denoising steps and a scheduler a variant may name (``bf16-s20``,
    ``fp32-s8-dpm``: ``aigc.config.variant_names``): a diffusion pipeline's serving choices beside its precision."""

    def builds(self, variant: str) -> bool:
        """Whether ``deploy.variants``' ``variant`` is one this workload builds."""
        from aigc.config.variant_names import variant_parts

        encoding, steps, _ = variant_parts(variant)
        return encoding in self.variant_kinds and (steps is None or self.variant_steps)

    def serving(self, card: dict, variant: str, data: bytes, device: torch.device, version: str) -> Serving:
        """A version's variant from its checked bytes and model card, ready to generate."""
        raise NotImplementedError(f"workload {self.name!r} cannot load a model to serve")

    def smoke_prompts(self, n: int, seed: int) -> list[str]:
        """A fixed, seeded prompt set every variant answers for gate 3."""
        raise NotImplementedError(f"workload {self.name!r} has no smoke prompts")

    def measure_variant(self, outputs: list, baseline: list) -> dict[str, Any]:
        """What a variant's outputs are worth against fp32's on the smoke prompts (recorded in variant.json)."""
        return {}

    def variant_checks(self, entry: dict, cfg: PipelineConfig) -> dict[str, bool]:
        """Gate 3's verdicts on one variant's record (besides loading and latency): name → passed. A variant that
        fails one is not eligible to serve; fp32 must pass them all. Their bounds are the workload's own settings
        (``cfg.workload.settings``), as for every check hook here."""
        return {}

    def build_variants(self, lake: Lake, model: str, version: str, cfg: PipelineConfig) -> dict:
        from aigc.registry.torch_variants import build_torch_variants

        return build_torch_variants(lake, model, version, cfg, self)

    # Stage 4: the core plans shards, keeps the ledger (exactly once), writes each shard's rows and gates them;
    # a workload generates a shard's prompts (through the core's batcher and cache) and says what an output is.
    output_columns: ClassVar[tuple[tuple[str, str], ...]] = ()
    """The generation table's output columns, as (name, Arrow type name: binary, string, large_string, int32,
    float64), between the core's ``reason`` and ``model_version`` columns."""

    def prompt_options(self, cfg: PipelineConfig) -> dict[str, PromptOption]:
        """Per-prompt settings a prompt-file line may carry beside ``prompt_id``, ``prompt`` and ``seed`` (a text
        model's ``max_new_tokens``, ``temperature``, ``stop``), with their bounds under ``cfg``: checked when the file
        is pinned (a line with a bad one is refused, naming it), then passed on as the prompt's ``options``."""
        return {}

    def demo_prompts(self, lake: Lake, date: str, cfg: PipelineConfig, key: str) -> dict:
        """Write a demo prompt set (JSONL of prompt_id, prompt, seed) at ``key`` when no prompt file was dropped."""
        raise NotImplementedError(f"workload {self.name!r} has no demo prompts: drop a prompt file")

    def output_row(self, output: Any) -> dict[str, Any]:
        """One output of ``Serving.generate`` as its ``output_columns`` values (what the default shard model stores)."""
        raise NotImplementedError(f"workload {self.name!r} has no output_row")

    def shard_model(self, lake: Lake, plan: dict, cfg: PipelineConfig) -> ShardModel:
        """The plan's version and variant loaded for the core's shard engine (``aigc.generate.engine``: safety check,
        cache, adaptive batcher). By default ``serving`` with every prompt one unit of memory and ``output_row`` per
        output; a workload whose items differ in cost gives their lengths and a ``MemoryModel`` of its own (the text
        workload's ``DecoderMemory``), or runs its model on prepared items (token ids)."""
        from aigc.generate.engine import ShardModel, load_for_shard

        serving, device = load_for_shard(lake, plan, self.serving)
        return ShardModel.of_serving(serving, device, self.output_row)

    def gallery(self, rows: list[dict]) -> tuple[str, bytes]:
        """(file name, bytes) of a preview of some generated rows: a grid of images, a page of texts. By default
        the rows' prompts and outputs as JSON lines."""
        import json

        keep = ("prompt_id", "prompt", *(name for name, _ in self.output_columns))
        return "samples.jsonl", "".join(json.dumps({k: r.get(k) for k in keep}, default=str) + "\n"
                                        for r in rows).encode()

    def generation_checks(self, rows: Any, cfg: PipelineConfig) -> tuple[Any, list, dict]:
        """Gate 4 beyond the core's ledger checks: (the rows with columns to judge, expectations on the generated
        rows, figures for the ledger table: name → (value, maximum), e.g. ``cfg.generate_gate.max_blank_fraction``).
        ``rows`` is a pandas frame of the run's rows."""
        return rows, [], {}

    # Stage 5: the workload judges outputs (its checker) and adds its own figures, each with its interval, and names
    # gate 5's checks; the core measures the content and the grid, runs the gate, publishes and promotes (champion
    # and challenger on the paired interval of their verdicts on the same prompts).
    def score(self, prompt: str, row: dict) -> bool:
        """The checker: is this output (its ``output_columns`` values) right for its prompt? What the default
        judge (``aigc.evaluate.scored``) counts, with intervals, for the content and every configuration."""
        raise NotImplementedError(f"workload {self.name!r} has no checker (score)")

    def eval_prompts(self, n: int, seed: int) -> list[str]:
        """Fixed evaluation prompts every configuration answers (the grid and the comparison with production); the
        first ``n`` of a larger ``n`` must be the same (gate 5 extends the set when it needs more evidence)."""
        raise NotImplementedError(f"workload {self.name!r} has no evaluation prompts")

    def judge(self, lake: Lake, evaluation: Evaluation, cfg: PipelineConfig) -> Judge:
        """Stage 5's judge for one evaluation (``aigc.evaluate.stage``: the core judges the day's content and the
        grid of eligible variants × policies on the fixed evaluation prompts, recommends, compares with production,
        queues for review). By default ``score`` on every output and ``eval_prompts``; a workload with figures of
        its own (FID, perplexity, recall) or its own review order subclasses ``Judge``."""
        from aigc.evaluate.scored import ScoredJudge

        return ScoredJudge(lake, evaluation, cfg, self)

    def evaluation_checks(self, metrics: dict, cfg: PipelineConfig) -> list:
        """Gate 5's checks (``aigc.quality.evaluation.Check``) on an evaluation's metrics, against
        ``cfg.evaluate_gate`` and the workload's own settings."""
        from aigc.evaluate.scored import scored_checks

        return scored_checks(metrics, cfg.evaluate_gate)

    def write_report(self, lake: Lake, prefix: str, metrics: dict, points: list, front: list, record: dict,
                     generation: dict) -> str:
        """(Re)write the evaluation's report.html, with gate 5's verdict once ``metrics`` has it."""
        from aigc.evaluate.scored import write_scored_report

        return write_scored_report(lake, prefix, metrics, points)

    def settings(self, cfg: PipelineConfig) -> dict[str, Any]:
        """What defines its model and data beyond ``cfg.model``: a run resumes from a checkpoint only if they are
        unchanged, and a difference is named. By default its own settings (``cfg.workload.settings``) but those its
        class lists in ``gate_bounds`` (what only judges a run: a retry may change them)."""
        import dataclasses

        own = cfg.workload.settings
        if own is None:
            return {}
        judging = set(getattr(type(own), "gate_bounds", ()))
        return {"settings": {k: v for k, v in dataclasses.asdict(own).items() if k not in judging}}

    @abstractmethod
    def sample_costs(self, columns: dict[str, list], cfg: PipelineConfig) -> np.ndarray:
        """(N,) float64: the relative compute of each curated row (its ``index_columns``) under ``cfg``, which the
        core balances across ranks step by step. Make it track real time: pixels, tokens, sequence length²."""

    @abstractmethod
    def training_task(self, lake: Lake, index: WindowIndex, cfg: PipelineConfig) -> TrainingTask:
        """This rank's training task over the window ``index``."""

    def training_checks(self, summary: dict, cfg: PipelineConfig) -> list:
        """Gate 2's tables (``aigc.quality.gate.Table``) beyond the core's, on the run's stored ``_SUMMARY.json``
        (which holds what ``TrainingTask.stats`` added): e.g. a fine-tuned model against its base."""
        return []

    def require(self, stage: str) -> None:
        """Refuse a stage this workload has no hooks for yet, by name, instead of running another model's code."""
        if stage not in self.stages:
            raise NotImplementedError(
                f"workload {self.name!r} provides stage(s) {sorted(self.stages)}, not {stage!r}: it has no {stage} "
                "hooks (Workload.stages), so the stage refuses it rather than run another model's code")

    def __repr__(self) -> str:
        return f"<workload {self.name!r}>"
