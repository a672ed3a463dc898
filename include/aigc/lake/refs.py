"""References between runs: what garbage collection must not delete because something else names it.

A registered version names the curated runs it was trained on, its training run, the evaluation that judged
it and the generation run that evaluation scored; an evaluation names the generation run it scored. Each
such name is a small object, a *reference*, under the run it names:

    refs/<partition>/run=<run_id>/<holder>.json
    e.g. refs/curated/<dataset>/dt=2026-11-28/run=…/models+<model>+v0003.json

``publish``'s garbage collection deletes a superseded or stale run only when no reference to it is left. A
holder that is itself a run (an evaluation) lists what it holds in ``<its run>/_REFS.json``; when that run is
collected, its references go with it, so what only it named becomes collectable in turn. A registered version
is never collected, so what it names is kept for good: lineage never points at nothing.
"""

from __future__ import annotations

import datetime as dt
import logging

from aigc.lake.base import Lake, ObjectNotFound
from aigc.lake.keys import join, validate_key

log = logging.getLogger(__name__)
REFS = "refs"
HELD = "_REFS.json"
"""In a run folder that holds references: the run folders it names."""


def _holder_name(holder: str) -> str:
    return validate_key(holder).replace("/", "+")


def ref_key(target: str, holder: str) -> str:
    return join(REFS, target, _holder_name(holder) + ".json")


def hold(lake: Lake, holder: str, targets: list[str], why: str) -> None:
    """``holder`` (a run folder or a registry version's key) names each of ``targets`` (run folders): none of them
    is collected while the reference stands. A run folder records what it holds first, so collecting it can
    release them."""
    targets = sorted(set(targets))
    if holder.rsplit("/", 1)[-1].startswith("run="):
        try:
            held = set(lake.get_json(join(holder, HELD)))
        except ObjectNotFound:
            held = set()
        if not set(targets) <= held:
            lake.put_json(join(holder, HELD), sorted(held | set(targets)))
    at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    for target in targets:
        lake.put_json(ref_key(target, holder), {"holder": holder, "target": target, "why": why, "at": at})


def holders(lake: Lake, target: str) -> list[str]:
    """Who names the run folder ``target`` (empty: nothing does)."""
    prefix = join(REFS, target)
    return [k[len(prefix) + 1:].removesuffix(".json").replace("+", "/") for k in lake.list(prefix)]


def release_held_by(lake: Lake, holder: str) -> None:
    """Drop every reference the run folder ``holder`` holds (it is about to be collected)."""
    try:
        targets = lake.get_json(join(holder, HELD))
    except ObjectNotFound:
        return
    for target in targets:
        lake.delete(ref_key(target, holder))
