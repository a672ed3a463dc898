"""The ``hf-diffusion`` workload's stage 5, on the demo's captions: the image workload's judge (the shapes checker
reads every image; Fréchet distance and diversity on its features), with the grid's batched answers made as stage 4
makes them (``DiffusionServing.run`` under the adaptive batcher and the pipeline's memory model).

The shapes checker reads only the project's caption grammar: it judges the demo, fine-tuned on the shapes drop. A
judge that needs no grammar (CLIP score, FID on a feature extractor of the user's, a safety classifier) is the rest
of issue 42 and not built yet.
"""

from __future__ import annotations

from aigc.workloads.image.evaluation import ImageJudge


class DiffusionJudge(ImageJudge):
    def answer(self, serving, policy, prompts):
        if policy == "batch1":
            return super().answer(serving, policy, prompts)
        from aigc.batching import AdaptiveBatcher

        items = [serving.item(p) for p in prompts]

        def run(batch: list[int]) -> list:
            return list(serving.run([items[i] for i in batch]))

        images, _ = AdaptiveBatcher(run, [0] * len(items), serving.memory(), lambda: 1 << 34,
                                    max_batch=self.cfg.batching.max_batch)()
        return images
