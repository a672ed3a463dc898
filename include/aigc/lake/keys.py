"""Lake keys: validation and the partitioned layout every stage shares.

A key is a relative, '/'-separated path under the lake root. Validation happens once, here,
so that no backend can be talked into writing outside its root.
"""

from __future__ import annotations

import datetime as dt
import re

MAX_KEY_BYTES = 1024  # S3's own limit on a key
# What a run id and a dataset or model name may be (readers that parse keys reuse these).
RUN_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]{0,127}$")
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class LakeKeyError(ValueError):
    """A key that could escape the lake root or that no backend can store."""


# Segments of word characters, '=', '.', '+' and '-', none of them '.' or '..': the common key
# shape, accepted by one match (keys are validated in hot loops, one per image read).
_PLAIN_KEY = re.compile(r"(?:(?!\.\.?(?:/|$))[\w=.+-]+/)*(?!\.\.?$)[\w=.+-]+")
_PLAIN_KEY_CHARS = MAX_KEY_BYTES // 4  # UTF-8 takes at most 4 bytes per character


def validate_key(key: str, *, allow_empty: bool = False) -> str:
    """Return ``key`` unchanged if it is a safe relative key, else raise LakeKeyError."""
    if isinstance(key, str) and len(key) <= _PLAIN_KEY_CHARS and _PLAIN_KEY.fullmatch(key):
        return key
    return _check_key(key, allow_empty)


def _check_key(key: str, allow_empty: bool) -> str:
    """Every rule, one by one, so a refusal names the rule it broke."""
    if not isinstance(key, str):
        raise LakeKeyError(f"lake key must be a str, got {type(key).__name__}")
    if key == "" and allow_empty:
        return key
    if not key:
        raise LakeKeyError("lake key is empty")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise LakeKeyError(f"lake key longer than {MAX_KEY_BYTES} bytes: {key[:60]!r}…")
    bad = _CONTROL.search(key)
    if bad:
        raise LakeKeyError(f"lake key {key!r} contains control character {bad.group()!r}")
    if key.startswith("/") or re.match(r"^[A-Za-z]:", key):
        raise LakeKeyError(f"lake key {key!r} is absolute; keys are relative to the lake root")
    if "\\" in key:
        raise LakeKeyError(f"lake key {key!r} contains a backslash; use '/' between segments")
    for segment in key.rstrip("/").split("/"):
        if segment == "":
            raise LakeKeyError(f"lake key {key!r} has an empty segment ('//')")
        if segment in (".", ".."):
            raise LakeKeyError(f"lake key {key!r} contains {segment!r}; keys may not traverse")
    return key


def join(*parts: str) -> str:
    """Join key segments with '/' and validate the result."""
    return validate_key("/".join(p.strip("/") for p in parts if p not in ("", None)))


def validate_name(kind: str, name: str) -> str:
    """Dataset and source names become key segments: lower-case slugs only."""
    if not NAME.match(name or ""):
        raise LakeKeyError(f"{kind} name {name!r} must match {NAME.pattern} (a lower-case slug)")
    return name


def validate_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id or ""):
        raise LakeKeyError(f"run id {run_id!r} must match {RUN_ID.pattern}")
    return run_id


def parse_date(value: str | dt.date) -> dt.date:
    """A partition date: a ``date`` or ``YYYY-MM-DD`` string, with a clear error otherwise."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise ValueError(f"date must be YYYY-MM-DD, got {value!r}") from None


def partition(stage: str, name: str, date: str | dt.date) -> str:
    """``<stage>/<name>/dt=<YYYY-MM-DD>``: one partition per stage, dataset and logical date."""
    return join(stage, validate_name("dataset", name), f"dt={parse_date(date).isoformat()}")


def run_prefix(partition_key: str, run_id: str) -> str:
    """A run's own, immutable folder inside a partition (the write-audit-publish staging area)."""
    return join(partition_key, f"run={validate_run_id(run_id)}")
