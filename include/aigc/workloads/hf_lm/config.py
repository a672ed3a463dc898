"""The ``hf-causal-lm`` workload's own settings (``cfg.workload.settings``): where the base model is, how long a
training sample and a continuation are, and the text drop's rules (the text workload's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from aigc.config import check_order, check_range

ARCHITECTURES = ("llama", "gpt2")
FINETUNE = ("full", "lora")
"""The demo bases this package builds from a config when no base model is given (``demo_base``)."""


@dataclass(frozen=True)
class HFLMSettings:
    """A Hugging Face causal LM, fine-tuned on long documents."""

    workload: ClassVar[str] = "hf-causal-lm"
    """Whose settings these are: error messages name the flags and the form field that set them."""
    gate_bounds: ClassVar[tuple[str, ...]] = ("min_text_agreement", "max_logprob_kl", "max_perplexity_ratio",
                                              "max_repetition")
    """Settings that only judge a run (``Workload.settings``: a resumed run does not compare them)."""

    base_model_uri: str = ""
    """The model to fine-tune: a folder, or a folder in the lake (``s3://bucket/models/my-llm``), in the
    ``save_pretrained`` layout (config.json, safetensors weights, the tokenizer's files). Loaded with
    ``transformers`` from there only: nothing is downloaded, no remote code runs. Empty: a small demo base built
    from a config with random weights (``demo_architecture``), kept in the lake under ``bases/``."""
    demo_architecture: str = "llama"
    """The demo base when ``base_model_uri`` is empty: ``llama`` (grouped-query attention) or ``gpt2``."""
    finetune: str = "full"
    """``full``: every weight trains; ``lora``: low-rank adapters (``peft``) on the base's attention and MLP
    projections train and the base stays frozen, then the adapters are merged into the weights the registry keeps."""
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_targets: str = ""
    """Comma-separated module names the adapters wrap (``q_proj,v_proj``); empty: peft's default for the
    architecture."""
    context: int = 256
    """Training window in tokens: a document longer than this trains on its first ``context`` tokens (never more
    than the base's ``max_position_embeddings``)."""
    new_tokens: int = 32
    """Tokens generated after each prompt (greedy; fewer when the model ends the text): kept in the model card by
    training, so every variant of a version answers alike."""
    temperature: float = 0.8
    """Sampling temperature (0: greedy, which small models loop in): each prompt draws from its own generator seeded
    by its seed, so an output does not depend on what it is batched with. Kept in the model card, as is ``top_p``."""
    top_p: float = 0.95
    """Nucleus sampling: draw among the most likely tokens whose probabilities add up to this."""
    min_text_agreement: float = 0.5
    """Gate 3: the mean fraction of fp32's continuation (in characters) a variant reproduces before its first
    difference, on the smoke prompts."""
    max_logprob_kl: float = 0.05
    """Gate 3: a variant's mean KL divergence from fp32's next-token distributions, in nats per token, on fp32's
    greedy continuations of the smoke prompts (``HFServing.divergence``): at most this to serve."""
    max_perplexity_ratio: float = 1.0
    """Gate 5: the fine-tuned model's held-out perplexity over its base's, paired on the same documents, must be
    significantly below this (the interval's upper end): 1 means better than where it started, on evidence."""
    max_repetition: float = 0.5
    """Gate 5: a continuation is acceptable only if at most this share of its word 4-grams repeat an earlier one of
    it (a model caught in a loop repeats itself)."""
    min_chars: int = 40
    """Documents shorter than this after normalisation are quarantined (the text workload's rules)."""
    max_chars: int = 200_000
    min_clean_fraction: float = 0.98
    shingle_words: int = 5
    mean_items: float = 60.0
    """Synthetic drop (the text workload's logs): the median document holds this many scene lines."""
    max_items: int = 1800

    def __post_init__(self) -> None:
        if not isinstance(self.base_model_uri, str) or len(self.base_model_uri) > 1000:
            raise ValueError(f"HFLMSettings.base_model_uri must be a folder or lake URI (a string of at most 1000 "
                             f"characters), got {self.base_model_uri!r}")
        if self.demo_architecture not in ARCHITECTURES:
            raise ValueError(f"HFLMSettings.demo_architecture must be one of {list(ARCHITECTURES)}, got "
                             f"{self.demo_architecture!r}")
        if self.finetune not in FINETUNE:
            raise ValueError(f"HFLMSettings.finetune must be one of {list(FINETUNE)}, got {self.finetune!r}")
        check_range(self, "lora_rank", 1, 4096)
        check_range(self, "lora_alpha", 1e-3, 1e6)
        check_range(self, "context", 8, 1 << 20)
        check_range(self, "new_tokens", 1, 1 << 16)
        check_range(self, "temperature", 0.0, 10.0)
        check_range(self, "top_p", 1e-6, 1.0)
        check_range(self, "min_text_agreement", 0.0, 1.0)
        check_range(self, "max_logprob_kl", 0.0, 1e6)
        check_range(self, "max_perplexity_ratio", 1e-6, 1e12)
        check_range(self, "max_repetition", 0.0, 1.0)
        check_range(self, "min_chars", 1, 10_000_000)
        check_range(self, "max_chars", 1, 100_000_000)
        check_order(self, "min_chars", "max_chars")
        check_range(self, "min_clean_fraction", 0.0, 1.0)
        check_range(self, "shingle_words", 1, 64)
        check_range(self, "mean_items", 1.0, 1e6)
        check_range(self, "max_items", 3, 10_000_000)
