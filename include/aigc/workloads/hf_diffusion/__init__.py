"""The built-in ``hf-diffusion`` workload: a Hugging Face ``diffusers`` text-to-image pipeline of the user's, its UNet
fine-tuned on captioned images and served through the same stages as the demos.

Its base is a pipeline folder saved with ``save_pretrained`` (``HFDiffusionSettings.base_model_uri``: a folder or a
lake URI; empty: a small demo pipeline built from configs, with random weights), found, checked and loaded without
running its code or downloading anything (``base``). Stage 1 curates the image workload's drops at the configured
resolution (its rules, inherited); stage 2 fine-tunes the UNet by the denoising objective the base's scheduler
names, every weight or LoRA adapters, under the DDP core (``training``, ``denoising``); stage 3 registers the UNet and
builds variants over precision × denoising steps × scheduler (``bf16-s20``, ``fp32-s8-dpm``), each compared with fp32
at the version's steps on the smoke prompts; stage 4 serves with the pipeline's own call under the batcher, a
prompt's own guidance and negative prompt from the prompt file (``serving``); stage 5 is the image workload's judge,
the shapes checker where the captions are the project's grammar, else a CLIP verdict, with FID/KID on an image
model's features and a safety classifier where the user points at them (``evaluation``, ``scorers``, ``gate``).
"""

from __future__ import annotations

from aigc.workloads.hf_diffusion.config import HFDiffusionSettings
from aigc.workloads.image import ImageWorkload


class HFDiffusionWorkload(ImageWorkload):
    name = "hf-diffusion"
    settings_class = HFDiffusionSettings
    description = "a Hugging Face diffusers pipeline of yours (a save_pretrained folder), fine-tuned on captions"
    stages = frozenset({"prepare", "train", "deploy", "generate", "evaluate"})
    loss_parts = ()
    loss_title = "fine-tuning: denoising mean squared error"
    _train = ("base_model_uri", "demo_architecture", "finetune", "lora_rank", "lora_alpha", "caption_dropout",
              "resolution", "inference_steps", "guidance_scale")
    cli_settings = {"make-raw": ("resolution",),
                    "prepare": ("resolution", "min_caption_chars", "max_caption_chars", "min_side", "max_side",
                                "max_image_pixels", "max_image_bytes", "near_dup_image_distance"),
                    "train": _train, "deploy": ("max_pixel_mae", "min_image_std"), "generate": ("blank_std",),
                    "evaluate": ("checker_images", "reference_seeds", "min_checker_accuracy", "max_fid", "judge_by",
                                 "clip_model_uri", "clip_distractors", "clip_score_epsilon", "feature_model_uri",
                                 "max_feature_fid", "safety_model_uri", "unsafe_labels", "max_unsafe_probability",
                                 "unscored")}
    preload_modules = tuple(f"aigc.workloads.{m}" for m in (
        "image.rawdrop", "image.records", "hf_diffusion.training", "hf_diffusion.denoising", "hf_diffusion.serving",
        "image.prompts", "image.gallery", "image.gate", "hf_diffusion.evaluation", "hf_diffusion.scorers",
        "hf_diffusion.gate", "image.report"))
    # Precision, and the denoising steps and scheduler a variant serves with (bf16-s20, fp32-s8-dpm).
    variant_kinds = ("fp32", "bf16")
    variant_steps = True

    def config_overrides(self, preset):
        changes = super().config_overrides(preset)
        changes["model"] = {"name": "hf-diffusion"}
        # The denoising loss of a prediction of zero is 1 (the noise's variance): below it, the UNet learnt to
        # predict some of the noise. A demo base starts from random weights, above it.
        changes["train_gate"] = {"max_final_val_loss": 1.0}
        changes["train"] = {"batch_size": 16, "lr": 1e-3, "warmup_steps": 10}
        # The reference (fp32 at the version's steps), bf16, and fewer steps with the base's scheduler and with
        # DPM-Solver++: points of the quality/cost front stage 5 draws.
        changes["deploy"] = {"variants": "fp32,bf16,fp32-s8,fp32-s8-dpm,bf16-s8-dpm", "smoke_prompts": 8,
                             "latency_batch": 8, "latency_repeats": 2}
        changes["deploy_gate"] = {"max_latency_ms": 10_000.0}  # per image at batch 1: every step is a UNet call
        # A batch of images lasts hundreds of milliseconds: one batch judges a size as well as two (the timer's noise
        # is nothing beside it). Measured within noise of two at 32 and 128 prompts (bench/results/hf_diffusion.json,
        # "ours" against "ours_judge2"); one, as for the hf-causal-lm workload, explores fewer images at small sizes.
        changes["batching"] = {"judge_batches": 1}
        settings = changes.setdefault("workload", {}).setdefault("settings", {})
        if preset == "demo":
            # The demo base learns the shapes' look (checker-feature Fréchet distance ~0.7-1.2 after a few hundred
            # steps, ~2.9 for noise) long before it learns to follow a caption (each attribute near chance after
            # 1,000 steps on 2 cores: a random text encoder, frozen): the alignment is reported with its interval,
            # and the bar is the distribution's, not the caption's.
            changes["train"].update({"steps": 600, "eval_every": 200, "checkpoint_every": 200})
            settings.update({"inference_steps": 30, "guidance_scale": 3.0, "max_fid": 2.0,
                             # Beside the checker: the CLIP path, on a small CLIP trained on the shapes world.
                             "clip_model_uri": "demo:clip"})
            changes["deploy"]["variants"] = "fp32,bf16,fp32-s10,fp32-s10-dpm"
            changes["evaluate"] = {"eval_prompts": 128, "latency_prompts": 8, "latency_rounds": 3, "max_rounds": 1,
                                   "review_items": 16}
            changes["evaluate_gate"] = {"min_alignment": 0.0}
        if preset == "smoke":
            changes["train"].update({"steps": 20, "eval_every": 10, "checkpoint_every": 10})
            # fp32 only: a CPU without bf16 kernels (no AVX512-BF16 or AMX) ran the smoke's bf16 UNet 20x slower a
            # denoising step than fp32 (1.09 s against 0.055 s at batch 1): 100 s of the smoke DAG run's 170 there.
            # The precision axis is the demo preset's, and the stage tests build bf16 variants themselves.
            changes["deploy"].update({"variants": "fp32,fp32-s4-dpm", "smoke_prompts": 4, "latency_batch": 4,
                                      "latency_repeats": 1})
            settings["inference_steps"] = 8
        return changes

    def training_task(self, lake, index, cfg):
        from aigc.workloads.hf_diffusion.training import HFDiffusionTrainingTask

        return HFDiffusionTrainingTask(lake, index, cfg)

    def serving(self, card, variant, data, device, version):
        from aigc.workloads.hf_diffusion.serving import DiffusionServing

        return DiffusionServing(card, variant, data, device, version)

    def build_variants(self, lake, model, version, cfg):
        from aigc.registry.torch_variants import build_torch_variants

        return build_torch_variants(lake, model, version, cfg, self)

    def measure_variant(self, outputs, baseline):
        from aigc.workloads.image.variants import image_distance

        return image_distance(outputs, baseline)

    def prompt_options(self, cfg):
        from aigc.generate.pinned import PromptOption

        return {"guidance_scale": PromptOption("number", 0.0, 100.0),
                "negative_prompt": PromptOption("string", 1, cfg.generate.max_prompt_chars)}

    def shard_model(self, lake, plan, cfg):
        from aigc.workloads.hf_diffusion.serving import shard_model

        return shard_model(lake, plan, self)

    def evaluation_checks(self, metrics, cfg):
        from aigc.workloads.hf_diffusion.gate import evaluation_checks

        return evaluation_checks(metrics, cfg)

    def judge(self, lake, evaluation, cfg):
        from aigc.workloads.hf_diffusion.evaluation import DiffusionJudge

        return DiffusionJudge(lake, evaluation, cfg, self)


HF_DIFFUSION = HFDiffusionWorkload()
