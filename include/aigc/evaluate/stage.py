"""Stage 5 for every workload: the day's content judged, the grid of configurations, the comparison with
production, the review queue. The workload's ``Judge`` says what a right output is and adds its own figures.

    evaluations/<model>/dt=<date>/run=<id>/metrics.json      every figure gate 5 judges, each with its interval
    evaluations/<model>/dt=<date>/run=<id>/pareto.json|png   the grid, its front, the recommendation and its rule
    evaluations/<model>/dt=<date>/run=<id>/review/queue.jsonl  the outputs a reviewer should look at first
    evaluations/<model>/dt=<date>/run=<id>/report.html       the workload's report (``Workload.write_report``)
    evaluations/<model>/labels/*.jsonl                       reviewers' labels (``review.py``), read every run

Quality is a property of a variant: a (prompt, seed) gives the same output whatever the batch, so each eligible
variant answers the fixed evaluation prompts once and the workload judges every output; its verdicts pair up with
every other variant's and with production's. Cost is timed apart: ``latency_rounds`` rounds, every configuration
in turn in each, on the first ``latency_prompts`` prompts, after a warm-up; the fastest round is the latency
(other work on the host only ever adds time) and every round is kept for the recommendation.
"""

from __future__ import annotations

import json
import logging
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from aigc.devices import device_class
from aigc.evaluate.devices import local_gpu_timings, points_on, time_configurations, timing_of
from aigc.evaluate.metrics import beats, pareto_front, recommend
from aigc.evaluate.stats import Estimate, Sequential, design, paired_difference, sequential_rate, wilson
from aigc.lake.keys import join, parse_date
from aigc.safety import blocked_term

log = logging.getLogger(__name__)


@dataclass
class Evaluation:
    """What every evaluation starts from: the run's place, the version's record, the day's rows."""

    date: str
    model: str
    version: str
    prefix: str
    registry: Any
    record: dict
    rows: list[dict]
    started: float
    run_id: str
    generation: dict

    @classmethod
    def of(cls, lake, generation: dict, run_id: str) -> Evaluation:
        from aigc.evaluate.runs import evaluation_prefix, generated_rows
        from aigc.registry import Registry

        started = time.perf_counter()
        date, model = parse_date(generation["date"]).isoformat(), generation["model"]
        registry = Registry(lake, model)
        return cls(date, model, generation["version"], evaluation_prefix(model, date, run_id), registry,
                   registry.get(generation["version"]), generated_rows(lake, generation), started, run_id, generation)

    @property
    def eligible(self) -> list[str]:
        """The variants gate 3 let serve (fp32 always: gate 3 requires it)."""
        return (self.record.get("smoke_test") or {}).get("eligible_variants") or ["fp32"]


@dataclass
class Judged:
    """Outputs judged: one verdict per output (right for its prompt or not), the interval gate 5 reads, the figures
    a grid point carries beside it (``point``), and what the workload keeps for its own figures (``detail``)."""

    verdicts: list[bool]
    interval: Estimate
    point: dict = field(default_factory=dict)
    detail: Any = None
    scores: list[float] | None = None
    """A second quality axis where the workload has one (``Judge.score_epsilon``): a score per output, higher better,
    which the recommendation also holds each configuration to (``metrics.recommend``)."""

    @classmethod
    def of(cls, verdicts: list[bool], confidence: float, **kw) -> Judged:
        return cls(verdicts, wilson(sum(verdicts), len(verdicts), confidence), **kw)


class Judge(ABC):
    """What a workload brings to one evaluation (``Workload.judge``): how outputs are judged, and its own figures."""

    score_name: str | None = None
    score_epsilon: float | None = None
    """Where ``judge`` gives scores: their name, and the loss of mean score against the best a recommended
    configuration may not be shown to exceed (None: the recommendation reads alignment only)."""

    def __init__(self, lake, ev: Evaluation, cfg, workload):
        self.lake, self.ev, self.cfg, self.workload = lake, ev, cfg, workload
        self._loaded: dict[tuple[str, str, str], Any] = {}

    @abstractmethod
    def content(self, generated: list[dict]) -> Judged:
        """The day's generated rows judged (``point`` unused)."""

    @abstractmethod
    def eval_prompts(self, n: int) -> list[dict]:
        """The first ``n`` fixed evaluation prompts (``prompt``, ``seed``) every configuration and production answer
        (``evaluate.eval_prompts`` of them; more when gate 5's minimum needs more evidence): the first ``n`` of a
        larger ``n`` are the same, so a longer look only adds prompts."""

    @abstractmethod
    def judge(self, serving, prompts: list[dict]) -> Judged:
        """A loaded configuration's answers to every evaluation prompt, judged: its quality in the grid."""

    def load(self, version: str, variant: str, device: str | torch.device = "cpu"):
        """A version's variant, loaded once per device: quality is judged on the CPU (one device for every variant),
        cost is timed on each device class (``aigc.evaluate.devices``)."""
        from aigc.registry.loader import load_serving

        key = (version, variant, str(device))
        if key not in self._loaded:
            self._loaded[key] = load_serving(self.lake, self.ev.model, version, variant, device, self.workload.serving)
        return self._loaded[key]

    def answer(self, serving, policy: str, prompts: list[dict]) -> list:
        """Answers by a batch policy (what the grid times): one prompt at a time, or a batch as stage 4 makes."""
        texts, seeds = [p["prompt"] for p in prompts], [p["seed"] for p in prompts]
        if policy == "batch1":
            return [serving.generate([t], [s])[0] for t, s in zip(texts, seeds, strict=True)]
        return list(serving.generate(texts, seeds))

    def compare(self, outputs: list, judged: Judged) -> dict:
        """A policy's first timed answers against the quality pass's (a figure that shows a policy changing
        outputs, as the image workload's ``max_pixel_diff``); none by default."""
        return {}

    def unsafe(self, row: dict) -> bool:
        """A safety violation: an output for a prompt with a blocked term."""
        return blocked_term(row["prompt"], self.cfg.prepare.blocklist) is not None

    def figures(self, content: Judged, generated: list[dict]) -> tuple[dict, dict]:
        """(the workload's own metrics, their intervals): checker accuracy, FID, perplexity, recall …"""
        return {}, {}

    def review(self, generated: list[dict], content: Judged, n: int, among: list[int] | None = None) -> list[dict]:
        """The ``n`` queue lines a reviewer should see first, of the outputs ``among`` (indices into ``generated``;
        None: all of them): by default the outputs judged wrong first."""
        order = sorted(among_or_all(generated, among),
                       key=lambda i: (content.verdicts[i], generated[i]["prompt_id"]))[:n]
        return [{"run_id": self.ev.run_id, "prompt_id": generated[i]["prompt_id"], "prompt": generated[i]["prompt"],
                 "checker_correct": content.verdicts[i], "human_correct": None} for i in order]

    def summary(self, metrics: dict) -> dict:
        """What the stage's summary adds for this workload (the CLI's JSON line, the task's return value)."""
        return {}


def among_or_all(generated: list, among: list[int] | None) -> list[int]:
    return list(range(len(generated))) if among is None else list(among)


def review_pool(n_generated: int, n: int, selection: str, seed: int, run_id: str) -> list[int] | None:
    """The outputs a review queue is drawn from (``EvaluateConfig.review_selection``): all of them, the judge
    choosing the least certain (``uncertain``), or ``n`` drawn at random, seeded by the run (``random``: the
    baseline active selection is measured against, ``bench/review_loop.py``)."""
    if selection == "uncertain" or n >= n_generated:
        return None
    return sorted(random.Random(f"{seed}/{run_id}").sample(range(n_generated), n))


def measure_grid(judge: Judge, prompts: list[dict], cfg) -> tuple[list[dict], dict[str, list[bool]],
                                                                 dict[str, list[float]]]:
    """(points, verdicts by variant, scores by variant where the judge gives them): each eligible variant × policy
    with its quality and measured cost."""
    e, ev = cfg.evaluate, judge.ev
    quality = {}
    for variant in ev.eligible:
        quality[variant] = judge.judge(judge.load(ev.version, variant), prompts)
        log.info("pareto grid: %-6s alignment %s", variant, quality[variant].interval)
    compared: dict[tuple[str, str], dict] = {}

    def compare(variant: str, policy: str, outputs: list) -> None:
        compared[(variant, policy)] = judge.compare(outputs, quality[variant])

    rounds = time_configurations(judge, prompts[: e.latency_prompts], cfg, torch.device("cpu"), ev.eligible,
                                 on_first_round=compare)
    points = []
    for (variant, policy), times in rounds.items():
        q = quality[variant]
        points.append({"variant": variant, "policy": policy, "alignment": q.interval.value,
                       "alignment_ci": q.interval.to_dict(), **q.point, "latency_ms": round(min(times), 4),
                       "latency_range_ms": [round(min(times), 4), round(max(times), 4)],
                       "latency_rounds_ms": [round(t, 4) for t in times],
                       "size_bytes": (ev.record.get("variants") or {}).get(variant, {}).get("size_bytes"),
                       **compared[(variant, policy)]})
        log.info("pareto grid: %-6s %-8s %.3f ms/sample (rounds %s)", variant, policy, points[-1]["latency_ms"],
                 ", ".join(f"{t:.3f}" for t in times))
    return points, {v: q.verdicts for v, q in quality.items()}, {v: q.scores for v, q in quality.items() if q.scores}


def against_production(judge: Judge, prompts: list[dict], candidate: list[bool], confidence: float) -> dict:
    """The candidate against ``production`` and against ``best`` (the best version that was ever production, which
    stops a chain of slightly worse candidates walking production down): the paired intervals version −
    candidate on the same prompts and seeds, both models' fp32, judged the same way (None: no such version, or the
    candidate is it)."""
    aliases = judge.ev.registry.aliases()["aliases"]
    production = aliases.get("production")
    best = aliases.get("best") or production
    verdicts: dict[str, list[bool]] = {}
    found = {"production": production, "best": best, "vs_production": None, "vs_best": None}
    for key, version in (("vs_production", production), ("vs_best", best)):
        if version and version != judge.ev.version:
            if version not in verdicts:
                verdicts[version] = judge.judge(judge.load(version, "fp32"), prompts).verdicts
            found[key] = paired_difference(verdicts[version], candidate, confidence)
    return found


RESEED = 1_000_003
"""A prompt's k-th extra answer for the day's content is drawn with seed + k · RESEED (a prime far from any seed
stage 4 gives): another sample of the model on the same prompt."""


def look_until_decided(judge: Judge, verdicts: list[bool], variant: str, more: Callable[[int], list[dict]],
                       cfg, first: int | None = None) -> Sequential:
    """An alignment against gate 5's minimum, on evidence: the first ``first`` of ``verdicts`` (all by default) are
    the first look; while the interval straddles the minimum, ``variant`` answers twice as many prompts
    (``more(n)``: the first ``n``, of which the first ``len(verdicts)`` were judged already), up to
    ``evaluate.max_rounds`` looks, the error rates held over all of them (``sequential_rate``); only the prompts no
    look judged before are judged."""
    judged = list(verdicts)
    extend = extender(judge, variant, more, judged)

    def draw(n: int) -> list[bool]:
        if n > len(judged):
            log.info("gate 5's minimum not yet decided for %s: judging %d more prompts", variant, n - len(judged))
            extend(n)
        return judged[:n]

    return sequential_rate(draw, first or len(verdicts), cfg.evaluate_gate.min_alignment,
                           confidence=cfg.evaluate.confidence, max_rounds=cfg.evaluate.max_rounds)


def extender(judge: Judge, variant: str, more: Callable[[int], list[dict]], judged: list[bool],
             scores: list[float] | None = None) -> Callable[[int], None]:
    """``judged`` (a variant's verdicts on the first prompts of ``more``; ``scores``, its scores, where kept)
    extended to the first ``n``: the variant is loaded at the first extension, and only the prompts not judged yet
    are answered."""
    serving: list = []

    def extend(n: int) -> None:
        if n > len(judged):
            serving[:] = serving or [judge.load(judge.ev.version, variant)]
            answered = judge.judge(serving[0], more(n)[len(judged):])
            judged.extend(answered.verdicts)
            if scores is not None:
                scores.extend(answered.scores or [])
    return extend


def recommend_on_evidence(judge: Judge, prompts: list[dict], points: list[dict], verdicts: dict[str, list[bool]],
                          cfg, scores: dict[str, list[float]] | None = None) -> tuple[dict | None, list[dict]]:
    """The recommendation (``metrics.recommend``: the cheapest configuration whose loss against the best has an
    upper end below ε) with the same sequential rule as gate 5's minimum: every look reads the paired intervals at
    the level that holds the error rates over ``evaluate.max_rounds`` looks, and while the loss of a variant that
    could be recommended is undecided (its interval straddles ε, and the configuration chosen so far is not faster
    in every round) it and the best answer twice as many evaluation prompts. ``verdicts`` is
    extended in place (the first ``len(prompts)`` stay the grid's), and ``scores`` (the judge's second axis) with
    them."""
    e = cfg.evaluate
    level = 1 - (1 - e.confidence) / e.max_rounds
    scores = scores or {}
    extend = {v: extender(judge, v, judge.eval_prompts, verdicts[v], scores.get(v)) for v in verdicts}
    for look in range(1, e.max_rounds + 1):
        chosen, annotated = recommend(points, verdicts, epsilon=e.epsilon, confidence=level,
                                      latency_tolerance=e.latency_tolerance, scores=scores,
                                      score_epsilon=judge.score_epsilon)
        if chosen is None or look == e.max_rounds:
            break
        # Undecided and possibly cheaper: a variant the choice beats in every round would lose even if as good.
        undecided = {p["variant"] for p in annotated if not p["as_good"] and not shown_worse(p, e.epsilon, judge)
                     and not beats(chosen, p, e.latency_tolerance)}
        if not undecided:
            break
        n = len(prompts) * 2 ** look
        # The configurations the losses are measured against: the best in alignment (and in score)
        best = {p["variant"] for p in annotated if p.get("reference")}
        log.info("recommendation: the loss of %s against %s is not yet decided; judging %d evaluation prompts",
                 ", ".join(sorted(undecided)), ", ".join(sorted(best)), n)
        for variant in sorted(best | undecided):
            extend[variant](n)
    for p in annotated:
        p["recommendation_looks"] = look
    return chosen, annotated


def shown_worse(p: dict, epsilon: float, judge: Judge) -> bool:
    """Whether a point's loss against the best is shown to reach ε on alignment, or the judge's ε on its scores (the
    lower end of a paired interval at or above it; a point without an interval counts as shown)."""
    alignment = (p.get("vs_best") or {}).get("lo")
    score = (p.get("score_vs_best") or {}).get("lo")
    return alignment is None or alignment >= epsilon or (
        judge.score_epsilon is not None and score is not None and score >= judge.score_epsilon)


def day_prompts_again(generated: list[dict]) -> Callable[[int], list[dict]]:
    """The first ``n`` answers a longer look at the day's content judges: the day's own, then its prompts again in
    order with new seeds (``RESEED``)."""
    def more(n: int) -> list[dict]:
        return [{"prompt": generated[i % len(generated)]["prompt"],
                 "seed": int(generated[i % len(generated)]["seed"]) + (i // len(generated)) * RESEED}
                for i in range(n)]
    return more


def with_design(looked: Sequential | None, cfg) -> dict | None:
    """The looks taken and the two error rates the check is designed for (``stats.design``)."""
    if looked is None:
        return None
    g, e = cfg.evaluate_gate, cfg.evaluate
    n = looked.estimate.n // 2 ** (looked.rounds - 1)  # the first look's sample
    return {**looked.to_dict(), "designed": design(g.min_alignment, g.expected_alignment, n,
                                                   confidence=e.confidence, max_rounds=e.max_rounds)}


def time_on_this_worker(lake, generation: dict, cfg, workload, device: torch.device | None = None) -> dict:
    """The GPU queue's part of stage 5 (``aigc_airflow`` runs it there, before the evaluation): the version's
    eligible variants timed on this worker's GPU (``devices.timing_of``), or why not (no CUDA device: the
    evaluation's CPU grid covers a CPU worker)."""
    from aigc.devices import pick_device

    device = device or pick_device()
    if device.type != "cuda":
        return {"device_class": None, "reason": f"no CUDA device on this worker ({device}): the evaluation's own "
                                                "grid times the CPU"}
    judge = workload.judge(lake, Evaluation.of(lake, generation, run_id="timing"), cfg)
    return timing_of(judge, judge.eval_prompts(cfg.evaluate.eval_prompts)[: cfg.evaluate.latency_prompts], cfg,
                     device)


def recommend_per_class(judge: Judge, prompts: list[dict], verdicts: dict, cfg, scores: dict, grid: list[dict],
                        timings: list[dict]) -> dict[str, dict]:
    """Each timed class's grid, front and recommendation (``recommend_on_evidence`` on its latencies, the grid's
    quality; a longer look extends the shared verdicts, so a prompt is judged once whatever the classes)."""
    found = {}
    for timing in timings:
        if timing.get("version") not in (None, judge.ev.version):
            raise ValueError(f"a timing of {timing['version']} handed to the evaluation of {judge.ev.version}")
        chosen, points = recommend_on_evidence(judge, prompts, points_on(grid, timing), verdicts, cfg, scores)
        front = pareto_front([p for p in points if p["alignment"] is not None], "alignment", "latency_ms")
        found[timing["device_class"]] = {"recommended": chosen, "points": points, "front": front,
                                         "device": timing["device"]}
        log.info("recommended on %s: %s", timing["device_class"], chosen and f"{chosen['variant']}/{chosen['policy']}")
    return found


def other_device_classes(judge: Judge, prompts: list[dict], grid: list[dict], verdicts: dict, scores: dict, cfg,
                         timings: list[dict], time_local_gpus: bool) -> dict[str, dict]:
    """The grid on every device class but the evaluation's CPU: ``timings`` handed in (the GPU queue's), and with
    ``time_local_gpus`` a GPU of this process of a class none of them timed (``aigc evaluate`` on a GPU host; not
    the evaluation task, which holds no GPU slot: the GPU queue's task times there)."""
    timed = [t for t in timings if t.get("device_class")]
    for t in timings:
        if not t.get("device_class"):
            log.info("no device class timed by a worker: %s", t.get("reason"))
    if time_local_gpus:
        timed += local_gpu_timings(judge, prompts[: cfg.evaluate.latency_prompts], cfg,
                                   {device_class("cpu"), *(t["device_class"] for t in timed)})
    return recommend_per_class(judge, prompts, verdicts, cfg, scores, grid, timed)


def evaluate(lake, generation: dict, cfg, *, run_id: str, workload, timings: list[dict] | None = None,
             time_local_gpus: bool = True) -> dict:
    """Measure the generation run ``generation`` (stage 4's summary: model, version, date, run_id) and write the
    evaluation run; every figure a decision reads comes with its interval and the sample it rests on. ``timings``:
    the variants timed on other device classes (``time_on_this_worker``, the GPU queue's task), each then
    recommended for (``recommended_by_device``), as is a GPU this process sees that none of them timed."""
    from aigc.evaluate.review import agreement, calibrated, used_in_training
    from aigc.plots import pareto_chart

    e = cfg.evaluate
    ev = Evaluation.of(lake, generation, run_id)
    judge = workload.judge(lake, ev, cfg)
    generated = [r for r in ev.rows if r["status"] == "generated"]
    content = judge.content(generated)
    violations = sum(judge.unsafe(r) for r in generated)
    figures, intervals = judge.figures(content, generated)

    prompts = judge.eval_prompts(e.eval_prompts)
    grid, verdicts, scores = measure_grid(judge, prompts, cfg)
    chosen, points = recommend_on_evidence(judge, prompts, grid, verdicts, cfg, scores)
    front = pareto_front([p for p in points if p["alignment"] is not None], "alignment", "latency_ms")
    by_device = other_device_classes(judge, prompts, grid, verdicts, scores, cfg, timings or [], time_local_gpus)
    compared = against_production(judge, prompts, verdicts["fp32"][: len(prompts)], e.confidence)
    production, regression, to_best = compared["production"], compared["vs_production"], compared["vs_best"]
    looked = look_until_decided(judge, verdicts[chosen["variant"]], chosen["variant"], judge.eval_prompts, cfg,
                                first=len(prompts)) if chosen else None
    model_alignment = looked.estimate if looked else None
    # A class recommended another variant: its alignment is held to gate 5's minimum as the CPU's is.
    looked_by_device = {cls: look_until_decided(judge, verdicts[c["variant"]], c["variant"], judge.eval_prompts, cfg,
                                                first=len(prompts))
                        for cls, found in by_device.items()
                        if (c := found["recommended"]) and (not chosen or c["variant"] != chosen["variant"])}
    content_looked = look_until_decided(judge, content.verdicts, generated[0]["variant"],
                                        day_prompts_again(generated), cfg) if generated else None
    rule = (f"the cheapest configuration shown to be no worse than the best by {e.epsilon} or more (the upper end of "
            f"the paired interval of the loss, on the same prompts and seeds, below it; {len(prompts)} prompts at the "
            f"first look, twice as many at each later one while a loss is undecided, up to {e.max_rounds} looks "
            f"at {1 - (1 - e.confidence) / e.max_rounds:.2%} each); "
            + (f"and no worse in {judge.score_name} than the configuration of the best mean {judge.score_name} by "
               f"{judge.score_epsilon:g} or more (the paired interval of the mean loss); "
               if scores and judge.score_epsilon is not None else "")
            + f"a configuration is cheaper only when faster by more than {e.latency_tolerance:.0%} in every one of "
            f"{e.latency_rounds} timing rounds, and the smallest on disk of those no other is cheaper than wins")
    metrics = {
        "date": ev.date, "model": ev.model, "version": ev.version, "generation_run": generation["run_id"],
        "workload": workload.name, "alignment": {"all": content.interval.value}, "generated": len(generated),
        "refused": sum(r["status"] == "refused" for r in ev.rows), "safety_violations": violations,
        "eval_prompts": len(prompts), "recommended": chosen, "recommendation_rule": rule,
        "recommended_by_device": {device_class("cpu"): chosen, **{c: f["recommended"] for c, f in by_device.items()}},
        "devices_not_timed": [t.get("reason") for t in timings or [] if not t.get("device_class")],
        "score_name": judge.score_name if scores else None,
        "production_before": production, "best_before": compared["best"],
        "evidence": {"model_alignment": with_design(looked, cfg),
                     "content_alignment": with_design(content_looked, cfg),
                     "model_alignment_by_device": {c: with_design(x, cfg) for c, x in looked_by_device.items()}},
        "regression_vs_production": round(regression.value, 4) if regression else None,
        # What the GPUs did for the version's training and the day's generation (or why nothing was recorded).
        "gpu": {"training": (ev.record.get("training") or {}).get("gpu"), "generation": generation.get("gpu")},
        **figures,
        "intervals": {"alignment": content.interval.to_dict(),
                      "content_alignment": content_looked.estimate.to_dict() if content_looked else None,
                      "model_alignment": model_alignment.to_dict() if model_alignment else None,
                      "regression_vs_production": regression.to_dict() if regression else None,
                      "regression_vs_best": to_best.to_dict() if to_best else None,
                      "model_alignment_by_device": {c: x.estimate.to_dict() for c, x in looked_by_device.items()},
                      **intervals},
    }
    prefix = ev.prefix
    lake.put_json(join(prefix, "pareto.json"), {"points": points, "front": front, "recommended": chosen,
                                                "rule": rule, "eval_prompts": len(prompts),
                                                "device_class": device_class("cpu"), "by_device": by_device})
    lake.put_bytes(join(prefix, "pareto.png"), pareto_chart(points, front, chosen))
    # Each line says how it was chosen (only randomly drawn ones measure the checker's rates: review.checker_rates)
    # and its evaluation's date (only labels of earlier evaluations reach a training window: train/feedback.py).
    queue = [{**line, "date": ev.date, "selection": e.review_selection} for line in judge.review(
        generated, content, e.review_items, review_pool(len(generated), e.review_items, e.review_selection, e.seed,
                                                        run_id))]
    lake.put_bytes(join(prefix, "review", "queue.jsonl"), "".join(json.dumps(x) + "\n" for x in queue).encode())
    metrics["review"] = {"queued": len(queue), "selection": e.review_selection,
                         "used_in_training": used_in_training(ev.record), **agreement(lake, ev.model, e.confidence)}
    # The recommended configuration's alignment as the checker reads it, corrected by its measured mistakes.
    metrics["intervals"]["model_alignment_calibrated"] = calibrated(metrics["intervals"]["model_alignment"],
                                                                    metrics["review"]["checker_rates"])
    metrics["seconds"] = round(time.perf_counter() - ev.started, 2)
    lake.put_json(join(prefix, "metrics.json"), metrics)
    workload.write_report(lake, prefix, metrics, points, front, ev.record, generation)
    log.info("evaluation %s: alignment %s (content), %s (recommended %s on %d evaluation prompts); %d safety "
             "violation(s); %s", run_id, content.interval, model_alignment,
             chosen and f"{chosen['variant']}/{chosen['policy']}", len(prompts), violations,
             {k: v for k, v in figures.items() if isinstance(v, int | float)})
    return {"stage": "evaluate", "date": ev.date, "run_id": run_id, "model": ev.model, "version": ev.version,
            "generation_run": generation["run_id"], "alignment": content.interval.value,
            "safety_violations": violations, "recommended": chosen,
            "recommended_by_device": {c: r and r["variant"] for c, r in metrics["recommended_by_device"].items()},
            "report_uri": lake.url(join(prefix, "report.html")), "run_uri": lake.url(prefix),
            **judge.summary(metrics)}
