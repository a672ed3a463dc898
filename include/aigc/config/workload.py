"""Which workload the pipeline runs (``aigc.workloads``): a name, resolved when a stage runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NAME_PATTERN = r"^[A-Za-z_][\w.-]*(:[A-Za-z_]\w*)?$"
"""A plain name, or ``package.module:ATTRIBUTE`` (the trigger form checks the same pattern)."""
DEFAULT_SETTING = "AIGC_DEFAULT_WORKLOAD"
"""The deployment setting that names the workload to run when none is named (read by the access policy, the trigger
form and ``aigc.workloads.registry.default_workload``)."""
BUILT_IN = {"image": "aigc.workloads.image:IMAGE", "text": "aigc.workloads.text:TEXT",
            "hf-causal-lm": "aigc.workloads.hf_lm:HF_CAUSAL_LM",
            "hf-diffusion": "aigc.workloads.hf_diffusion:HF_DIFFUSION"}
"""The built-in workloads and where they live (here, not in aigc.workloads, so the access checks that run at DAG
parse time name them without importing one)."""


@dataclass(frozen=True)
class WorkloadConfig:
    name: str | None = None
    """A built-in workload (``BUILT_IN``), an entry point of the ``aigc.workloads`` group, or
    ``package.module:ATTRIBUTE``. None: the deployment's default, which the core does not choose
    (``aigc.workloads.registry.default_workload``: ``AIGC_DEFAULT_WORKLOAD``, else the built-in demo's)."""
    settings: Any = None
    """The workload's own settings: an instance of its ``settings_class`` (a frozen dataclass that checks its
    fields), set by the preset for that workload; None for a workload without settings."""

    def __post_init__(self) -> None:
        if self.name is not None and (not isinstance(self.name, str) or not re.match(NAME_PATTERN, self.name)):
            from aigc.config._checks import _where

            raise ValueError(f"WorkloadConfig.name must be a workload name (image, an entry point's name) or "
                             f"'package.module:ATTRIBUTE', got {self.name!r}{_where(self, 'name')}")
