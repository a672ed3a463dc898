"""A word-level tokenizer built from the curated captions themselves (no download, no hub)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import torch

PAD, UNK = "<pad>", "<unk>"
_WORD = re.compile(r"[a-z0-9]+")


def words(caption: str) -> list[str]:
    return _WORD.findall(caption.lower())


class Vocab:
    """Token ids for words: 0 is padding, 1 stands for any word not seen when the vocabulary was built."""

    def __init__(self, tokens: list[str]):
        if tokens[:2] != [PAD, UNK]:
            raise ValueError(f"a vocabulary starts with {[PAD, UNK]}, got {tokens[:2]}")
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def build(cls, captions: Iterable[str], max_size: int = 4096) -> Vocab:
        """Most frequent words first, ties alphabetical: the same captions give the same ids."""
        counts = Counter(w for c in captions for w in words(c))
        ranked = sorted(counts, key=lambda w: (-counts[w], w))[: max_size - 2]
        return cls([PAD, UNK, *ranked])

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, captions: list[str], max_tokens: int) -> torch.Tensor:
        """(B, max_tokens) int64, right-padded with 0; longer captions are cut at max_tokens words."""
        out = torch.zeros(len(captions), max_tokens, dtype=torch.int64)
        for row, caption in enumerate(captions):
            ids = [self.index.get(w, 1) for w in words(caption)[:max_tokens]]
            out[row, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
        return out

    def to_dict(self) -> dict:
        return {"tokens": self.tokens}

    @classmethod
    def from_dict(cls, data: dict) -> Vocab:
        return cls(data["tokens"])
