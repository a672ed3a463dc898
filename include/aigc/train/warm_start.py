"""Where a nightly run's weights start: production's (a warm start), or freshly initialised ones.

Trained from scratch every night on a three-day window, the demo's candidates were all significantly worse than
the first model (by 0.035–0.086 alignment on 648 paired prompts over six dates): each night's model saw a third of
the data for the same steps, and a nightly retraining spent its compute on models that could never be promoted
(issue 40). Starting from production's weights, a run continues the model users get on the newest window, so a
candidate is production plus one more window of training.

``train.init_from = "production"`` (the default) starts from the registry's ``production`` version when there is
one and it fits: its weights are read from the lake, checked against the hash its record holds and loaded as
safetensors (no pickle); the workload's ``TrainingTask.adopt`` takes over what production's data defined (its
vocabulary or tokenizer, so token ids mean what they meant); the weights' names and shapes must be the model's.
Whatever does not fit (no production yet, another model shape, words production never saw) starts from scratch,
and the run's summary and model card say which and why. A retry resumes its checkpoint, which names the version it
started from, so a promotion while the run was in flight does not change what the run is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from safetensors.torch import load as load_safetensors

from aigc.lake import Lake
from aigc.lake.keys import join

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Start:
    """What a run starts from: a registry version's weights, or scratch (``version`` None) with the reason."""

    version: str | None
    weights_sha256: str | None = None
    reason: str = ""
    weights: dict[str, torch.Tensor] | None = None

    def to_dict(self) -> dict:
        return {"version": self.version, "weights_sha256": self.weights_sha256, "reason": self.reason}


def choose_start(lake: Lake, model: str, init_from: str, task, pinned: dict | None = None) -> Start:
    """The start of a run of ``model`` whose task is ``task``; ``pinned``: what its checkpoint says it started from
    (a resumed run keeps it, whatever production is now). Calls ``task.adopt`` when it starts from a version."""
    from aigc.registry import Registry
    from aigc.registry.store import VersionNotFound

    if pinned is not None and pinned.get("version") is None:
        return Start(None, reason=pinned.get("reason") or "the run started from scratch")
    if pinned is None and init_from == "scratch":
        return Start(None, reason="train.init_from is 'scratch'")
    registry = Registry(lake, model)
    try:
        record = registry.get(pinned["version"] if pinned else "production")
    except VersionNotFound as e:
        if pinned:
            raise
        return Start(None, reason=f"no production version to start from ({e})")
    return _from_version(lake, registry, record, task)


def _from_version(lake: Lake, registry, record: dict, task) -> Start:
    from aigc.registry.loader import CARD, variant_key
    from aigc.registry.safeload import check_weights

    version, prefix = record["version"], registry.version_prefix(record["version"])
    card = lake.get_json(join(prefix, CARD))
    why_not = task.adopt(card)
    if why_not:
        log.info("training starts from scratch: production %s does not fit: %s", version, why_not)
        return Start(None, reason=f"production {version} does not fit: {why_not}")
    key = variant_key(prefix, "fp32")
    data = lake.get_bytes(key)
    check_weights(data, record["weights_sha256"], lake.url(key))
    return Start(version, record["weights_sha256"], f"the weights of {version}", load_safetensors(data))


def fitted(model: torch.nn.Module, start: Start) -> Start:
    """``start`` loaded into ``model`` when its weights have the model's names and shapes; else scratch, saying
    which names and shapes differ (the model stays as built)."""
    if start.weights is None:
        return start
    own = model.state_dict()
    missing, extra = sorted(set(own) - set(start.weights)), sorted(set(start.weights) - set(own))
    reshaped = sorted(k for k in set(own) & set(start.weights) if own[k].shape != start.weights[k].shape)
    if missing or extra or reshaped:
        reason = (f"the weights of {start.version} do not fit the model the workload builds (missing "
                  f"{missing[:5]}, unexpected {extra[:5]}, other shapes {reshaped[:5]})")
        log.info("training starts from scratch: %s", reason)
        return Start(None, reason=reason)
    model.load_state_dict(start.weights)
    return start
