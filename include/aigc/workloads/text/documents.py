"""What every workload of long documents and a decoder shares (the built-in ``text`` and ``hf-causal-lm``): the
logs drop of the reference corpus, the smoke and demo prompts, a variant held to fp32 by its agreement, texts as the
generated columns with their gate-4 checks and samples page, and the evaluation report. Each subclass brings its
records, model, serving, judge and settings (which have ``min_text_agreement`` and ``new_tokens``)."""

from __future__ import annotations

from typing import ClassVar

from aigc.workload import Workload


class DocumentWorkload(Workload):
    quality: ClassVar[str] = "Validity"
    """What the evaluation's alignment is, as the report names it."""
    output_columns = (("text", "large_string"), ("prompt_tokens", "int32"), ("new_tokens", "int32"))

    def make_raw_drop(self, raw, date, cfg):
        from aigc.workloads.text.corpus import make_text_drop

        return make_text_drop(raw, date, cfg.raw, cfg.workload.settings)

    def smoke_prompts(self, n, seed):
        from aigc.workloads.text.serving import smoke_prompts

        return smoke_prompts(n, seed)

    def variant_checks(self, entry, cfg):
        return {"agreement_vs_fp32": entry["agreement_vs_fp32"] >= cfg.workload.settings.min_text_agreement}

    def demo_prompts(self, lake, date, cfg, key):
        from aigc.workloads.text.serving import demo_prompts

        return demo_prompts(lake, date, cfg, key)

    def gallery(self, rows):
        from aigc.workloads.text.serving import samples_page

        return "samples.md", samples_page(rows)

    def generation_checks(self, rows, cfg):
        from aigc.workloads.text.serving import generation_checks

        return generation_checks(rows, cfg, cfg.workload.settings.new_tokens)

    def write_report(self, lake, prefix, metrics, points, front, record, generation):
        from aigc.evaluate.runs import generated_rows
        from aigc.workloads.text.evaluation import write_text_report

        samples = [r for r in generated_rows(lake, generation) if r["status"] == "generated"][:12]
        return write_text_report(lake, prefix, metrics, points, samples, quality=self.quality)
