"""Trigger forms built from the one table of form fields (aigc.config.form.FORM): each stage DAG shows its own."""

from __future__ import annotations

import os

from airflow.sdk import Param

from aigc.config.form import fields_of
from aigc.config.workload import NAME_PATTERN

# The form's preset when a user presses Trigger unchanged (and for scheduled and asset-triggered runs): a
# deployment sets it (a laptop: demo; a CI cluster: smoke); the full-size "default" otherwise.
DEFAULT_PRESET = os.environ.get("AIGC_DEFAULT_PRESET", "default")
# The workload a run serves when none is chosen: a deployment that runs its own model sets it.
DEFAULT_WORKLOAD = os.environ.get("AIGC_DEFAULT_WORKLOAD", "image")


def params_for(*stages: str) -> dict[str, Param]:
    """The trigger form of a DAG that runs ``stages``: the preset, then each stage's fields in the table's order."""
    params = {"preset": Param(DEFAULT_PRESET, enum=["default", "demo", "smoke"], title="Preset",
                              description="Named configuration: 'demo' is small enough for a laptop in minutes; "
                                          "'smoke' checks a deployment end to end in about one (its model is not "
                                          "meant to be good). The fields below override it."),
              "workload": Param(DEFAULT_WORKLOAD, type="string", title="Workload", pattern=NAME_PATTERN,
                                examples=sorted({DEFAULT_WORKLOAD, *_findable_workloads()}),
                                description="The model and data every stage runs: 'image' (built in), an installed "
                                            "package's entry point (group aigc.workloads), or "
                                            "'package.module:ATTRIBUTE'. A run started by another stage's asset "
                                            "carries on with that run's workload.")}
    for f in fields_of(stages):
        schema: dict = {"title": f.title, "section": f.section}
        if f.description:
            schema["description"] = f.description
        if f.minimum is not None:
            schema["minimum"] = f.minimum
        if f.maximum is not None:
            schema["maximum"] = f.maximum
        if f.type == "boolean":
            params[f.param] = Param(f.default, type="boolean", **schema)
            continue
        schema["type"] = ["null", f.type]
        if f.enum:
            schema["enum"] = [None, *f.enum]
            schema["values_display"] = {None: f.empty}  # the UI shows a bare "null" otherwise
        params[f.param] = Param(f.default, **schema)
    return params


def _findable_workloads() -> list[str]:
    """The workloads a plain name finds (built in, entry points): the form proposes them, and takes any other."""
    from aigc.workloads.registry import available

    return list(available())
