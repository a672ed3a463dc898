"""The text workload's own settings (``cfg.workload.settings`` when the workload is ``text``): its documents,
tokenizer and model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from aigc.config import check_order, check_range


@dataclass(frozen=True)
class TextSettings:
    """Long documents → a small decoder-only transformer."""

    workload: ClassVar[str] = "text"
    """Whose settings these are: error messages name the flags and the form field that set them."""
    gate_bounds: ClassVar[tuple[str, ...]] = ("min_text_agreement", "max_perplexity")
    """Settings that only judge a run (``Workload.settings``: a resumed run does not compare them)."""

    min_chars: int = 40
    """Documents shorter than this after normalisation are quarantined (``text_too_short``)."""
    max_chars: int = 200_000
    """…and longer ones too (``text_too_long``; about 40k tokens): quarantined, not cut."""
    min_clean_fraction: float = 0.98
    """Characters that must be letters, digits, punctuation or spaces (``text_charset``): binary or mojibake fails."""
    shingle_words: int = 5
    """Near-duplicate documents share word shingles of this many words (MinHash over them)."""
    vocab_size: int = 512
    """Byte-level BPE merges learnt from the training window (stored with the model)."""
    layers: int = 4
    width: int = 128
    heads: int = 4
    context: int = 1024
    """Training window in tokens: a document longer than this trains on its first ``context`` tokens."""
    new_tokens: int = 48
    """Tokens generated after each prompt (greedy; fewer when the model ends the text)."""
    min_text_agreement: float = 0.5
    """Gate 3: the mean fraction of fp32's continuation (in characters) a variant reproduces before its first
    difference, on the smoke prompts (greedy decoding: a bf16 rounding may flip one token, and all after it)."""
    max_perplexity: float = 3.0
    """Gate 5: held-out perplexity (per token) may not be significantly above this. The demo model's is 1.92
    [1.90, 1.94]; an untrained one's is near the vocabulary's size."""
    mean_items: float = 60.0
    """Synthetic drop: the median document holds this many scene lines (long-tailed, 3 to ``max_items``)."""
    max_items: int = 1800

    def __post_init__(self) -> None:
        check_range(self, "min_chars", 1, 10_000_000)
        check_range(self, "max_chars", 1, 100_000_000)
        check_order(self, "min_chars", "max_chars")
        check_range(self, "min_clean_fraction", 0.0, 1.0)
        check_range(self, "shingle_words", 1, 64)
        check_range(self, "vocab_size", 260, 1 << 17)
        check_range(self, "layers", 1, 64)
        check_range(self, "width", 16, 8192)
        check_range(self, "heads", 1, 256)
        if self.width % self.heads or (self.width // self.heads) % 2:
            raise ValueError(f"TextSettings.width ({self.width}) must split into {self.heads} heads of an even "
                             "width (rotary positions rotate pairs)")
        check_range(self, "context", 16, 1 << 20)
        check_range(self, "new_tokens", 1, 1 << 16)
        check_range(self, "min_text_agreement", 0.0, 1.0)
        check_range(self, "max_perplexity", 1.0, 1e12)
        check_range(self, "mean_items", 1.0, 1e6)
        check_range(self, "max_items", 3, 10_000_000)
