"""The built-in ``hf-causal-lm`` workload: a Hugging Face ``transformers`` causal LM of the user's, fine-tuned on
their documents and served through the same stages as the demos.

Its base model is a ``save_pretrained`` folder (``HFLMSettings.base_model_uri``: a folder or a lake URI; empty: a
small demo base built from a config, with random weights), loaded by ``AutoModelForCausalLM`` and
``AutoTokenizer`` with safetensors only, no remote code and nothing downloaded (``base``). Stage 1 curates the text
workload's drops and counts each document's tokens in the base's tokenizer (``records``); stage 2 fine-tunes every
weight, or low-rank adapters (``peft``, merged before registering), under the DDP core, ranks balanced by those
tokens (``training``); stage 3 registers the weights with the
base pinned by hash and builds fp32, bf16 and int8dyn (int8 linear layers, PyTorch's dynamic quantization)
variants, each checked against fp32 on the smoke prompts (greedy agreement, next-token KL); stage 4
generates greedy continuations with ``generate`` and its KV cache, batched by tokens under a memory model derived
from the config (``serving``); stage 5 judges with no grammar: acceptable continuations, held-out perplexity against
the base, paired (``evaluation``).
"""

from __future__ import annotations

import numpy as np

from aigc.workloads.hf_lm.config import HFLMSettings
from aigc.workloads.text.documents import DocumentWorkload


class HFCausalLMWorkload(DocumentWorkload):
    name = "hf-causal-lm"
    settings_class = HFLMSettings
    description = "a Hugging Face causal LM of yours (a save_pretrained folder), fine-tuned on long documents"
    cli_settings = {"make-raw": ("mean_items", "max_items"),
                    "prepare": ("base_model_uri", "demo_architecture", "min_chars", "max_chars",
                                "min_clean_fraction", "shingle_words"),
                    "train": ("base_model_uri", "demo_architecture", "finetune", "lora_rank", "lora_alpha",
                              "lora_targets", "context", "new_tokens", "temperature", "top_p"),
                    "deploy": ("min_text_agreement", "max_logprob_kl"),
                    "evaluate": ("max_perplexity_ratio", "max_repetition")}
    index_columns = ("tokens",)
    loss_title = "fine-tuning: next-token cross-entropy (nats per token)"
    preload_modules = tuple(f"aigc.workloads.hf_lm.{m}" for m in ("records", "training", "serving", "evaluation"))
    stages = frozenset({"prepare", "train", "deploy", "generate", "evaluate"})
    variant_kinds = ("fp32", "bf16", "int8dyn")
    quality = "Acceptable share"

    def config_overrides(self, preset):
        changes = {"raw": {"source": "docs"}, "prepare": {"dataset": "docs"}, "model": {"name": "hf-causal-lm"},
                   # nats per token: ln 512 ≈ 6.2 for the demo base's random weights
                   "train_gate": {"max_final_val_loss": 4.0},
                   "train": {"batch_size": 8, "lr": 1e-3, "warmup_steps": 10},
                   "deploy": {"variants": "fp32,bf16,int8dyn", "smoke_prompts": 8, "latency_batch": 8,
                              "latency_repeats": 2},
                   "deploy_gate": {"max_latency_ms": 5000.0},
                   # bf16 on a CUDA worker (where gate 3 passed it), fp32 on a CPU (whose bf16 is mostly emulated)
                   "generate": {"prompts": 32, "shards": 2},
                   # A batch of continuations lasts tens of milliseconds and a bucket of token counts holds few
                   # prompts: a size judged on one batch reaches the best in half the batches. On the demo base
                   # it did far better than two at 64 prompts on both hosts measured, and within noise of two at
                   # 256 and 1,024 (bench/results/hf_generate.json, "ours" against "ours_judge2").
                   "batching": {"judge_batches": 1},
                   "evaluate": {"eval_prompts": 64, "latency_prompts": 8, "latency_rounds": 3, "review_items": 8},
                   # the share of acceptable continuations (not empty, not looping, no blocked term)
                   "evaluate_gate": {"min_alignment": 0.5, "expected_alignment": 0.9}}
        if preset in ("demo", "smoke"):
            changes["raw"]["n"] = 300 if preset == "demo" else 120
            changes["curated_gate"] = {"min_rows": 150 if preset == "demo" else 50}
            changes["workload"] = {"settings": {"context": 256 if preset == "demo" else 128, "mean_items": 20.0}}
            changes["train"].update({"steps": 150, "eval_every": 50, "checkpoint_every": 50} if preset == "demo"
                                    else {"steps": 20, "eval_every": 10, "checkpoint_every": 10})
            if preset == "smoke":  # a deployment check: the quality bars are off, the ledger and safety ones on
                changes["train_gate"] = {"max_final_val_loss": 7.0}
                changes["generate"].update({"prompts": 12})
                changes["evaluate"].update({"eval_prompts": 16, "latency_prompts": 4, "latency_rounds": 1,
                                            "max_rounds": 1})
                changes["evaluate_gate"] = {"min_alignment": 0.0}
                changes["workload"]["settings"]["max_perplexity_ratio"] = 1e6
        return changes

    def sample_costs(self, columns, cfg):
        # Per token a transformer block costs ~12·width² multiply-adds in its linear layers and ~2·L·width in
        # attention: cost ∝ L · (6·width + L), with the base's width (hidden_size; GPT-2's n_embd).
        import json

        from aigc.workloads.hf_lm.base import local_folder

        s = cfg.workload.settings
        config = json.loads((local_folder(s.base_model_uri, s.demo_architecture) / "config.json").read_text())
        width = config.get("hidden_size") or config.get("n_embd") or 1024
        tokens = np.minimum(np.asarray(columns["tokens"], dtype=np.float64) + 1, s.context + 1)
        return tokens * (6.0 * width + tokens)

    def records(self, cfg):
        from aigc.workloads.hf_lm.records import HFRecords

        return HFRecords(cfg.workload.settings if cfg is not None else None)

    def training_task(self, lake, index, cfg):
        from aigc.workloads.hf_lm.training import HFTrainingTask

        return HFTrainingTask(lake, index, cfg)

    def training_checks(self, summary, cfg):
        from aigc.workloads.hf_lm.training import versus_base_table

        return [versus_base_table(summary.get("versus_base"), cfg)]

    def serving(self, card, variant, data, device, version):
        from aigc.workloads.hf_lm.serving import HFServing

        return HFServing(card, variant, data, device, version)

    def measure_variant(self, outputs, baseline):
        from aigc.workloads.text.serving import measure

        return measure([o["text"] for o in outputs], [b["text"] for b in baseline])

    def variant_checks(self, entry, cfg):
        kl = entry["logprob_kl_vs_fp32"]
        return {**super().variant_checks(entry, cfg), "logprob_kl_vs_fp32": kl <= cfg.workload.settings.max_logprob_kl}

    def prompt_options(self, cfg):
        from aigc.generate.pinned import PromptOption

        return {"max_new_tokens": PromptOption("integer", 1, cfg.workload.settings.new_tokens),
                "temperature": PromptOption("number", 0.0, 10.0), "top_p": PromptOption("number", 1e-6, 1.0),
                "stop": PromptOption("strings", 0, 8)}

    def output_row(self, output):
        return output

    def shard_model(self, lake, plan, cfg):
        from aigc.workloads.hf_lm.serving import HFServing
        from aigc.workloads.text.serving import shard_model

        return shard_model(lake, plan, cfg, HFServing)

    def judge(self, lake, evaluation, cfg):
        from aigc.workloads.hf_lm.evaluation import HFJudge

        return HFJudge(lake, evaluation, cfg, self)

    def evaluation_checks(self, metrics, cfg):
        from aigc.workloads.hf_lm.evaluation import hf_checks

        return hf_checks(metrics, cfg.evaluate_gate, cfg.workload.settings)


HF_CAUSAL_LM = HFCausalLMWorkload()
