"""Where a user changes a setting: the trigger forms' fields, the CLI's flags, the config's fields.

``FORM`` is the one table of trigger-form fields: each field's stage, form section, type and bounds,
and the configuration field it sets (``None``: a run switch, read by the DAG itself). The Airflow
glue builds every stage DAG's Params from it (each DAG shows only its own stages' fields) and
applies a run's values to the typed config with it; ``how_to_set`` turns a configuration field into
the words a failure message needs ("the trigger form's 'min_alignment', or --min-alignment on aigc
evaluate"). This module imports nothing: the DAG files read it at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aigc.config.review_names import REVIEW_FEEDBACK, REVIEW_SELECTIONS
from aigc.config.variant_names import AUTO, VARIANTS

STAGES = ("prepare", "train", "deploy", "generate", "evaluate")
DATA, TRAINING, SERVING, GATES = "Data", "Training", "Deployment and generation", "Quality gates"


@dataclass(frozen=True)
class FormField:
    """One field of a trigger form. An empty value (``None``) means "the preset's value"."""

    param: str
    title: str
    stage: str
    """The stage whose DAG shows the field (``aigc_pipeline`` shows every stage's)."""
    type: str
    """JSON-schema type of a set value: integer, number, string or boolean."""
    config: tuple[str, str] | None = None
    """(section, field) of PipelineConfig the value sets; None for a switch the DAG reads itself."""
    section: str | None = None
    """The form's collapsible group (None: shown at the top)."""
    description: str = ""
    minimum: float | None = None
    maximum: float | None = None
    enum: tuple[Any, ...] | None = None
    """Allowed set values (the empty choice is added for config fields)."""
    default: Any = None
    """For switches only; a config field's default is the preset's."""
    empty: str = "(the preset's value)"
    """What an empty choice means, shown in the form instead of a bare "null"."""
    in_all_stages: bool = True
    """Shown by aigc_pipeline too (False: a stage DAG's own switch, meaningless when every stage runs)."""


FORM: tuple[FormField, ...] = (
    FormField("drop", "Raw drop", "prepare", "string", ("raw", "drop"), DATA, enum=("producer", "synthetic"),
              description="producer: wait for a producer's drop (its _SUCCESS marker) under the raw URI and only "
                          "read it. synthetic: write a demo drop for this date under <lake>/raw/_synthetic/ "
                          "first, and prepare that.",
              empty="(the preset's: synthetic in demo and smoke, else the producer's)"),
    FormField("raw_uri", "Raw drop root URI", "prepare", "string", section=DATA,
              description="Where producers' drops land, e.g. s3://bucket/raw/<source>. Empty: <lake>/raw/<source>. "
                          "Read only; not used for a synthetic drop."),
    FormField("n_records", "Synthetic records", "prepare", "integer", ("raw", "n"), DATA, minimum=1,
              maximum=5_000_000, description="Records in the synthetic drop (empty: the preset's)."),
    FormField("dirt_rate", "Dirt rate", "prepare", "number", ("raw", "dirt_rate"), DATA, minimum=0, maximum=1,
              description="Fraction of synthetic records with planted defects (empty: the preset's)."),
    FormField("near_dup_threshold", "Near-duplicate similarity threshold", "prepare", "number",
              ("prepare", "near_dup_threshold"), DATA, minimum=0.05, maximum=1,
              description="Caption Jaccard similarity above which records are near duplicates."),
    FormField("prepare_parts", "Preparation parts", "prepare", "integer", ("prepare", "parts"), DATA, minimum=1,
              maximum=4096, description="Mapped prepare_part tasks the drop is cut into (one per Celery worker on a "
                                        "cluster); the curated rows are the same for every value."),
    FormField("min_rows", "Gate 1: minimum curated rows", "prepare", "integer", ("curated_gate", "min_rows"), GATES,
              minimum=0),
    FormField("max_quarantine_ratio", "Gate 1: maximum quarantined fraction", "prepare", "number",
              ("curated_gate", "max_quarantine_ratio"), GATES, minimum=0, maximum=1),
    FormField("train_steps", "Training steps", "train", "integer", ("train", "steps"), TRAINING, minimum=1,
              maximum=1_000_000, description="Optimizer steps (empty: the preset's)."),
    FormField("window_days", "Training window (days)", "train", "integer", ("train", "window_days"), TRAINING,
              minimum=1, maximum=366,
              description="Curated partitions read: the run's date and the days before it that have one."),
    FormField("nproc", "Training processes per node", "train", "integer", ("train", "nproc"), TRAINING, minimum=0,
              maximum=64, description="torchrun --nproc-per-node: 0 for one per visible GPU (2 on a host without "
                                      "GPUs)."),
    FormField("nnodes", "Training nodes", "train", "integer", ("train", "nnodes"), TRAINING, minimum=1, maximum=64,
              description="Hosts training together: node 0 is the train task, the others mapped train_node tasks "
                          "on other workers, meeting through the lake (the gpu pool needs a slot per node)."),
    FormField("init_from", "Start training from", "train", "string", ("train", "init_from"), TRAINING,
              enum=("production", "scratch"),
              description="production: the registry's production weights, trained on the new window (scratch "
                          "when there is none, or it does not fit). scratch: freshly initialised weights."),
    FormField("precision", "Training precision", "train", "string", ("train", "precision"), TRAINING,
              enum=("auto", "fp32", "bf16", "fp16"), description="auto: bf16 on a GPU that has it, else fp32."),
    FormField("review_feedback", "Reviewers' labels in training", "train", "string", ("train", "review_feedback"),
              TRAINING, enum=REVIEW_FEEDBACK,
              description="What labels of earlier evaluations do to the window: upweight the samples of prompts "
                          "reviewers judged wrong (train.review_upweight times), drop them, or off."),
    FormField("max_final_val_loss", "Gate 2: maximum final validation loss", "train", "number",
              ("train_gate", "max_final_val_loss"), GATES, minimum=0),
    FormField("model_ref", "Model (alias)", "generate", "string", ("generate", "model_ref"), SERVING,
              enum=("candidate", "production"),
              description="production: content for users, published after gate 4. candidate: for evaluation "
                          "(aigc_evaluate judges it, then publishes). Empty: the deployed version after a "
                          "deployment, production for a dropped prompt file or a run started by hand.",
              empty="(by trigger: the deployed version, else production)", in_all_stages=False),
    FormField("prompts_uri", "Prompt file URI", "generate", "string", section=SERVING,
              description="A JSONL prompt file in the lake (prompts/<dataset>/dt=<date>/prompts.jsonl or any "
                          "key or URI under the lake). Empty: the date's dropped file, else a demo set."),
    FormField("variant", "Generation variant", "generate", "string", ("generate", "variant"), SERVING,
              enum=(AUTO, *VARIANTS),
              description="A variant that passed gate 3 (empty: the preset's, auto); auto: what stage 5 recommended "
                          "for the worker's device class, else on a CUDA worker the fastest that gate 3 passed and "
                          "timed on a GPU, else bf16 there where gate 3 passed it, else fp32."),
    FormField("prompts", "Demo prompts", "generate", "integer", ("generate", "prompts"), SERVING, minimum=1,
              maximum=1_000_000, description="Held-out captions to generate for when no prompt file was dropped."),
    FormField("generate_shards", "Generation shards", "generate", "integer", ("generate", "shards"), SERVING,
              minimum=1, maximum=256, description="Mapped generate_shard tasks."),
    FormField("budget_fraction", "Memory budget fraction", "generate", "number", ("batching", "budget_fraction"),
              SERVING, minimum=0.01, maximum=1, description="Of free device memory, per batch."),
    FormField("budget_mb", "Memory budget (MiB)", "generate", "integer", ("batching", "budget_mb"), SERVING,
              minimum=0, description="A fixed per-batch budget instead of the probe's fraction."),
    FormField("eval_prompts", "Gate 5: evaluation prompts", "evaluate", "integer", ("evaluate", "eval_prompts"),
              GATES, minimum=1, maximum=1_000_000,
              description="Prompts every configuration generates for the Pareto grid and the regression check "
                          "(648: every attribute combination once); more narrows the intervals."),
    FormField("review_selection", "Review queue", "evaluate", "string", ("evaluate", "review_selection"), GATES,
              enum=REVIEW_SELECTIONS,
              description="uncertain: the outputs the judge is least sure of (active learning); random: as many "
                          "drawn at random (the baseline bench/review_loop.py measures it against)."),
    FormField("min_alignment", "Gate 5: minimum alignment", "evaluate", "number", ("evaluate_gate", "min_alignment"),
              GATES, minimum=0, maximum=1,
              description="All-attributes-correct fraction; fails only when significantly below."),
    FormField("max_regression", "Gate 5: maximum regression against production", "evaluate", "number",
              ("evaluate_gate", "max_regression"), GATES, minimum=0, maximum=1,
              description="Alignment points the candidate may lose to production on the same prompts and seeds; "
                          "fails only when the loss is significantly larger."),
)
BY_PARAM = {f.param: f for f in FORM}

# Trigger-form params → config fields (the table's config fields, for the glue and the messages).
FORM_FIELDS: dict[str, tuple[str, str]] = {f.param: f.config for f in FORM if f.config}


def fields_of(stages: tuple[str, ...] | list[str]) -> list[FormField]:
    """The form fields a DAG running ``stages`` shows, in the table's order."""
    unknown = set(stages) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown stage(s) {sorted(unknown)}; known: {list(STAGES)}")
    every = set(stages) == set(STAGES)
    return [f for f in FORM if f.stage in stages and (f.in_all_stages or not every)]


SETTINGS = "settings"
"""The form field (every DAG's) holding the chosen workload's own settings as a JSON object (``cfg.workload.settings``):
a workload brings settings without a field of its own in this table."""


def config_changes(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A run's form values → PipelineConfig.override changes (empty values and switches left out)."""
    changes: dict[str, dict[str, Any]] = {}
    if values.get(SETTINGS):
        changes["workload"] = {"settings": dict(values[SETTINGS])}
    for param, value in values.items():
        field = BY_PARAM.get(param)
        if field is None or field.config is None or value is None:
            continue
        section, name = field.config
        changes.setdefault(section, {})[name] = value
    return changes


# The configuration classes by section (names, so this module imports nothing).
SECTIONS = {"WorkloadConfig": "workload", "RawDropConfig": "raw", "PrepareConfig": "prepare",
            "CuratedGateThresholds": "curated_gate", "ModelConfig": "model", "TrainConfig": "train",
            "TrainingGateThresholds": "train_gate", "DeployConfig": "deploy", "DeployGateThresholds": "deploy_gate",
            "BatchingConfig": "batching", "GenerateConfig": "generate", "GenerateGateThresholds": "generate_gate",
            "EvaluateConfig": "evaluate", "EvaluationGateThresholds": "evaluate_gate", "TelemetryConfig": "telemetry"}
# The `aigc` command whose flags include a section's fields (the workload's flag is on every command).
COMMANDS = {"workload": "…", "raw": "make-raw", "prepare": "prepare", "curated_gate": "prepare", "model": "train",
            "train": "train", "train_gate": "train", "deploy": "deploy", "deploy_gate": "deploy",
            "batching": "generate", "generate": "generate", "generate_gate": "generate", "evaluate": "evaluate",
            "evaluate_gate": "evaluate", "telemetry": "train` or `aigc generate"}


def how_to_set_setting(workload: str, name: str) -> str:
    """Every place a workload's own setting ``name`` can be changed, in words."""
    return (f"--{name.replace('_', '-')} on the `aigc` commands that take it with --workload {workload}, the trigger "
            f"form's 'settings' field ({{\"{name}\": …}}), or workload.settings.{name} in a preset")


def how_to_set(section: str, name: str) -> str:
    """Every place ``section.name`` can be changed, in words."""
    form = next((param for param, field in FORM_FIELDS.items() if field == (section, name)), None)
    flag = ("--workload on any `aigc` command" if section == "workload"
            else f"--{name.replace('_', '-')} on `aigc {COMMANDS[section]}`")
    return (f"the trigger form's '{form}' field, " if form else "") + f"{flag}, or {section}.{name} in a preset"
