"""The denoising objective a ``diffusers`` pipeline's UNet is fine-tuned on, as ``diffusers``' own text-to-image
training script computes it, read from the base's own components and scheduler:

* pictures in [-1, 1] go through the frozen autoencoder where the pipeline has one (a latent sample, times its
  ``scaling_factor``, less its ``shift_factor`` where it has one), or stay pixels (a pixel-space pipeline: IF);
* captions go through the frozen text encoder, one in ``caption_dropout`` replaced by the empty caption, so the
  model also learns the unconditional prediction that classifier-free guidance subtracts at serving time;
* a timestep uniform over the scheduler's training steps, noise added by the scheduler (``add_noise``), and the
  target the scheduler's ``prediction_type`` names: the noise (``epsilon``), the velocity (``v_prediction``,
  ``get_velocity``) or the clean sample (``sample``); the loss is the mean squared error.

A UNet that predicts a variance beside the noise (``out_channels`` twice ``in_channels``: IF's) is trained on the
noise half, which is all a fixed-variance scheduler reads. Every draw comes from one ``torch.Generator`` the caller
seeds, so a step's noise does not depend on the process's global random state.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

PREDICTION_TYPES = ("epsilon", "v_prediction", "sample")


@dataclass
class Frozen:
    """The parts of a pipeline that fine-tuning the UNet reads and does not train."""

    tokenizer: object
    text_encoder: torch.nn.Module
    vae: torch.nn.Module | None
    scheduler: object
    masked: bool = False
    """Whether the pipeline passes the tokenizer's attention mask to its text encoder (IF's does; Stable
    Diffusion's where the encoder's config says ``use_attention_mask``): the padding positions' states, which the
    UNet attends to, differ with it, so fine-tuning encodes as the pipeline will serve (``matching_mask``)."""

    @classmethod
    def of(cls, pipe) -> Frozen:
        extra = pipe.unet.config.get("addition_embed_type")
        if extra not in (None, "text"):  # SDXL's UNet also reads pooled text embeddings and the image's size and crop
            raise ValueError(f"the base's UNet takes added conditions ({extra!r}, as {type(pipe).__name__}'s does): "
                             "fine-tuning feeds it the text encoder's hidden states only; a UNet that needs no more "
                             "is supported (Stable Diffusion 1.x/2.x; IF, whose pooled text embedding it computes "
                             "from those states)")
        prediction = pipe.scheduler.config.get("prediction_type", "epsilon")
        if prediction not in PREDICTION_TYPES:
            raise ValueError(f"the base's scheduler predicts {prediction!r}: fine-tuning knows "
                             f"{list(PREDICTION_TYPES)}")
        vae = getattr(pipe, "vae", None)
        for part in (pipe.text_encoder, vae):
            if part is not None:
                part.requires_grad_(False).eval()
        frozen = cls(pipe.tokenizer, pipe.text_encoder, vae, pipe.scheduler)
        frozen.masked = frozen.matching_mask(pipe)
        return frozen

    @torch.no_grad()
    def matching_mask(self, pipe) -> bool:
        """Whether the pipeline's own ``encode_prompt`` uses the attention mask, read from what it returns for a
        caption and the empty caption (classifier-free guidance's); ValueError where neither way reproduces it."""
        import inspect

        probe = ["a small red circle at the top", ""]
        extra = {"clean_caption": False} if "clean_caption" in inspect.signature(pipe.encode_prompt).parameters \
            else {}
        theirs = pipe.encode_prompt(prompt=probe, device=torch.device("cpu"), num_images_per_prompt=1,
                                    do_classifier_free_guidance=False, **extra)[0]
        tokens = self.tokenize(probe)
        for masked in (False, True):
            self.masked = masked
            if torch.allclose(self.encode_text(tokens), theirs, atol=1e-5):
                return masked
        raise ValueError(f"{type(pipe).__name__}.encode_prompt encodes captions otherwise than its tokenizer and text "
                         "encoder do with or without the attention mask (a clip_skip, a prompt template?): "
                         "fine-tuning would condition the UNet on other states than serving gives it")

    def to(self, device: torch.device) -> Frozen:
        self.text_encoder.to(device)
        if self.vae is not None:
            self.vae.to(device)
        return self

    def tokenize(self, captions: list[str]) -> torch.Tensor:
        return tokenize(self.tokenizer, captions)

    @torch.no_grad()
    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, tokens, width): the encoder's last hidden states of the captions' ids (``tokenize``), under their
        attention mask where the pipeline passes it."""
        device = next(self.text_encoder.parameters()).device
        ids, mask = tokens.to(device).unbind(1)
        return self.text_encoder(ids, attention_mask=mask if self.masked else None, return_dict=False)[0]

    @torch.no_grad()
    def encode_pictures(self, pixels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """What the UNet denoises: the pixels themselves, or the autoencoder's latents of them."""
        if self.vae is None:
            return pixels
        latents = self.vae.encode(pixels.to(self.vae.dtype)).latent_dist.sample(generator)
        config = self.vae.config
        shift = config.get("shift_factor") or 0.0
        return (latents - shift) * config.get("scaling_factor", 1.0)


def tokenize(tokenizer, captions: list[str]) -> torch.Tensor:
    """(B, 2, tokens): the captions' ids and attention mask, padded and cut to the tokenizer's length, as the
    pipelines tokenize them."""
    t = tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                  return_tensors="pt")
    return torch.stack([t.input_ids, t.attention_mask], dim=1)


def denoising_loss(unet, frozen: Frozen, pixels: torch.Tensor, ids: torch.Tensor, generator: torch.Generator,
                   caption_dropout: float = 0.0) -> torch.Tensor:
    """The mean squared error of ``unet``'s prediction for ``pixels`` (B, 3, H, W in [-1, 1]) captioned by ``ids``
    (``Frozen.tokenize``: ids and mask), at one random timestep each. ``unet`` may be DDP-wrapped: it is called,
    not reached into."""
    device = pixels.device
    if caption_dropout > 0:
        dropped = torch.rand(len(ids), generator=generator) < caption_dropout
        ids = torch.where(dropped[:, None, None], frozen.tokenize([""]).expand_as(ids), ids)
    context = frozen.encode_text(ids)
    clean = frozen.encode_pictures(pixels, generator)
    scheduler = frozen.scheduler
    noise = torch.randn(clean.shape, generator=generator).to(device)
    steps = torch.randint(0, scheduler.config.num_train_timesteps, (clean.shape[0],), generator=generator).to(device)
    noisy = scheduler.add_noise(clean, noise, steps)
    prediction = scheduler.config.get("prediction_type", "epsilon")
    target = {"epsilon": noise, "sample": clean}.get(prediction)
    if target is None:
        target = scheduler.get_velocity(clean, noise, steps)
    out = unet(noisy, steps, encoder_hidden_states=context.to(noisy.dtype), return_dict=False)[0]
    out = out[:, : clean.shape[1]]  # a UNet that also predicts a variance: its noise half
    return F.mse_loss(out.float(), target.float())


def trainable_unet(folder: Path, finetune: str = "full", rank: int = 8, alpha: float = 16.0):
    """The base's UNet to fine-tune: every weight (``full``), or LoRA adapters (``peft``) on its attention
    projections with the rest frozen (``lora``); and the frozen rest of the pipeline."""
    from aigc.workloads.hf_diffusion.base import load_pipeline

    pipe = load_pipeline(folder)
    unet = pipe.unet
    if finetune == "lora":
        from peft import LoraConfig

        unet.requires_grad_(False)
        unet.add_adapter(LoraConfig(r=rank, lora_alpha=alpha, init_lora_weights="gaussian",
                                    target_modules=["to_k", "to_q", "to_v", "to_out.0"]))
    elif finetune != "full":
        raise ValueError(f"finetune must be 'full' or 'lora', got {finetune!r}")
    return unet.train(), Frozen.of(pipe)
