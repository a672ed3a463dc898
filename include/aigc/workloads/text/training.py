"""The text workload's stage 2: a BPE learnt from the window, documents as token sequences, next-token loss.

A training sample is one curated document's first ``context + 1`` tokens (its inputs and shifted targets).
Documents are long-tailed, so samples are too: the core's plan sorts them by cost (``sample_costs``) so a
step holds documents of similar length (little padding) and deals them so ranks do the same work. Texts
stay in the lake until a batch needs them, shard by shard (a bounded LRU of encoded documents).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F

from aigc.workload import Loss, TrainingTask
from aigc.workloads.text.model import TextLM
from aigc.workloads.text.tokenizer import load_tokenizer, special_ids, train_tokenizer

TOKENIZER_CHARS = 4_000_000
"""Characters of the window the BPE learns from (the first shards'): enough for its few hundred merges."""
CHARS_PER_TOKEN_BOUND = 8
"""Encoding a document's first (context + 1) · this many characters gives at least context + 1 tokens
(byte-level BPE tokens are ≥ 1 byte; the reference corpus averages ~4 characters per token)."""


class WindowTexts:
    """The window's documents, read from the lake shard by shard as batches need them (the last two shards kept:
    the balanced plan sorts samples by cost, so a step's samples come from few shards)."""

    def __init__(self, lake, index):
        self.lake, self.index = lake, index
        self._shards: OrderedDict[int, list[str]] = OrderedDict()
        self.read_shards = 0

    def of_shard(self, s: int) -> list[str]:
        if s in self._shards:
            self._shards.move_to_end(s)
            return self._shards[s]
        texts = self.index.shard(self.lake, s).read(columns=["text"]).column("text").to_pylist()
        self.read_shards += 1
        self._shards[s] = texts
        while len(self._shards) > 2:
            self._shards.popitem(last=False)
        return texts

    def of_sample(self, sample: int) -> str:
        return self.of_shard(int(self.index.shard_of[sample]))[int(self.index.row_of[sample])]


class TextTrainingTask(TrainingTask):
    def __init__(self, lake, index, cfg):
        self.lake, self.index, self.text = lake, index, cfg.workload.settings
        self.texts = WindowTexts(lake, index)
        self._encoded: OrderedDict[int, np.ndarray] = OrderedDict()
        self.tokenizer = train_tokenizer(self._tokenizer_texts(), self.text.vocab_size)
        self.pad_id, self.eos_id = special_ids(self.tokenizer)
        self.data_state = self.tokenizer.to_str()

    def _tokenizer_texts(self):
        budget = TOKENIZER_CHARS
        for s in range(len(self.index.shards)):
            for text in self.texts.of_shard(s):
                yield text[:budget]
                budget -= min(len(text), budget)
                if budget <= 0:
                    return

    def tokens(self, sample: int) -> np.ndarray:
        """The first context + 1 tokens of a document (its inputs and targets), end of text appended if it fits."""
        if sample in self._encoded:
            self._encoded.move_to_end(sample)
            return self._encoded[sample]
        n = self.text.context + 1
        text = self.texts.of_sample(sample)
        ids = self.tokenizer.encode(text[: n * CHARS_PER_TOKEN_BOUND]).ids + [self.eos_id]
        out = np.asarray(ids[:n], dtype=np.int64)
        self._encoded[sample] = out
        while len(self._encoded) > 4096:
            self._encoded.popitem(last=False)
        return out

    def build_model(self):
        t = self.text
        return TextLM(self.tokenizer.get_vocab_size(), t.layers, t.width, t.heads)

    def batch(self, samples):
        seqs = [self.tokens(int(i)) for i in samples]
        longest = max(len(s) for s in seqs)
        ids = np.full((len(seqs), longest), self.pad_id, dtype=np.int64)
        for row, seq in zip(ids, seqs, strict=True):
            row[: len(seq)] = seq
        return torch.from_numpy(ids), torch.tensor([len(s) for s in seqs], dtype=torch.int64)

    def loss(self, model, batch, *, train):
        ids, lengths = batch
        logits = model(ids[:, :-1])
        targets = ids[:, 1:]
        real = torch.arange(targets.shape[1], device=ids.device)[None, :] < (lengths[:, None] - 1)
        per_token = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
        nll = (per_token * real).sum() / real.sum().clamp(min=1)
        return Loss(nll, {})

    def card(self):
        return {"model": self._model_settings(), "tokenizer": self.data_state}

    def _model_settings(self) -> dict:
        import dataclasses

        return {k: v for k, v in dataclasses.asdict(self.text).items()
                if k in ("vocab_size", "layers", "width", "heads", "context", "new_tokens")}

    def adopt(self, card):
        # The version's tokenizer (byte-level BPE: it encodes any text) with its model: a token id means what it
        # meant when the weights learnt it. Learnt on older windows, it may cut new words into more pieces.
        if card.get("model") != self._model_settings():
            return f"its model settings {card.get('model')} are not the configured {self._model_settings()}"
        self.tokenizer = load_tokenizer(card["tokenizer"])
        self.pad_id, self.eos_id = special_ids(self.tokenizer)
        self.data_state = card["tokenizer"]
        self._encoded.clear()
        return None

    def stats(self):
        return {"read_shards": self.texts.read_shards}


def tokenizer_of(card: dict):
    return load_tokenizer(card["tokenizer"])
