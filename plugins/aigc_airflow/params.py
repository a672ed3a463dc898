"""Trigger forms built from the one table of form fields (aigc.config.form.FORM): each stage DAG shows its own."""

from __future__ import annotations

import re

from airflow.sdk import Param

from aigc.config import PRESETS
from aigc.config.access import AccessPolicy
from aigc.config.form import SETTINGS, fields_of
from aigc.config.workload import DEFAULT_SETTING
from aigc_airflow.runtime import access_policy, deployment_setting


def default_preset() -> str:
    """The form's preset when a user presses Trigger unchanged (and for scheduled and asset-triggered runs): a
    deployment sets it (``AIGC_DEFAULT_PRESET`` or ``[aigc] default_preset``; a laptop: demo, a CI cluster: smoke);
    the full-size "default" otherwise. Read as the form is built, like the workload's default."""
    return deployment_setting("AIGC_DEFAULT_PRESET") or "default"


def default_workload(policy: AccessPolicy | None = None) -> str:
    """The workload a run serves when none is chosen: a deployment that runs its own model sets it (the environment
    or [aigc] default_workload, read as the access policy reads it, so the form's default is always an allowed one);
    else the first the deployment allows (AIGC_ALLOWED_WORKLOADS, else the built-in ones, the image demo first)."""
    return deployment_setting(DEFAULT_SETTING) or (policy or access_policy()).workloads[0]


def params_for(*stages: str, policy: AccessPolicy | None = None) -> dict[str, Param]:
    """The trigger form of a DAG that runs ``stages``: the preset, then each stage's fields in the table's order,
    within what the deployment allows (``policy``, default the deployment's: its workloads, roots and bounds). The
    form and the REST API refuse a value outside at trigger time; every task checks again (run_params), for the
    runs asset events start."""
    policy = policy or access_policy()
    params = {"preset": Param(default_preset(), enum=list(PRESETS), title="Preset",
                              description="Named configuration: 'demo' is small enough for a laptop in minutes; "
                                          "'smoke' checks a deployment end to end in about one (its model is not "
                                          "meant to be good). The fields below override it."),
              "workload": Param(default_workload(policy), type="string", title="Workload", enum=list(policy.workloads),
                                description="The model and data every stage runs: the workloads this deployment "
                                            "allows (AIGC_ALLOWED_WORKLOADS). A run started by another stage's "
                                            "asset carries on with that run's workload."),
              SETTINGS: Param(None, type=["null", "object"], title="Workload settings",
                              description="The chosen workload's own settings, as JSON: e.g. {\"resolution\": 64, "
                                          "\"max_fid\": 0.5} for image, {\"context\": 2048} for text. Empty: "
                                          "the preset's. Its settings class checks each value.")}
    for f in fields_of(stages):
        schema: dict = {"title": f.title, "section": f.section}
        if f.description:
            schema["description"] = f.description
        if f.minimum is not None:
            schema["minimum"] = f.minimum
        if policy.maximum(f) is not None:
            schema["maximum"] = policy.maximum(f)
        if f.param == "raw_uri":
            schema["description"] = f"{f.description} Allowed roots (AIGC_ALLOWED_ROOTS): {', '.join(policy.roots)}."
            schema["pattern"] = _under_roots(policy.roots, lake_keys=False)
        elif f.param == "prompts_uri":
            schema["pattern"] = _under_roots((policy.lake,), lake_keys=True)
        if f.type == "boolean":
            params[f.param] = Param(f.default, type="boolean", **schema)
            continue
        schema["type"] = ["null", f.type]
        if f.enum:
            schema["enum"] = [None, *f.enum]
            schema["values_display"] = {None: f.empty}  # the UI shows a bare "null" otherwise
        params[f.param] = Param(f.default, **schema)
    return params


def _under_roots(roots: tuple[str, ...], lake_keys: bool) -> str:
    """A JSON-schema pattern for a value under one of ``roots`` (and, for a prompt file, a bare lake key), with no
    '.' or '..' segment: the form's first check. The tasks' (aigc.config.access) compares real paths."""
    no_dots = r"(?!.*(^|/)\.\.?(/|$))"
    forms = [r.rstrip("/") for r in roots] + [f"file://{r.rstrip('/')}" for r in roots if r.startswith("/")]
    alternatives = [_escape(r) + r"(/.*)?" for r in forms]
    if lake_keys:
        alternatives.append(r"[^/:]+(/.*)?")
    return f"^{no_dots}({'|'.join(alternatives)}|)$"  # empty: the field left empty


def _escape(text: str) -> str:
    """``re.escape`` for a pattern the browser compiles too: it escapes '-' and '/', which a JavaScript RegExp in
    unicode mode refuses outside a character class."""
    return re.sub(r"([\\.^$*+?()\[\]{}|])", r"\\\1", text)
