"""Held-out perplexity of a fine-tuned model against its base, paired on the same documents: gate 2 (on the run's
validation split, ``training``) and gate 5 (on the day's, ``evaluation``) read the same figure."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from aigc.evaluate.stats import bootstrap


@torch.no_grad()
def document_nll(model, tokenizer, texts: list[str], context: int) -> tuple[np.ndarray, np.ndarray]:
    """(summed negative log-likelihood, predicted tokens) of each document's first ``context + 1`` tokens."""
    device = next(model.parameters()).device
    nll, counts = [], []
    for text in texts:
        ids = tokenizer(text[: (context + 1) * 16], add_special_tokens=False)["input_ids"][: context + 1]
        if len(ids) < 2:
            continue
        x = torch.tensor([ids], device=device)
        logits = model(input_ids=x[:, :-1]).logits.float()
        nll.append(float(F.cross_entropy(logits[0], x[0, 1:], reduction="sum")))
        counts.append(len(ids) - 1)
    return np.asarray(nll), np.asarray(counts, dtype=np.float64)


def paired_perplexity(tuned: np.ndarray, base: np.ndarray, counts: np.ndarray, confidence: float) -> dict:
    """Both perplexities on the same documents and their ratio (tuned / base) with a bootstrap interval over
    documents, each resample drawing the same documents for both models."""
    def ratio(pick: np.ndarray) -> float:
        return math.exp((tuned[pick].sum() - base[pick].sum()) / counts[pick].sum())

    every = np.arange(len(counts))
    estimate = bootstrap(lambda rng: ratio(rng.integers(0, len(counts), len(counts))), ratio(every), len(counts),
                         confidence=confidence)
    return {"perplexity": math.exp(tuned.sum() / counts.sum()), "base_perplexity": math.exp(base.sum() / counts.sum()),
            "ratio": estimate}
