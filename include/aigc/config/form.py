"""Where a user changes a setting: the trigger form's fields, the CLI's flags, the config's fields.

``FORM_FIELDS`` maps each field of the DAG's trigger form to the configuration field it sets (the
Airflow glue applies it); ``how_to_set`` turns a configuration field into the words a failure
message needs ("the trigger form's 'min_alignment', or --min-alignment on aigc evaluate").
"""

from __future__ import annotations

# Trigger-form params → config fields. An empty form field means "the preset's value".
FORM_FIELDS: dict[str, tuple[str, str]] = {
    "n_records": ("raw", "n"),
    "resolution": ("raw", "resolution"),
    "dirt_rate": ("raw", "dirt_rate"),
    "near_dup_threshold": ("prepare", "near_dup_threshold"),
    "min_rows": ("curated_gate", "min_rows"),
    "max_quarantine_ratio": ("curated_gate", "max_quarantine_ratio"),
    "train_steps": ("train", "steps"),
    "nproc": ("train", "nproc"),
    "precision": ("train", "precision"),
    "max_final_val_loss": ("train_gate", "max_final_val_loss"),
    "variant": ("generate", "variant"),
    "prompts": ("generate", "prompts"),
    "generate_shards": ("generate", "shards"),
    "budget_mb": ("batching", "budget_mb"),
    "budget_fraction": ("batching", "budget_fraction"),
    "eval_prompts": ("evaluate", "eval_prompts"),
    "min_alignment": ("evaluate_gate", "min_alignment"),
    "min_checker_accuracy": ("evaluate_gate", "min_checker_accuracy"),
    "max_fid": ("evaluate_gate", "max_fid"),
    "max_regression": ("evaluate_gate", "max_regression"),
}

# The configuration classes by section (names, so this module imports nothing).
SECTIONS = {"RawDropConfig": "raw", "PrepareConfig": "prepare", "CuratedGateThresholds": "curated_gate",
            "ModelConfig": "model", "TrainConfig": "train", "TrainingGateThresholds": "train_gate",
            "DeployConfig": "deploy", "DeployGateThresholds": "deploy_gate", "BatchingConfig": "batching",
            "GenerateConfig": "generate", "GenerateGateThresholds": "generate_gate", "EvaluateConfig": "evaluate",
            "EvaluationGateThresholds": "evaluate_gate"}
# The `aigc` command whose flags include a section's fields.
COMMANDS = {"raw": "make-raw", "prepare": "prepare", "curated_gate": "prepare", "model": "train", "train": "train",
            "train_gate": "train", "deploy": "deploy", "deploy_gate": "deploy", "batching": "generate",
            "generate": "generate", "generate_gate": "generate", "evaluate": "evaluate", "evaluate_gate": "evaluate"}


def how_to_set(section: str, name: str) -> str:
    """Every place ``section.name`` can be changed, in words."""
    form = next((param for param, field in FORM_FIELDS.items() if field == (section, name)), None)
    flag = f"--{name.replace('_', '-')} on `aigc {COMMANDS[section]}`"
    return (f"the trigger form's '{form}' field, " if form else "") + f"{flag}, or {section}.{name} in a preset"
