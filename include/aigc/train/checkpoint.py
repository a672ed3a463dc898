"""Checkpoints in the lake: written whole, then pointed at; loaded only as plain tensors.

``checkpoints/step-NNNNNNN.pt`` is written first, then its record ``step-NNNNNNN.json`` (step,
key, sha256), then ``checkpoints/LATEST.json`` (the same record) last, so a process killed
mid-write leaves the previous checkpoint in charge. Loading checks the hash and uses
``torch.load(weights_only=True)``: a pickle that would run code, or a file that is not what its
record says, is refused with the reason, and the previous checkpoint (the newest two are kept) is
tried instead, with a warning; only when none is valid does the run stop, naming each one and why.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import logging

import torch

from aigc.lake import Lake, ObjectNotFound
from aigc.lake.keys import join

log = logging.getLogger(__name__)
DIR = "checkpoints"
LATEST = "LATEST.json"
KEEP = 2  # the newest two: the pointer's target and the one before it


class CorruptCheckpoint(RuntimeError):
    """A checkpoint that does not match its pointer or cannot be loaded safely."""


class ResumeMismatch(RuntimeError):
    """A checkpoint made with another configuration than the run that wants to resume from it."""


def save_checkpoint(lake: Lake, run_prefix: str, step: int, state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    key = join(run_prefix, DIR, f"step-{step:07d}.pt")
    lake.put_bytes(key, data)
    pointer = {"step": step, "key": key, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
               "saved_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    lake.put_json(key.removesuffix(".pt") + ".json", pointer)
    lake.put_json(join(run_prefix, DIR, LATEST), pointer)
    for suffix in (".pt", ".json"):
        steps = sorted(k for k in lake.list(join(run_prefix, DIR)) if k.endswith(suffix) and "/step-" in k)
        for old in steps[:-KEEP]:
            lake.delete(old)
    return pointer


def load_latest(lake: Lake, run_prefix: str) -> tuple[dict, dict] | None:
    """(pointer, state) of the newest valid checkpoint of a run, or None if it has none.

    A corrupt newest checkpoint falls back to the one before it (``pointer["fell_back_from"]`` says
    which and why); CorruptCheckpoint only when none of them is valid."""
    refused: list[str] = []
    for pointer in _candidates(lake, run_prefix, refused):
        try:
            state = _load(lake, pointer)
        except CorruptCheckpoint as e:
            log.warning("%s; trying the checkpoint before it", e)
            refused.append(str(e))
            continue
        if refused:
            log.warning("resuming from %s (step %d) instead of a newer checkpoint that was refused",
                        lake.url(pointer["key"]), pointer["step"])
        return {**pointer, "fell_back_from": refused}, state
    if refused:
        raise CorruptCheckpoint(f"no valid checkpoint under {lake.url(join(run_prefix, DIR))}: {'; '.join(refused)}. "
                                "Delete that folder to train this run from step 0, or start a new run (--run-id)")
    return None


def _candidates(lake: Lake, run_prefix: str, refused: list[str]) -> list[dict]:
    """The checkpoint records, newest first: LATEST.json's, then every step record still kept."""
    records = []
    for key in [join(run_prefix, DIR, LATEST)] + sorted(
            (k for k in lake.list(join(run_prefix, DIR)) if k.endswith(".json") and "/step-" in k), reverse=True):
        try:
            record = lake.get_json(key)
            missing = [k for k in ("step", "key", "sha256") if k not in record]
        except ObjectNotFound:
            continue
        except (ValueError, TypeError) as e:
            missing = [f"valid JSON ({e})"]
        if missing:
            refused.append(f"checkpoint record {lake.url(key)} is unreadable (no {', '.join(missing)})")
        elif record["key"] not in {r["key"] for r in records}:  # LATEST.json repeats the newest step's record
            records.append(record)
    return sorted(records, key=lambda r: -r["step"])


def _load(lake: Lake, pointer: dict) -> dict:
    try:
        data = lake.get_bytes(pointer["key"])
    except ObjectNotFound:
        raise CorruptCheckpoint(f"checkpoint {lake.url(pointer['key'])} is missing") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != pointer["sha256"]:
        raise CorruptCheckpoint(f"checkpoint {lake.url(pointer['key'])} has sha256 {digest[:12]}…, its record "
                                f"expects {pointer['sha256'][:12]}…: corrupt or replaced")
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:
        raise CorruptCheckpoint(f"checkpoint {lake.url(pointer['key'])} cannot be loaded as plain tensors "
                                f"(torch.load weights_only=True): {type(e).__name__}: {e}") from e


def check_resumable(saved: dict, current: dict, where: str) -> None:
    """Settings that change what a step means must match; launch settings (nproc, nodes) may differ."""
    diffs = [f"{k}: checkpoint {saved.get(k)!r}, now {v!r}" for k, v in current.items() if saved.get(k) != v]
    if diffs:
        raise ResumeMismatch(f"cannot resume from {where}: the configuration differs ({'; '.join(diffs)}); "
                             "start a new run (another --run-id) or restore the settings")
