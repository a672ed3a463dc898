"""A small base pipeline built from configs, for the demo and the tests: nothing is downloaded.

``build_demo_base`` writes a ``diffusers`` pipeline with ``save_pretrained``, every model with **random weights**
(seeded), and a tokenizer learnt offline with ``tokenizers`` from the image workload's caption grammar:

* ``pixel``: ``IFPipeline`` (DeepFloyd IF's stage-1 pipeline: denoising in pixel space) at 32 px, a conditional
  UNet (two levels, cross-attention on the second), a 2-layer CLIP text encoder, a DDPM scheduler with a fixed
  variance. IF's UNet predicts a variance beside the noise (6 channels for 3); the demo trains the noise half
  only, as a fixed-variance scheduler reads no more. What the demo fine-tunes.
* ``latent``: ``StableDiffusionPipeline``: the same UNet on a 4-channel latent of a one-level ``AutoencoderKL``
  (32 px in, 16 px latent) with random weights: a second configuration for the tests' plumbing (its pictures are
  noise until its autoencoder is trained: a real Stable Diffusion folder has a trained one).

The pipeline loads it with the same code as a user's folder (``base``), so the demo exercises the real loading
path. ``demo_folder`` keeps one per architecture in this machine's cache (``hf_folder.cache_root``), built once by
whichever process gets there first (it builds in a folder of its own and renames it; a loser's copy is removed).
"""

from __future__ import annotations

from pathlib import Path

from aigc.workloads.hf_folder import built_once

ARCHITECTURES = ("pixel", "latent")
RESOLUTION = 32
TEXT_WIDTH = 32
MAX_TOKENS = 77
"""CLIP's prompt length: what the pipelines pad and cut prompts to."""
BOS, EOS = "<|startoftext|>", "<|endoftext|>"
LAYOUT_VERSION = "v2"
"""Part of a demo base's cache folder's name: a changed config here builds a new base, not reuses an older one."""


def _captions(n: int = 2000, seed: int = 0) -> list[str]:
    import random

    from aigc.workloads import world

    rng = random.Random(f"hf-diffusion-demo-base/{seed}")
    return [world.random_scene(rng).caption for _ in range(n)]


def build_tokenizer(folder: Path, seed: int = 0) -> None:
    """A CLIP tokenizer (its ``vocab.json`` and ``merges.txt``) learnt with ``tokenizers`` from the caption grammar:
    lower-case word pieces ending in ``</w>``, as CLIP's are."""
    import json

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import CLIPTokenizer

    bpe = Tokenizer(models.BPE(end_of_word_suffix="</w>", unk_token=EOS))
    bpe.normalizer = normalizers.Lowercase()
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=[BOS, EOS], end_of_word_suffix="</w>",
                                  show_progress=False)
    bpe.train_from_iterator(_captions(seed=seed), trainer)
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tokenizer = CLIPTokenizer(vocab=model["vocab"], merges=merges, model_max_length=MAX_TOKENS, bos_token=BOS,
                              eos_token=EOS, unk_token=EOS, pad_token=EOS)
    tokenizer.save_pretrained(folder)


def build_demo_base(folder: Path, architecture: str = "pixel", seed: int = 0) -> Path:
    """Write a demo base of ``architecture`` (pixel or latent) into ``folder`` with ``save_pretrained``."""
    import torch
    from diffusers import AutoencoderKL, DDPMScheduler, IFPipeline, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    if architecture not in ARCHITECTURES:
        raise ValueError(f"no demo base of architecture {architecture!r}: one of {list(ARCHITECTURES)}")
    torch.manual_seed(seed)
    staging = folder / "tokenizer"
    build_tokenizer(staging, seed)
    tokenizer = CLIPTokenizer.from_pretrained(staging, local_files_only=True)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=TEXT_WIDTH, intermediate_size=2 * TEXT_WIDTH, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=MAX_TOKENS, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id))
    pixel = architecture == "pixel"
    channels = 3 if pixel else 4
    unet = UNet2DConditionModel(
        sample_size=RESOLUTION if pixel else RESOLUTION // 2, in_channels=channels,
        out_channels=2 * channels if pixel else channels, layers_per_block=1, block_out_channels=(32, 64),
        norm_num_groups=8, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=TEXT_WIDTH, attention_head_dim=8,
        # As IF's UNet: the text's pooled embedding joins the timestep's, reaching every block (the cross-attention
        # reaches the second level only), so colour, size and place condition the whole image from the first steps.
        addition_embed_type="text", addition_embed_type_num_heads=4)
    scheduler = DDPMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2", variance_type="fixed_small",
                              clip_sample=pixel, steps_offset=1)
    if pixel:
        pipe = IFPipeline(tokenizer=tokenizer, text_encoder=text_encoder, unet=unet, scheduler=scheduler,
                          safety_checker=None, feature_extractor=None, watermarker=None,
                          requires_safety_checker=False)
    else:
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32),
                            down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                            norm_num_groups=8, sample_size=RESOLUTION)
        pipe = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                       scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)
    pipe.save_pretrained(folder, safe_serialization=True)
    return folder


def demo_folder(architecture: str = "pixel") -> Path:
    """The demo base of ``architecture`` in this machine's cache, built there once (``hf_folder.built_once``): the
    fingerprint a model card records lets a server check it holds the base its version was trained from."""
    import diffusers

    return built_once(f"demo-diffusion-{architecture}-{LAYOUT_VERSION}-diffusers-{diffusers.__version__}",
                      lambda folder: build_demo_base(folder, architecture),
                      f"the demo base pipeline {architecture} (diffusers)")
