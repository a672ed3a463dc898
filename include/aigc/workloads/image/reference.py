"""Fixed sets the evaluation measures against, the same every day.

* The checker's **reference set**: every attribute combination of the reference world (648),
  rendered ``seeds`` times each with seeded backgrounds, jitter and scale. The checker's accuracy
  on it is a property of the checker and the world, not of the day's data: it is computed once
  per (checker, world, resolution, seeds) and cached in the lake under
  ``cache/checker/<fingerprint>/``, the fingerprint a hash of the two modules' source.
* The **evaluation prompts**: every attribute combination (shuffled by the evaluation seed, cycled
  past 648), each with its own image seed. Every configuration of the Pareto grid, and production
  in the regression check, generates exactly these, so their verdicts pair up prompt by prompt.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import logging
import random
import time
from functools import cache

import numpy as np

from aigc.evaluate.stats import clopper_pearson
from aigc.lake import Lake
from aigc.lake.base import ObjectNotFound
from aigc.lake.keys import join
from aigc.workloads import world as shapes
from aigc.workloads.image import checker
from aigc.workloads.image.checker import ATTRIBUTES, read, score

log = logging.getLogger(__name__)
COMBINATIONS = list(itertools.product(shapes.COLOURS, shapes.SHAPES, shapes.SIZES, shapes.POSITIONS))
_MISREAD_EXAMPLES = 20


def reference_scenes(seeds: int) -> list[shapes.Scene]:
    """Every combination ``seeds`` times, with backgrounds, jitter and scale from a fixed seed."""
    rng = random.Random(20261201)
    scenes = []
    for _ in range(seeds):
        for colour, shape, size, position in COMBINATIONS:
            drawn = shapes.random_scene(rng)
            scenes.append(shapes.Scene(colour, shape, size, position, background=drawn.background,
                                       jitter=drawn.jitter, scale=drawn.scale))
    return scenes


def evaluation_prompts(n: int, seed: int) -> list[dict]:
    """``n`` prompts over every combination (shuffled by ``seed``), each with its own image seed."""
    order = list(COMBINATIONS)
    random.Random(seed).shuffle(order)
    prompts = []
    for i in range(n):
        colour, shape, size, position = order[i % len(order)]
        caption = shapes.Scene(colour, shape, size, position).caption
        prompts.append({"prompt_id": f"e-{i:06d}", "prompt": caption, "seed": seed * 1_000_003 + i})
    return prompts


def fingerprint(resolution: int, seeds: int) -> str:
    """Changes whenever the checker, the world or the set would: the cache key of a measurement."""
    digest = hashlib.sha256()
    for module in (checker, shapes):
        digest.update(inspect.getsource(module).encode())
    digest.update(f"{resolution}/{seeds}".encode())
    return digest.hexdigest()[:16]


def checker_reference(lake: Lake, resolution: int, seeds: int, confidence: float = 0.95) -> dict:
    """The checker's accuracy on the reference set, per attribute and all together, with intervals."""
    key = join("cache", "checker", fingerprint(resolution, seeds), f"reference-r{resolution}.json")
    try:
        measured = lake.get_json(key)
    except ObjectNotFound:
        measured = _measure(resolution, seeds)
        lake.put_json(key, measured)
    n = measured["scenes"]
    return {**measured, "uri": lake.url(key), "confidence": confidence,
            "accuracy": {a: clopper_pearson(right, n, confidence).to_dict()
                         for a, right in measured["correct"].items()}}


@cache
def _measure(resolution: int, seeds: int) -> dict:
    """Render and read every reference scene (≈ 10 s for 2 592 at 32 px); memoised per process."""
    started = time.perf_counter()
    scenes = reference_scenes(seeds)
    correct = dict.fromkeys((*ATTRIBUTES, "all"), 0)
    misread = []
    for scene in scenes:
        expected = {"colour": scene.colour, "shape": scene.shape, "size": scene.size, "position": scene.position}
        reading = read(np.asarray(shapes.render(scene, resolution)))
        verdict = score(expected, reading)
        for a, ok in verdict.items():
            correct[a] += ok
        correct["all"] += all(verdict.values())
        if not all(verdict.values()) and len(misread) < _MISREAD_EXAMPLES:
            misread.append({"caption": scene.caption, "read": reading.attributes, "scale": round(scene.scale, 3),
                            "jitter": [round(j, 3) for j in scene.jitter]})
    seconds = time.perf_counter() - started
    log.info("checker reference set: %d scenes at %d px, %d all-attributes correct (%.2f s)",
             len(scenes), resolution, correct["all"], seconds)
    return {"scenes": len(scenes), "resolution": resolution, "seeds": seeds, "correct": correct,
            "misread": misread, "seconds": round(seconds, 2)}
