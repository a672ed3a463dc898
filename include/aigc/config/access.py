"""What a trigger may ask for: the lake roots, workloads and resource sizes the deployment allows.

Airflow separates who may deploy code from who may trigger a DAG. A trigger (the form, the REST API, an asset
event's ``params``) only picks among what the operator allowed; the operator sets the limits where triggers cannot
reach them, in the workers' environment or ``airflow.cfg``:

    AIGC_ALLOWED_ROOTS        comma-separated folders and s3://bucket/prefix a raw drop or prompt file may come
                              from (the lake, AIGC_LAKE_URI, is always one); a value matches a root when it is the
                              root or below it, compared after normalisation (a folder's real path, no . or ..)
    AIGC_ALLOWED_WORKLOADS    comma-separated workload names a trigger may run (default: the built-in ones), and
                              always AIGC_DEFAULT_WORKLOAD; a user's entry point or package.module:ATTRIBUTE only
                              when listed: a name from a trigger reaches importlib only if the operator listed it
    AIGC_MAX_<FIELD>          the largest value a trigger may set for a resource field (AIGC_MAX_PREPARE_PARTS,
                              AIGC_MAX_NNODES, …: ``DEFAULT_BOUNDS`` lists them and their defaults)

(``[aigc] allowed_roots``, ``allowed_workloads``, ``max_<field>`` in ``airflow.cfg`` take precedence: the Airflow
glue reads them.) ``check_request`` is the one validation path: the Airflow tasks run it on every run's values,
the form's and an asset event's alike, before anything is read or written, and the CLI runs it with the operator's
policy (``AccessPolicy.operator``: the local user is the operator, so no allow-list applies there). This module
imports nothing heavy: the DAG files build their forms from it at parse time.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlsplit

from aigc.config import PRESETS
from aigc.config.form import BY_PARAM, SETTINGS, FormField
from aigc.config.workload import BUILT_IN, DEFAULT_SETTING, NAME_PATTERN

ROOTS, WORKLOADS = "AIGC_ALLOWED_ROOTS", "AIGC_ALLOWED_WORKLOADS"
URI_FIELDS = ("raw_uri", "prompts_uri")
DEFAULT_BOUNDS: Mapping[str, int] = {
    "n_records": 1_000_000, "prepare_parts": 64, "train_steps": 100_000, "window_days": 92, "nproc": 8,
    "nnodes": 4, "prompts": 100_000, "generate_shards": 64, "eval_prompts": 20_000,
}
"""A trigger's largest value for each resource field; the form's own maximum where it is lower."""


def bound_setting(param: str) -> str:
    return f"AIGC_MAX_{param.upper()}"


class Refused(ValueError):
    """A trigger asked for something the deployment does not allow (or a malformed value): nothing was run."""

    def __init__(self, param: str, value: Any, why: str):
        self.param, self.value = param, value
        super().__init__(f"{param!r} = {value!r} is refused: {why}")


@dataclass(frozen=True)
class AccessPolicy:
    roots: tuple[str, ...] | None
    """Normalised roots (see ``normalise_uri``); None: any (the operator at the CLI)."""
    workloads: tuple[str, ...] | None
    """Names a trigger may run; None: any."""
    bounds: Mapping[str, int] = field(default_factory=dict)
    """Largest value per form field (absent: only the form's own bounds)."""
    who: str = "this deployment"
    lake: str | None = None
    """The lake's normalised root: the only root a prompt file may come from (it is read as a lake key)."""

    @classmethod
    def deployment(cls, lake_uri: str, setting: Callable[[str], str | None] = os.environ.get) -> AccessPolicy:
        """The deployment's limits: ``setting(NAME)`` reads each (the environment by default); the lake is always an
        allowed root. A malformed setting is a ValueError naming it: a deployment must not start half-open."""
        lake = lake_uri if "://" in lake_uri else os.path.abspath(lake_uri)  # a lake in the working folder
        roots = [lake, *_listed(setting(ROOTS))]
        try:
            normalised = tuple(dict.fromkeys(normalise_uri(r) for r in roots))
        except Refused as e:
            raise ValueError(f"{ROOTS}: {e}") from None
        # The deployment's default workload is the operator's choice too: the form proposes it.
        default_workload = _listed(setting(DEFAULT_SETTING))
        workloads = tuple(dict.fromkeys([*(_listed(setting(WORKLOADS)) or BUILT_IN), *default_workload]))
        bad = [w for w in workloads if not re.match(NAME_PATTERN, w)]
        if bad:
            raise ValueError(f"{WORKLOADS}: {bad} are not workload names (a name or package.module:ATTRIBUTE)")
        bounds = {}
        for param, default in DEFAULT_BOUNDS.items():
            raw = setting(bound_setting(param))
            try:
                bounds[param] = int(raw) if raw not in (None, "") else default
            except ValueError:
                raise ValueError(f"{bound_setting(param)} must be a whole number, got {raw!r}") from None
        return cls(normalised, workloads, bounds, lake=normalised[0])

    @classmethod
    def operator(cls) -> AccessPolicy:
        """The CLI's: whoever runs ``aigc`` on a worker is the operator, and may name any root or workload."""
        return cls(None, None, {}, who="the operator (the aigc CLI applies no deployment allow-list)")

    def maximum(self, f: FormField) -> float | None:
        """The largest value a trigger may set for ``f``: the form's and the deployment's bound, whichever is lower."""
        limits = [x for x in (f.maximum, self.bounds.get(f.param)) if x is not None]
        return min(limits) if limits else None

    def allows_uri(self, uri: str) -> bool:
        if self.roots is None:
            return True
        value = normalise_uri(uri)
        return any(value == r or value.startswith(r.rstrip("/") + "/") for r in self.roots)


def _listed(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").replace("\n", ",").split(",") if v.strip()]


def normalise_uri(uri: str) -> str:
    """``s3://bucket/prefix`` without a trailing slash, or a folder's real path (links resolved, so a link inside an
    allowed root cannot lead out of it). Refused: other schemes, relative folders, ``.``/``..`` segments in S3."""
    if not isinstance(uri, str) or not uri:
        raise Refused("uri", uri, "expected a folder path, file://… or s3://bucket/prefix")
    parts = urlsplit(uri)
    if parts.scheme == "s3":
        segments = [s for s in parts.path.split("/") if s]
        if not parts.netloc or any(s in (".", "..") for s in segments) or parts.query or parts.fragment:
            raise Refused("uri", uri, "an S3 URI is s3://bucket/prefix, with no '.' or '..' segment")
        return f"s3://{parts.netloc}" + "".join(f"/{s}" for s in segments)
    if parts.scheme == "file":
        path = unquote(parts.path)
    elif not parts.scheme or len(parts.scheme) == 1:
        path = uri
    else:
        raise Refused("uri", uri, f"unsupported scheme {parts.scheme!r}: use a folder, file://… or s3://…")
    if not os.path.isabs(path):
        raise Refused("uri", uri, "a folder must be an absolute path (a worker's working folder is nobody's choice)")
    try:
        return os.path.realpath(path)
    except ValueError as e:  # an embedded NUL byte
        raise Refused("uri", uri, str(e)) from None


def check_request(values: Mapping[str, Any], policy: AccessPolicy) -> dict[str, Any]:
    """``values`` (a run's form values: the form's, the REST API's, an asset event's ``params``) checked against the
    form table's types and bounds and ``policy``'s allow-lists; Refused names the field, the value and the setting
    that would allow it. Unknown names pass through untouched (Airflow keeps a REST caller's extra conf keys; no
    stage reads them)."""
    out = dict(values)
    preset = out.get("preset")
    if preset is not None and preset not in PRESETS:
        raise Refused("preset", preset, f"choose one of {list(PRESETS)}")
    _check_workload(out.get("workload"), policy)
    _check_settings(out.get(SETTINGS), policy)
    for name, value in list(out.items()):
        f = BY_PARAM.get(name)
        if f is None or value is None:
            continue
        if f.type == "string" and value == "":  # an emptied form field: the preset's value, as before
            out[name] = None
            continue
        if f.type == "integer" and isinstance(value, float) and value.is_integer():  # JSON's 2.0 is Airflow's 2
            out[name] = value = int(value)
        _check_type(f, value)
        if f.type == "number" and not math.isfinite(value):
            raise Refused(name, value, "expected a finite number")
        top = policy.maximum(f)
        if top is not None and value > top:
            how = ("the form's own maximum" if top == f.maximum else
                   f"{policy.who}'s bound: an operator raises {bound_setting(f.param)} in the workers' environment, "
                   f"or [aigc] max_{f.param} in airflow.cfg")
            raise Refused(name, value, f"the largest value a trigger may set is {top:g} ({how})")
        if f.minimum is not None and value < f.minimum:
            raise Refused(name, value, f"the smallest allowed value is {f.minimum:g}")
        if name in URI_FIELDS:
            _check_location(name, value, policy)
    return out


MAX_SETTINGS = 64


def _check_settings(value: Any, policy: AccessPolicy) -> None:
    """The form's workload settings: a JSON object of named scalars (the workload's settings class checks each when
    the run builds its configuration; a bad one fails the run before anything is read or written). A setting named
    ``*_uri`` is a location (a base model's folder): it must be under an allowed root, as a raw URI must."""
    if value is None:
        return
    scalar = (bool, int, float, str)
    if not (isinstance(value, dict) and len(value) <= MAX_SETTINGS and all(
            isinstance(k, str) and k.isidentifier() and isinstance(v, scalar)
            and (not isinstance(v, str) or len(v) <= 1000) for k, v in value.items())):
        raise Refused(SETTINGS, value, f"a JSON object of at most {MAX_SETTINGS} of the workload's own settings, each "
                                       'a number, a boolean or a short string, e.g. {"context": 2048}')
    for name, setting in value.items():
        if name.endswith("_uri") and setting:
            if not isinstance(setting, str):
                raise Refused(f"{SETTINGS}.{name}", setting, "a location is a folder or a URI")
            _check_location(f"{SETTINGS}.{name}", setting, policy)


def _check_workload(name: Any, policy: AccessPolicy) -> None:
    if name is None:
        return
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        raise Refused("workload", name, "a workload is a name or package.module:ATTRIBUTE")
    if policy.workloads is not None and name not in policy.workloads:
        raise Refused("workload", name, f"{policy.who} allows {list(policy.workloads)}; an operator lists another "
                                        f"(an installed entry point or package.module:ATTRIBUTE) in {WORKLOADS}, or "
                                        "[aigc] allowed_workloads in airflow.cfg")


def _check_type(f: FormField, value: Any) -> None:
    kinds = {"integer": int, "number": (int, float), "string": str, "boolean": bool}
    ok = isinstance(value, kinds[f.type]) and (f.type == "boolean" or not isinstance(value, bool))
    if not ok:
        raise Refused(f.param, value, f"expected {'an' if f.type[0] in 'aeiou' else 'a'} {f.type}")
    if f.enum and value not in f.enum:
        raise Refused(f.param, value, f"choose one of {list(f.enum)}")


def _check_location(name: str, value: str, policy: AccessPolicy) -> None:
    if name == "prompts_uri" and "://" not in value and not value.startswith("/"):
        # A key in the lake: an allowed root by definition, once it cannot climb out of it.
        if any(s in (".", "..") for s in value.split("/")):
            raise Refused(name, value, "a lake key has no '.' or '..' segment")
        return
    if name == "prompts_uri" and policy.lake is not None:
        policy = replace(policy, roots=(policy.lake,), who="the lake (a prompt file is read from it)")
    try:
        allowed = policy.allows_uri(value)
    except Refused as e:
        raise Refused(name, value, str(e).split(": ", 1)[1]) from None
    if not allowed:
        raise Refused(name, value, f"it is outside the roots {policy.who} allows ({', '.join(policy.roots or ())}); "
                                   f"an operator adds a root to {ROOTS} in the workers' environment, or [aigc] "
                                   "allowed_roots in airflow.cfg")


EXTERNAL_EVENT_KEYS = frozenset({"date", "chain", "params", "prompts_key", "prompts_uri", "size", "file_version",
                                 "sha256", "claimed_at", "acknowledged_by"})
"""What an event the pipeline did not publish may say: a date, the form values a run carries on with (checked as a
form's), and a dropped prompt file in the lake (the watcher's payload). A REST client with permission to post asset
events may ask for no more than a form's user: a model version, a run or a URI of its choosing is left out."""


def check_event(extra: Mapping[str, Any], policy: AccessPolicy, *, from_pipeline: bool = False) -> dict[str, Any]:
    """An asset event's ``extra`` checked as a trigger's values are. ``from_pipeline``: a task of an aigc DAG
    published it (Airflow records the source DAG, which a REST client cannot set); otherwise only
    ``EXTERNAL_EVENT_KEYS`` are kept. Its ``params`` go through ``check_request``; the date, run id, prompt-file key
    and every ``*_uri`` it names are checked too."""
    from aigc.lake.keys import LakeKeyError, parse_date, validate_key, validate_run_id

    out = {k: v for k, v in extra.items() if from_pipeline or k in EXTERNAL_EVENT_KEYS}
    try:
        if out.get("date") is not None:
            out["date"] = parse_date(out["date"]).isoformat()
        if out.get("run_id") is not None:
            validate_run_id(out["run_id"])
        key = out.get("prompts_key")
        if key is not None and not (isinstance(key, str) and validate_key(key).startswith("prompts/")):
            raise Refused("prompts_key", key, "a dropped prompt file's key is under prompts/ in the lake")
        for name, value in out.items():
            if name.endswith("_uri") and name not in URI_FIELDS and isinstance(value, str):
                _check_location(name, value, policy)
    except Refused:
        raise
    except (LakeKeyError, ValueError, TypeError) as e:
        raise Refused("asset event", dict(extra), str(e)) from None
    params = out.get("params")
    if params is not None:
        if not isinstance(params, Mapping):
            raise Refused("params", params, "an asset event's params are an object of form values")
        out["params"] = check_request(params, policy)
    return out
