"""The ``hf-diffusion`` workload's stage 5: what alignment is, and the scorers that need no caption grammar.

Alignment (the verdicts gate 5 and the front's paired intervals read) is the shapes checker's where the day's
captions are the project's grammar (the demo), else the CLIP verdict (``scorers.ClipScorer``: an image closer to its
own caption than to ``clip_distractors`` others of the evaluation's pool); ``judge_by`` chooses, ``auto`` by the
captions. Beside it, each scorer the user points at adds its figures to the report, the front's points and gate 5:
the CLIP score (mean, with a bootstrap interval), FID and KID on an image model's features against the day's
held-out curated images (torchmetrics), and a safety classifier's count of unsafe images. A scorer not configured is
said so (``metrics["unscored"]``), and gate 5 passes it with a warning or fails it (``unscored``): never a score of 0.

Every configuration's images are made as stage 4 makes them (``DiffusionServing.run`` under the adaptive batcher).
"""

from __future__ import annotations

import numpy as np

from aigc.evaluate.metrics import NoScorer
from aigc.evaluate.stage import Judge, Judged
from aigc.evaluate.stats import bootstrap, wilson
from aigc.workloads.image.config import image_settings
from aigc.workloads.image.evaluation import ImageJudge, _decode, real_images, review_lines
from aigc.workloads.image.metrics import assess
from aigc.workloads.world import parse_caption

SCORERS = {"clip": ("clip_model_uri", "the CLIP score and the CLIP verdict"),
           "features": ("feature_model_uri", "FID and KID on an image model's features"),
           "safety": ("safety_model_uri", "the safety classifier's reading of every image")}


def batched_images(serving, prompts: list[dict], max_batch: int) -> list[np.ndarray]:
    """``prompts``' images as stage 4 makes them: the pipeline's call under the batcher and its memory model."""
    from aigc.batching import AdaptiveBatcher

    items = [serving.item(p) for p in prompts]
    images, _ = AdaptiveBatcher(lambda batch: list(serving.run([items[i] for i in batch])), [0] * len(items),
                                serving.memory(), lambda: 1 << 34, max_batch=max_batch)()
    return images


def mean_estimate(values: list[float], confidence: float):
    """A mean with a bootstrap interval."""
    a = np.asarray(values, dtype=np.float64)
    return bootstrap(lambda rng: float(a[rng.integers(0, len(a), len(a))].mean()),
                     float(a.mean()) if len(a) else float("nan"), len(a), confidence=confidence)


class DiffusionJudge(ImageJudge):
    def __init__(self, lake, ev, cfg, workload):
        from aigc.workloads.hf_diffusion import scorers

        Judge.__init__(self, lake, ev, cfg, workload)
        s, s3 = image_settings(cfg), getattr(lake, "options", None)
        self.s = s
        self.real, captions, held = real_images(lake, cfg.prepare.dataset, ev.date, s.checker_images)
        self.held_out, self.held_captions = self.real[:held], captions[:held]
        in_grammar = bool(captions) and all(parse_caption(c) is not None for c in captions)
        self.by = s.judge_by if s.judge_by != "auto" else "checker" if in_grammar else "clip"
        self.clip = None
        if s.clip_model_uri:
            folder = scorers.scorer_folder(s.clip_model_uri, "clip_model_uri", s3, tokenizer=True)
            self.clip = scorers.ClipScorer(folder, s.clip_distractors, cfg.evaluate.seed).with_pool(captions)
            # The front's second quality axis: a configuration that keeps the alignment but loses CLIP score is not
            # recommended for its cost (``metrics.recommend``).
            self.score_name, self.score_epsilon = "CLIP score", s.clip_score_epsilon
        if self.by == "checker":
            self.read_checker(captions, held)
        elif self.clip is None:
            reason = ("judge_by is 'clip'" if s.judge_by == "clip" else
                      "the day's curated captions are not all in the shapes grammar the checker reads")
            raise NoScorer(f"{reason}, and no CLIP model is configured to judge alignment: set clip_model_uri (a "
                           "CLIP folder saved with its tokenizer and image processor) in the workload's settings; "
                           "scoring every image 0 would fail a good model")
        feature_uri = s.feature_model_uri or s.clip_model_uri
        self.features = scorers.FeatureDistance(
            scorers.scorer_folder(feature_uri, "feature_model_uri" if s.feature_model_uri else "clip_model_uri", s3,
                                  tokenizer=not s.feature_model_uri), not s.feature_model_uri,
            self.held_out) if feature_uri and len(self.held_out) >= 2 else None
        self.safety = scorers.SafetyClassifier(
            scorers.scorer_folder(s.safety_model_uri, "safety_model_uri", s3), s.unsafe_labels) \
            if s.safety_model_uri else None

    # Alignment: the checker's, or the CLIP verdict.
    def content(self, generated):
        if self.by == "checker":
            return super().content(generated)
        images = [_decode(r["image"]) for r in generated]
        readings = self._clip_read(images, generated)
        return Judged(readings.verdicts, wilson(sum(readings.verdicts), len(readings.verdicts),
                                                self.cfg.evaluate.confidence), detail={"images": images,
                                                                                       "clip": readings})

    def eval_prompts(self, n):
        if self.by == "checker":
            return super().eval_prompts(n)
        # The held-out curated captions, in order and then again with new seeds: no model trained on them.
        base = self.cfg.evaluate.seed * 1_000_003
        pool = self.held_captions or sorted(self.clip.pool)
        return [{"prompt_id": f"e-{i:06d}", "prompt": pool[i % len(pool)], "seed": base + i} for i in range(n)]

    def judge(self, serving, prompts):
        images = batched_images(serving, prompts, self.cfg.batching.max_batch)
        point, scores = {}, None
        if self.by == "checker":
            from aigc.workloads.image.metrics import frechet_distance

            quality = assess(images, [p["prompt"] for p in prompts])
            verdicts = [bool(r.get("all_correct")) for r in quality["rows"]]
            point["fid"] = frechet_distance(self.held_out_features, quality["features"])
        if self.clip is not None:
            readings = self._clip_read(images, prompts)
            point["clip_score"] = round(float(np.mean(readings.scores)), 4)
            scores = readings.scores
            if self.by == "clip":
                verdicts = readings.verdicts
        if self.features is not None and len(images) >= 2:  # a longer look may judge a single extra prompt
            point["feature_fid"] = round(self.features.measure(images, self.cfg.evaluate.confidence)["fid"]["value"],
                                         4)
        return Judged(verdicts, wilson(sum(verdicts), len(verdicts), self.cfg.evaluate.confidence), point=point,
                      detail=images, scores=scores)

    def answer(self, serving, policy, prompts):
        if policy == "batch1":
            return super().answer(serving, policy, prompts)
        return batched_images(serving, prompts, self.cfg.batching.max_batch)

    def _clip_read(self, images, rows):
        return self.clip.read(images, [r["prompt"] for r in rows], [r["seed"] for r in rows])

    # The scorers' figures, beside the checker's where it judges.
    def figures(self, content, generated):
        conf = self.cfg.evaluate.confidence
        if self.by == "checker":
            figures, intervals = super().figures(content, generated)
            images = [_decode(r["image"]) for r in generated]
        else:
            images = content.detail["images"]
            figures = {"alignment": {"all": content.interval.value}, "scored": len(content.verdicts),
                       "fid_real_images": len(self.held_out)}
            intervals = {}
        figures["judged_by"] = self.by
        unscored = []
        if self.clip is not None:
            readings = content.detail["clip"] if self.by == "clip" else self._clip_read(images, generated)
            clip_score = mean_estimate(readings.scores, conf)
            figures["clip_score"] = clip_score.value
            figures["clip_verdict_rate"] = float(np.mean(readings.verdicts)) if readings.verdicts else None
            intervals["clip_score"] = clip_score.to_dict()
            intervals["clip_verdict_rate"] = wilson(sum(readings.verdicts), len(readings.verdicts), conf).to_dict()
            figures["clip_distractors"] = self.s.clip_distractors
        else:
            unscored.append("clip")
        if self.features is not None and len(images) >= 2:
            measured = self.features.measure(images, conf)
            figures["feature_fid"], figures["kid"] = measured["fid"]["value"], measured["kid"]
            intervals["feature_fid"] = measured["fid"]
            if self.by == "clip":
                from aigc.workloads.image.metrics import diversity

                figures["diversity"] = diversity(measured["features"], [r["prompt"] for r in generated])
        else:
            unscored.append("features")
        if self.safety is not None:
            p = self.safety.probabilities(images)
            figures["unsafe_images"] = int(sum(x > self.s.max_unsafe_probability for x in p))
            figures["unsafe_max_probability"] = round(max(p), 5) if p else None
        else:
            unscored.append("safety")
        figures["unscored"] = {k: f"{SCORERS[k][1]}: not configured (set {SCORERS[k][0]})" for k in unscored}
        return figures, intervals

    def review(self, generated, content, n, among=None):
        if self.by == "checker":
            return super().review(generated, content, n, among)
        readings = content.detail["clip"]
        rows = [{"margin": m, "read": None, "all_correct": v} for m, v in zip(readings.margins, readings.verdicts,
                                                                             strict=True)]
        return review_lines(self.lake, self.ev.prefix, generated, rows, n, self.ev.run_id, among)

    def summary(self, metrics):
        own = super().summary(metrics) if self.by == "checker" else {"alignment": metrics["alignment"]["all"]}
        return {**own, **{k: metrics[k] for k in ("judged_by", "clip_score", "feature_fid", "unsafe_images")
                          if k in metrics}}

