"""The image workload's stage 5: its ``Judge`` for the core's skeleton (``aigc.evaluate.stage``).

    evaluations/<model>/dt=<date>/run=<id>/review/images/   the queued outputs' images (least certain first)
    evaluations/<model>/dt=<date>/run=<id>/report.html      metrics, Pareto plot, gallery, loss curve, lineage
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from aigc.config import PipelineConfig
from aigc.evaluate.stage import Judge, Judged, among_or_all
from aigc.evaluate.stats import clopper_pearson
from aigc.lake import Lake
from aigc.lake.keys import join
from aigc.workloads.image.checker import ATTRIBUTES
from aigc.workloads.image.config import image_settings
from aigc.workloads.image.grid import answer_images, variant_quality
from aigc.workloads.image.metrics import alignment_estimate, assess, diversity, frechet_estimate, require_scorable
from aigc.workloads.image.reference import checker_reference, evaluation_prompts


def _decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def real_images(lake: Lake, dataset: str, date: str, n: int) -> tuple[list[np.ndarray], list[str], int]:
    """Up to ``n`` of the day's real images with their captions, and how many of the first are held out (the
    curated validation split, which no model trained on). The checker's accuracy is read on all of them (it learnt
    nothing from any); the Fréchet distance compares generated images with the held-out ones only (with fewer than
    16 of those, a tiny partition, with all)."""
    from aigc.train.data import load_window

    index = load_window(lake, dataset, date, 1, ("caption",))
    train, held_out = index.split(0.05, n)
    chosen = np.concatenate([held_out, train[: max(0, n - len(held_out))]])
    captions = [index.columns["caption"][i] for i in chosen]
    images: list = [None] * len(chosen)  # read shard by shard, kept in the order chosen: held out first
    for s in sorted(set(index.shard_of[chosen].tolist())):
        column = index.shard(lake, s).read(columns=["image"]).column("image")
        for at in np.flatnonzero(index.shard_of[chosen] == s):
            images[at] = _decode(column[int(index.row_of[chosen[at]])].as_py())
    return images, captions, (len(held_out) if len(held_out) >= 16 else len(chosen))


def review_lines(lake: Lake, prefix: str, generated: list[dict], readings: list[dict], n: int,
                 run_id: str, among: list[int] | None = None) -> list[dict]:
    """The ``n`` least certain outputs (lowest checker margin) of those ``among`` (all: None), each with its image
    written under ``review/images/`` and the checker's reading, for reviewers to label (``aigc.evaluate.review``)."""
    ranked = sorted(among_or_all(generated, among),
                    key=lambda i: (readings[i]["margin"], generated[i]["prompt_id"]))[:n]
    lines = []
    for i in ranked:
        row, reading = generated[i], readings[i]
        image_key = join(prefix, "review", "images", f"{row['prompt_id']}.png")
        lake.put_bytes(image_key, row["image"])
        lines.append({"run_id": run_id, "prompt_id": row["prompt_id"], "prompt": row["prompt"], "seed": row["seed"],
                      "image": lake.url(image_key), "checker_margin": round(reading["margin"], 4),
                      "checker_read": reading["read"], "checker_correct": reading.get("all_correct"),
                      # The checker's verdict per attribute: what a reviewer's label per attribute is compared with.
                      "checker_attributes": {a: bool(reading[a]) for a in ATTRIBUTES if a in reading},
                      "human_correct": None})
    return lines


class ImageJudge(Judge):
    """The checker (``checker.py``) reads every image: alignment per attribute; the checker's own accuracy on its
    fixed reference set and on the day's held-out real images; Fréchet distance and diversity on its features."""

    def __init__(self, lake: Lake, ev, cfg: PipelineConfig, workload):
        super().__init__(lake, ev, cfg, workload)
        self.real, captions, held = real_images(lake, cfg.prepare.dataset, ev.date,
                                                image_settings(cfg).checker_images)
        self.read_checker(captions, held)

    def read_checker(self, captions: list[str], held: int) -> None:
        """The checker's own accuracy: on its fixed reference set, and on the day's real images (``self.real``,
        with ``captions``); the first ``held`` are held out, what generated images' features are compared with."""
        s = image_settings(self.cfg)
        require_scorable(captions, f"real captions of curated/{self.cfg.prepare.dataset}/dt={self.ev.date}")
        resolution = self.real[0].shape[0] if self.real else s.resolution
        self.reference = checker_reference(self.lake, resolution, s.reference_seeds, self.cfg.evaluate.confidence)
        self.checker = assess(self.real, captions)
        self.held_out_features = self.checker["features"][:held]

    def content(self, generated):
        require_scorable([r["prompt"] for r in generated], f"generated prompts of run {self.ev.generation['run_id']}")
        quality = assess([_decode(r["image"]) for r in generated], [r["prompt"] for r in generated])
        return Judged([bool(r.get("all_correct")) for r in quality["rows"]],
                      alignment_estimate(quality, self.cfg.evaluate.confidence), detail=quality)

    def eval_prompts(self, n):
        return evaluation_prompts(n, self.cfg.evaluate.seed)

    def judge(self, serving, prompts):
        q = variant_quality(serving, prompts, self.held_out_features, self.cfg.evaluate.confidence)
        return Judged(q["verdicts"], q["alignment"], point={"fid": q["fid"]}, detail=q["images"])

    def answer(self, serving, policy, prompts):
        return answer_images(serving, policy, prompts, self.cfg.batching.max_batch)

    def compare(self, outputs, judged):
        """The first timed round's images against the quality pass's: a policy that changed them would show."""
        return {"max_pixel_diff": int(max((np.abs(a.astype(np.int16) - b.astype(np.int16)).max()
                                           for a, b in zip(outputs, judged.detail, strict=False)), default=0))}

    def figures(self, content, generated):
        e, quality, checker, reference = self.cfg.evaluate, content.detail, self.checker, self.reference
        fid = frechet_estimate(self.held_out_features, quality["features"], e.confidence)
        return {"alignment": quality["alignment"], "scored": quality["scored"],
                "checker_accuracy": {a: v["value"] for a, v in reference["accuracy"].items()},
                "checker_accuracy_real": checker["alignment"], "checker_images": len(self.real),
                "fid_real_images": len(self.held_out_features),
                "checker_reference": {k: reference[k] for k in ("scenes", "resolution", "seeds", "misread", "uri")},
                "fid": fid.value, "diversity": diversity(quality["features"], [r["prompt"] for r in generated]),
                "fid_note": "Fréchet distance on the checker's 12 features (colour, background, centre, extent, "
                            "coverage), not Inception-FID"}, \
            {"checker_reference": reference["accuracy"]["all"],
             "checker_real": clopper_pearson(sum(r["all_correct"] for r in checker["rows"] if r["scorable"]),
                                             checker["scored"], e.confidence).to_dict(),
             "fid": fid.to_dict()}

    def review(self, generated, content, n, among=None):
        return review_lines(self.lake, self.ev.prefix, generated, content.detail["rows"], n, self.ev.run_id, among)

    def summary(self, metrics):
        return {"alignment": metrics["alignment"]["all"], "checker_accuracy": metrics["checker_accuracy"]["all"],
                "fid": metrics["fid"], "attributes": {a: metrics["alignment"][a] for a in ATTRIBUTES}}
