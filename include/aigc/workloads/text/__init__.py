"""The built-in text workload: long documents, a byte-level BPE and a small decoder-only transformer.

Stage 1 curates JSONL drops of ``{id, text, source, created_at}`` (``records``); stage 2 learns the
tokenizer from the window and trains the transformer by the same DDP core as images (``training``).
Its reference corpus (``corpus``) is a world whose facts can be checked, for the evaluation to come.
"""

from __future__ import annotations

import numpy as np

from aigc.workloads.text.config import TextSettings
from aigc.workloads.text.documents import DocumentWorkload


class TextWorkload(DocumentWorkload):
    name = "text"
    settings_class = TextSettings
    cli_settings = {"make-raw": ("mean_items", "max_items"),
                    "prepare": ("min_chars", "max_chars", "min_clean_fraction", "shingle_words"),
                    "train": ("vocab_size", "layers", "width", "heads", "context"),
                    "deploy": ("min_text_agreement",), "evaluate": ("max_perplexity",)}
    description = "long documents → a decoder-only transformer with rotary positions and a KV cache"
    index_columns = ("bytes",)
    loss_title = "training: next-token cross-entropy (nats per token)"
    preload_modules = tuple(f"aigc.workloads.text.{m}" for m in (
        "records", "training", "serving", "evaluation"))
    stages = frozenset({"prepare", "train", "deploy", "generate", "evaluate"})
    variant_kinds = ("fp32", "bf16")

    def config_overrides(self, preset):
        changes = {"model": {"name": "logs-gpt"}, "raw": {"source": "logs"}, "prepare": {"dataset": "logs"},
                   # the loss is nats per token (ln 512 ≈ 6.2 untrained): a bar a model that learnt the grammar meets
                   "train_gate": {"max_final_val_loss": 2.0},
                   "train": {"batch_size": 16, "lr": 3e-3, "warmup_steps": 30},
                   "deploy": {"variants": "fp32,bf16", "smoke_prompts": 16, "latency_batch": 16, "latency_repeats": 3},
                   # per prompt: prefill and up to new_tokens decoding steps, not one forward pass
                   "deploy_gate": {"max_latency_ms": 2000.0},
                   "generate": {"prompts": 64, "shards": 2},
                   "evaluate": {"eval_prompts": 128, "latency_prompts": 8, "latency_rounds": 3, "review_items": 8},
                   # a model that learnt the logs' grammar: the demo model's validity is 0.50 [0.38, 0.62] on its
                   # day's content and 0.59 on the evaluation prompts (its perplexity: TextSettings.max_perplexity)
                   "evaluate_gate": {"min_alignment": 0.3, "expected_alignment": 0.55}}
        if preset in ("demo", "smoke"):
            changes["raw"]["n"] = 400 if preset == "demo" else 120
            changes["curated_gate"] = {"min_rows": 200 if preset == "demo" else 50}
            # demo: a 4,096-token context, so the demo's long prompts (up to ~4,500 tokens) are in distribution and
            # recall can be asked from 4,096 tokens back (training ~8 min on 2 cores, 4× the 512 context's);
            # smoke: 512, a deployment check.
            settings = {"context": 4096 if preset == "demo" else 512, "layers": 2, "width": 128}
            changes["workload"] = {"settings": settings}
            changes["train"].update({"steps": 300, "eval_every": 100, "checkpoint_every": 100} if preset == "demo"
                                    else {"steps": 40, "eval_every": 20, "checkpoint_every": 20})
            if preset == "smoke":  # a deployment check: the quality bars are off, the ledger and safety ones on
                changes["train_gate"] = {"max_final_val_loss": 6.0}
                changes["evaluate_gate"] = {"min_alignment": 0.0}
                settings["max_perplexity"] = 1e6
                changes["evaluate"].update({"eval_prompts": 16, "latency_prompts": 4, "latency_rounds": 1})
                changes["generate"].update({"prompts": 16})
        return changes

    def sample_costs(self, columns, cfg):
        # Tokens ≈ bytes / 4 (the BPE is not learnt yet), cut at the context; per token a block costs ~12·width²
        # multiply-adds in its linear layers and ~2·L·width in attention: cost ∝ L · (6·width + L).
        t = cfg.workload.settings
        tokens = np.minimum(np.asarray(columns["bytes"], dtype=np.float64) / 4 + 1, t.context + 1)
        return tokens * (6 * t.width + tokens)

    def training_task(self, lake, index, cfg):
        from aigc.workloads.text.training import TextTrainingTask

        return TextTrainingTask(lake, index, cfg)

    def serving(self, card, variant, data, device, version):
        from aigc.workloads.text.serving import TextServing

        return TextServing(card, variant, data, device, version)

    def measure_variant(self, outputs, baseline):
        from aigc.workloads.text.serving import measure

        return measure(outputs, baseline)


    def shard_model(self, lake, plan, cfg):
        from aigc.workloads.text.serving import shard_model

        return shard_model(lake, plan, cfg)

    def judge(self, lake, evaluation, cfg):
        from aigc.workloads.text.evaluation import TextJudge

        return TextJudge(lake, evaluation, cfg, self)

    def evaluation_checks(self, metrics, cfg):
        from aigc.workloads.text.evaluation import text_checks

        return text_checks(metrics, cfg.evaluate_gate, cfg.workload.settings)

    def records(self, cfg):
        from aigc.workloads.text.records import TextRecords

        return TextRecords(cfg.workload.settings if cfg is not None else None)


TEXT = TextWorkload()
