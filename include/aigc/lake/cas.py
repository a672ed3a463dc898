"""Compare-and-swap on small JSON objects: the one loop every pointer, lease and registry record uses.

``update_json`` reads an object with its ETag, computes the next version, and writes it with
If-Match (If-None-Match when there was none); if someone wrote in between, it reads again and
re-applies the change, after a jittered pause. ``create_json`` writes an object once.

Both stamp what they write with a random ``write_token``. That is how a *replayed* write is told
apart from a lost race: when the server stored a write but its reply was lost, the client's
retry of the same conditional request is refused (412) because of the very write it repeats.
Re-reading the object and finding our own token means our write landed; anything else means
someone else's did.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections.abc import Callable
from typing import Any

from aigc.lake.base import Lake, ObjectNotFound, PreconditionFailed, json_bytes

MAX_CAS_ATTEMPTS = 20
TOKEN = "write_token"


Parse = Callable[[bytes, str], Any]


def parse_json(raw: bytes, key: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ValueError(f"{key} is not valid JSON ({e}); fix or restore it (nothing was changed)") from None


def _current(lake: Lake, key: str, parse: Parse) -> tuple[Any, str | None]:
    try:
        raw, etag = lake.get_with_etag(key)
    except ObjectNotFound:
        return None, None
    return parse(raw, lake.url(key)), etag


def _landed(lake: Lake, key: str, token: str) -> dict | None:
    """The object as stored, if it is the one we wrote (a replay of our own write was refused)."""
    doc, _ = _current(lake, key, parse_json)
    return doc if isinstance(doc, dict) and doc.get(TOKEN) == token else None


def update_json(lake: Lake, key: str, change: Callable[[dict | None], dict], *,
                attempts: int = MAX_CAS_ATTEMPTS, what: str = "update", parse: Parse = parse_json) -> dict:
    """Replace ``key`` with ``change(current)`` (``current`` is None when absent), atomically against
    other writers; returns what was written. ``change`` may raise to give up (a lease held by another);
    ``parse(raw, url)`` reads the current object (and says what is wrong with a corrupt one)."""
    for _ in range(attempts):
        current, etag = _current(lake, key, parse)
        doc = {**change(current), TOKEN: secrets.token_hex(8)}
        try:
            if etag is None:
                lake.put_if_absent(key, json_bytes(doc))
            else:
                lake.put_if_match(key, json_bytes(doc), etag)
            return doc
        except PreconditionFailed:
            if mine := _landed(lake, key, doc[TOKEN]):
                return mine
            time.sleep(random.uniform(0, 0.05))  # someone else wrote meanwhile: read again, re-apply
    raise PreconditionFailed(f"gave up on the {what} of {lake.url(key)} after {attempts} races with other writers")


def create_json(lake: Lake, key: str, doc: dict) -> dict | None:
    """Write ``key`` only if it does not exist; returns what was written, or None if someone else's
    object was there first (our own write, replayed after a lost reply, counts as ours)."""
    doc = {**doc, TOKEN: secrets.token_hex(8)}
    try:
        lake.put_if_absent(key, json_bytes(doc))
        return doc
    except PreconditionFailed:
        return _landed(lake, key, doc[TOKEN])
