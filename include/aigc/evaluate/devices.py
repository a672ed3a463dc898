"""Stage 5's cost per device class: the variants timed where they will serve.

Quality is a property of a variant (the grid judges each once, on the evaluation's CPU); cost is a property of a
variant on a device. Each worker queue times the variants that serve on its device, in the task that runs there:
the evaluation times them on its CPU (the grid, ``stage.measure_grid``), the GPU queue's task
(``stage.time_on_this_worker``) on its GPU, and ``aigc evaluate`` on a GPU host times its GPUs of a class nobody
timed. ONNX
and int8dyn variants are timed on a CPU only: a GPU worker would run them on its CPU (``serving_device``), which
is the CPU queue's business. Every class's times are paired with the one quality and recommended by the same rule
(``stage.recommend_per_class``); the registry keeps ``recommended_by_device``, and generation with ``auto``
serves its worker's class's (``registry.loader.recommended_for``).

A class is ``aigc.devices.device_class``: the GPU's model, or the CPU's threads (``cpu-2-threads``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from aigc.devices import device_class, synchronizer
from aigc.registry.loader import serving_device

log = logging.getLogger(__name__)
Rounds = dict[tuple[str, str], list[float]]
clock = time.perf_counter
"""What a timing reads (a test's fake clock replaces it)."""


def serves_here(variant: str, device: torch.device) -> bool:
    """Whether ``variant`` runs on ``device`` itself when a worker of that device serves it (an ONNX variant on a
    GPU worker without onnxruntime's CUDA provider runs on its CPU: not this class's to time)."""
    return serving_device(variant, device).type == device.type


def time_configurations(judge, prompts: list[dict], cfg, device: torch.device, variants: list[str],
                        on_first_round: Callable[[str, str, list], None] | None = None) -> Rounds:
    """Milliseconds per sample of every (variant, batch policy) on ``device``: ``evaluate.latency_rounds`` rounds,
    every configuration in turn in each (so a slow spell of the host hits them alike), after a warm-up (first-call
    allocations are not latency); on CUDA each timing ends at a synchronisation (launch time is not latency).
    ``on_first_round(variant, policy, outputs)`` sees the first round's answers."""
    e = cfg.evaluate
    servings = {v: judge.load(judge.ev.version, v, device) for v in variants}
    rounds: Rounds = {(v, p): [] for v in servings for p in e.policy_list}
    sync = synchronizer(device)
    for serving in servings.values():
        judge.answer(serving, "batch1", prompts[:2])
    sync()
    for round_ in range(e.latency_rounds):
        for (variant, policy), times in rounds.items():
            started = clock()
            outputs = judge.answer(servings[variant], policy, prompts)
            sync()
            times.append((clock() - started) * 1000 / max(1, len(prompts)))
            if round_ == 0 and on_first_round:
                on_first_round(variant, policy, outputs)
    return rounds


def timing_of(judge, prompts: list[dict], cfg, device: torch.device) -> dict:
    """A device class's timing record (JSON, as a task returns it): the eligible variants that serve on ``device``
    timed by ``time_configurations``."""
    variants = [v for v in judge.ev.eligible if serves_here(v, device)]
    rounds = time_configurations(judge, prompts, cfg, device, variants)
    log.info("timed %d configuration(s) on %s (%s)", len(rounds), device, device_class(str(device)))
    return {"device_class": device_class(str(device)), "device": str(device), "version": judge.ev.version,
            "prompts": len(prompts), "rounds_ms": {f"{v}/{p}": [round(t, 4) for t in times]
                                                   for (v, p), times in rounds.items()}}


def local_gpu_timings(judge, prompts: list[dict], cfg, known: set[str]) -> list[dict]:
    """This process's GPUs of a class no timing task covered (``aigc evaluate`` on a GPU host), each timed once."""
    timings = []
    for index in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        device = torch.device("cuda", index)
        if (cls := device_class(str(device))) not in known:
            known.add(cls)
            timings.append(timing_of(judge, prompts, cfg, device))
    return timings


def points_on(points: list[dict], timing: dict) -> list[dict]:
    """The grid's points before the recommendation annotated them (quality from the evaluation, which every class
    shares) with ``timing``'s latencies instead of the CPU's, for the configurations timed there."""
    found = []
    for p in points:
        times = timing["rounds_ms"].get(f"{p['variant']}/{p['policy']}")
        if times:
            found.append({k: v for k, v in p.items() if not k.startswith("latency")}
                         | {"latency_ms": min(times), "latency_range_ms": [min(times), max(times)],
                            "latency_rounds_ms": times, "device_class": timing["device_class"]})
    return found


