"""A small base model built from a config, for the demo and the tests: nothing is downloaded.

``build_demo_base`` writes a ``save_pretrained`` folder: a byte-level BPE learnt with ``tokenizers`` from the text
workload's reference logs and wrapped as a ``PreTrainedTokenizerFast``, and a model of a ``transformers``
architecture with **random weights** (seeded): ``llama`` (2 layers, grouped-query attention: 4 query heads share
2 key/value heads) or ``gpt2`` (2 layers, learnt positions, tied embeddings). The pipeline loads it with the same
code as a user's folder (``base``), so the demo exercises the real loading path.

``demo_folder`` keeps one per architecture in this machine's cache (``hf_folder.cache_root``), built once by
whichever process gets there first (it builds in a folder of its own and renames it; a loser's copy is removed).
"""

from __future__ import annotations

import random
from pathlib import Path

from aigc.workloads.hf_folder import built_once

VOCAB = 512
CONTEXT = 1024
"""The demo base's position limit (``max_position_embeddings``): longer prompts keep their last tokens."""


def _corpus(n: int = 400, seed: int = 0) -> list[str]:
    from aigc.workloads.text.corpus import document

    rng = random.Random(f"hf-demo-base/{seed}")
    return [document(rng, rng.randint(3, 60), f"base{i}") for i in range(n)]


def build_demo_base(folder: Path, architecture: str = "llama", seed: int = 0) -> Path:
    """Write a demo base of ``architecture`` (llama or gpt2) into ``folder`` with ``save_pretrained``."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, PreTrainedTokenizerFast

    from aigc.workloads.text.tokenizer import EOS, PAD, train_tokenizer

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(_corpus(seed=seed), VOCAB),
                                        eos_token=EOS, bos_token=EOS, pad_token=PAD, model_max_length=CONTEXT)
    ids = {"vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id,
           "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    if architecture == "llama":
        config = LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=CONTEXT, tie_word_embeddings=True, **ids)
    elif architecture == "gpt2":
        config = GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=CONTEXT, **ids)
    else:
        raise ValueError(f"no demo base of architecture {architecture!r}: llama or gpt2")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def demo_folder(architecture: str = "llama") -> Path:
    """The demo base of ``architecture`` in this machine's cache, built there once (``hf_folder.built_once``): the
    fingerprint a model card records lets a server check it holds the base its version was trained from."""
    import transformers

    return built_once(f"demo-{architecture}-transformers-{transformers.__version__}",
                      lambda folder: build_demo_base(folder, architecture), f"the demo base {architecture} model")
