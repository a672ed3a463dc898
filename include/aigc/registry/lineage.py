"""A version's lineage, link by link: raw drop → curated runs → training run → model → variants → the
generations its evaluation scored → that evaluation, and gate 5's decision; each link says whether what it
names is still in the lake (``aigc registry lineage``).

The links are read from what each step recorded (the version's record, the training card, the curated
manifests), never guessed from what happens to be in a folder, so a missing object shows as a broken link.
"""

from __future__ import annotations

import hashlib
import json

from aigc.lake import Lake, ObjectNotFound
from aigc.lake.keys import join, partition, run_prefix
from aigc.lake.refs import holders
from aigc.prepare.delivery import SNAPSHOT
from aigc.registry.store import Registry


def _link(lake: Lake, kind: str, key: str, expect: str, **facts) -> dict:
    """One link: what it names (``key``, a folder or an object) and whether ``expect`` (an object inside it, or
    the object itself when empty) is there."""
    target = join(key, expect) if expect else key
    present = lake.exists(target)
    return {"link": kind, "uri": lake.url(key), "present": present, "kept_by": holders(lake, key) if expect else [],
            **facts, **({} if present else {"missing": lake.url(target)})}


def lineage(lake: Lake, model: str, ref: str) -> dict:
    """Every link of ``ref``'s (a version or an alias) lineage, in pipeline order; ``complete`` if none is missing."""
    registry = Registry(lake, model)
    record = registry.get(ref)
    version, version_prefix = record["version"], registry.version_prefix(record["version"])
    links = []
    card = record.get("lineage") or {}
    for part in card.get("curated", []):
        run = run_prefix(partition("curated", card["dataset"], part["date"]), part["run_id"])
        links += _curated_links(lake, run, part)
    # From the ids the card recorded, not the URI: a lake copied or reached through another endpoint keeps its keys.
    training = run_prefix(partition("training", model, record["date"]), card.get("training_run") or "missing")
    links.append(_link(lake, "training run", training, "_SUMMARY.json"))
    links.append(_link(lake, "model", version_prefix, "version.json", weights_sha256=record["weights_sha256"],
                       verified=_verified(lake, join(version_prefix, "model.safetensors"), record["weights_sha256"])))
    for name in sorted(record.get("variants") or {}):
        links.append(_link(lake, f"variant {name}", join(version_prefix, "variants", name), "variant.json"))
    evaluation = record.get("evaluation")
    if evaluation:
        links.append(_link(lake, "generations (evaluation set)", evaluation["generation_run"], "_MANIFEST.json"))
        links.append(_link(lake, "evaluation", evaluation["run"], "metrics.json", date=evaluation["date"]))
    decisions = [d for d in registry.aliases().get("decisions", []) if d["version"] == version]
    missing = [link["link"] for link in links if not link["present"] or link.get("verified") is False]
    return {"model": model, "version": version, "aliases": [a for a, v in registry.aliases()["aliases"].items()
                                                             if v == version],
            "links": links, "decisions": decisions, "evaluated": evaluation is not None,
            "complete": not missing, "missing": missing}


def _curated_links(lake: Lake, run: str, part: dict) -> list[dict]:
    """The raw drop a curated run recorded (its snapshot), then the curated run, its manifest checked against the
    hash the training run took of it."""
    manifest_key = join(run, "_manifest.json")
    try:
        raw = lake.get_bytes(manifest_key)
    except ObjectNotFound:
        return [_link(lake, f"curated run {part['date']}", run, "_manifest.json")]
    manifest = json.loads(raw)
    drop = manifest.get("drop") or {}
    snapshot = join(run, SNAPSHOT)
    present = bool(drop) and lake.exists(snapshot)
    raw_link = {"link": f"raw drop {part['date']}", "uri": manifest.get("raw"), "present": present,
                "digest": drop.get("digest"), "objects": drop.get("objects"), "snapshot": lake.url(snapshot),
                **({} if present else {"missing": lake.url(snapshot) if drop else "the curated run recorded no "
                                       "snapshot of its drop (prepared before snapshots were kept)"})}
    same = hashlib.sha256(raw).hexdigest() == part.get("manifest_sha256")
    return [raw_link, _link(lake, f"curated run {part['date']}", run, "_manifest.json", rows=manifest.get("rows"),
                            verified=same if part.get("manifest_sha256") else None)]


def _verified(lake: Lake, key: str, sha256: str) -> bool | None:
    try:
        return lake.digest(key)[0] == sha256  # streamed: a large model's weights are never held whole
    except ObjectNotFound:
        return False
