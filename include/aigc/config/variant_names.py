"""The variant names a configuration may use: a leaf module, so that the form's table and the stages' settings both
read them without importing each other.

A variant is a way to serve a version: an encoding of its weights (``VARIANTS``), and for a workload whose model
runs a number of denoising steps (``hf-diffusion``) the steps and the scheduler it serves with, named after the
encoding: ``bf16-s20`` (bf16 weights, 20 steps, the base's scheduler), ``fp32-s8-dpm`` (fp32 weights, 8 steps of
the DPM-Solver++ multistep scheduler). Such a variant stores no weights of its own: it reads its encoding's."""

from __future__ import annotations

import re

VARIANTS = ("fp32", "bf16", "pruned", "int8dyn", "onnx", "int8")
AUTO = "auto"
"""``generate.variant``: the worker's device chooses (``registry.loader.served_variant``)."""
STEPPED_KINDS = ("fp32", "bf16")
"""The encodings a variant with steps may name (the torch dtypes a diffusers pipeline runs in)."""
SCHEDULERS = ("ddim", "euler", "dpm")
"""Schedulers a variant may serve with instead of the base's: DDIM, Euler (discrete), DPM-Solver++ (multistep)."""
MAX_STEPS = 1000
_STEPPED = re.compile(rf"^({'|'.join(STEPPED_KINDS)})-s(\d{{1,4}})(?:-({'|'.join(SCHEDULERS)}))?$")


def variant_parts(name: str) -> tuple[str, int | None, str | None]:
    """(encoding, steps or None: the model's own, scheduler or None: the base's) of a variant name; ValueError for
    a name that is neither an encoding nor one with steps."""
    if name in VARIANTS:
        return name, None, None
    m = _STEPPED.match(name)
    if not m or not 1 <= int(m.group(2)) <= MAX_STEPS:
        raise ValueError(f"{name!r} is not a variant name: one of {VARIANTS}, or an encoding of {STEPPED_KINDS} with "
                         f"1 to {MAX_STEPS} inference steps and optionally a scheduler of {SCHEDULERS} "
                         "(bf16-s20, fp32-s8-dpm)")
    return m.group(1), int(m.group(2)), m.group(3)


def encoding_of(name: str) -> str:
    """The encoding whose weights a variant reads (``bf16-s20`` → ``bf16``)."""
    return variant_parts(name)[0]


def is_variant(name: str) -> bool:
    try:
        variant_parts(name)
    except ValueError:
        return False
    return True
