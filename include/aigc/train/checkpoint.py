"""Checkpoints in the lake: written whole, then pointed at; loaded only as plain tensors.

``checkpoints/step-NNNNNNN.pt`` is written first and ``checkpoints/LATEST.json`` (step, key,
sha256) last, so a process killed mid-write leaves the previous checkpoint in charge. Loading
checks the hash and uses ``torch.load(weights_only=True)``: a pickle that would run code, or a
file that is not what the pointer says, is refused with the reason.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import logging

import torch

from aigc.lake import Lake
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
    lake.put_json(join(run_prefix, DIR, LATEST), pointer)
    for old in sorted(k for k in lake.list(join(run_prefix, DIR)) if k.endswith(".pt"))[:-KEEP]:
        lake.delete(old)
    return pointer


def load_latest(lake: Lake, run_prefix: str) -> tuple[dict, dict] | None:
    """(pointer, state) of the newest checkpoint of a run, or None if it has none."""
    pointer_key = join(run_prefix, DIR, LATEST)
    if not lake.exists(pointer_key):
        return None
    pointer = lake.get_json(pointer_key)
    data = lake.get_bytes(pointer["key"])
    digest = hashlib.sha256(data).hexdigest()
    if digest != pointer["sha256"]:
        raise CorruptCheckpoint(f"checkpoint {lake.url(pointer['key'])} has sha256 {digest[:12]}…, its pointer "
                                f"{lake.url(pointer_key)} expects {pointer['sha256'][:12]}…: corrupt or replaced")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:
        raise CorruptCheckpoint(f"checkpoint {lake.url(pointer['key'])} cannot be loaded as plain tensors "
                                f"(torch.load weights_only=True): {type(e).__name__}: {e}") from e
    return pointer, state


def check_resumable(saved: dict, current: dict, where: str) -> None:
    """Settings that change what a step means must match; launch settings (nproc, nodes) may differ."""
    diffs = [f"{k}: checkpoint {saved.get(k)!r}, now {v!r}" for k, v in current.items() if saved.get(k) != v]
    if diffs:
        raise ResumeMismatch(f"cannot resume from {where}: the configuration differs ({'; '.join(diffs)}); "
                             "start a new run (another --run-id) or restore the settings")
