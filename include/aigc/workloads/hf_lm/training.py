"""The ``hf-causal-lm`` workload's stage 2: fine-tuning the base model on the window's documents, every weight
(``finetune: full``) or low-rank adapters on the frozen base (``lora``, merged into its weights before registering).

A sample is one curated document's first ``context + 1`` tokens in the base's tokenizer (end of text appended where
it fits); the loss is next-token cross-entropy over real tokens (nats per token). Every rank loads the base's
weights from the same local folder (``base.local_folder``), so the run starts where the base is, and the model card
pins the base by its files' hashes.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F

from aigc.workload import Loss, TrainingTask
from aigc.workloads.hf_lm.base import (
    DEMO_PREFIX,
    TOKENIZER_PREFIXES,
    fingerprint,
    load_model,
    load_tokenizer,
    local_folder,
)
from aigc.workloads.text.training import WindowTexts

CHARS_PER_TOKEN_BOUND = 16
"""Tokenizing a document's first (context + 1) · this many characters gives its first context + 1 tokens (a token
of a byte-level or sentencepiece vocabulary covers fewer characters than this)."""


class HFTrainingTask(TrainingTask):
    def __init__(self, lake, index, cfg):
        self.lake, self.index, self.settings = lake, index, cfg.workload.settings
        self.folder = local_folder(self.settings.base_model_uri, self.settings.demo_architecture,
                                   getattr(lake, "options", None))
        self.tokenizer = load_tokenizer(self.folder)
        self.config = json.loads((self.folder / "config.json").read_text())
        self.context = _context(self.settings.context, self.config)
        self.texts = WindowTexts(lake, index)
        self._encoded: OrderedDict[int, np.ndarray] = OrderedDict()
        self._val = index.split(cfg.train.val_fraction, cfg.train.val_max)[1]  # the loop's validation split
        self.confidence = cfg.evaluate.confidence
        self.model = None

    def tokens(self, sample: int) -> np.ndarray:
        if sample in self._encoded:
            self._encoded.move_to_end(sample)
            return self._encoded[sample]
        n = self.context + 1
        text = self.texts.of_sample(sample)
        ids = self.tokenizer(text[: n * CHARS_PER_TOKEN_BOUND], add_special_tokens=False)["input_ids"]
        out = np.asarray([*ids, self.tokenizer.eos_token_id][:n], dtype=np.int64)
        self._encoded[sample] = out
        while len(self._encoded) > 4096:
            self._encoded.popitem(last=False)
        return out

    def build_model(self):
        model = load_model(self.folder)
        s = self.settings
        if s.finetune == "lora":
            from peft import LoraConfig, get_peft_model

            targets = [t.strip() for t in s.lora_targets.split(",") if t.strip()] or None
            model = get_peft_model(model, LoraConfig(r=s.lora_rank, lora_alpha=s.lora_alpha, lora_dropout=0.0,
                                                     target_modules=targets, task_type="CAUSAL_LM"))
        self.model = model  # trained in place: stats() measures it against the base
        return model

    def weights(self, model):
        if self.settings.finetune != "lora":
            return model.state_dict()
        import copy

        # The base's own names and shapes (what serving loads): the adapters folded into a copy of the weights.
        return copy.deepcopy(model).merge_and_unload().state_dict()

    def batch(self, samples):
        seqs = [self.tokens(int(i)) for i in samples]
        longest = max(len(s) for s in seqs)
        ids = np.full((len(seqs), longest), self.tokenizer.pad_token_id, dtype=np.int64)
        for row, seq in zip(ids, seqs, strict=True):
            row[: len(seq)] = seq
        return torch.from_numpy(ids), torch.tensor([len(s) for s in seqs], dtype=torch.int64)

    def loss(self, model, batch, *, train):
        ids, lengths = batch
        inputs = ids[:, :-1]
        real = torch.arange(inputs.shape[1], device=ids.device)[None, :] < (lengths[:, None] - 1)
        logits = model(input_ids=inputs, attention_mask=real.long()).logits
        per_token = F.cross_entropy(logits.float().transpose(1, 2), ids[:, 1:], reduction="none")
        return Loss((per_token * real).sum() / real.sum().clamp(min=1), {})

    @cached_property
    def base(self) -> dict:
        """The base's fingerprint (its files' hashes: the weights read once, when the card or a warm start needs it)."""
        return fingerprint(self.folder)

    def card(self):
        return {"hf": {"config": self.config, "base_uri": self.settings.base_model_uri or
                       f"{DEMO_PREFIX}{self.settings.demo_architecture}", "base": self.base, "context": self.context,
                       "new_tokens": self.settings.new_tokens, "temperature": self.settings.temperature,
                       "top_p": self.settings.top_p}}

    def files(self):
        # With these beside model.safetensors (the base's names, adapters merged), the run's folder and the
        # registry's version are save_pretrained folders: AutoModelForCausalLM and AutoTokenizer load them as they are.
        out = {"config.json": self.folder.joinpath("config.json").read_bytes()}
        for path in sorted(self.folder.iterdir()):
            if path.is_file() and (path.name.startswith(TOKENIZER_PREFIXES) or path.name == "generation_config.json"):
                out[path.name] = path.read_bytes()
        return out

    def adopt(self, card):
        # A version of the same base (by its files' hashes) continues; another base's weights mean other tokens.
        theirs = (card.get("hf") or {}).get("base", {}).get("sha256")
        if theirs != self.base["sha256"]:
            return f"it was fine-tuned from another base (sha256 {theirs}, not {self.base['sha256']})"
        return None

    def stats(self):
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad) if self.model else None
        return {"read_shards": self.texts.read_shards, "base_sha256": self.base["sha256"],
                "finetune": self.settings.finetune, "trainable_parameters": trainable,
                "versus_base": self.versus_base()}

    def versus_base(self) -> dict | None:
        """The trained model's held-out perplexity against its base's on the run's validation documents, paired
        (gate 2 reads it): measured once, on the rank that writes the summary."""
        from aigc.workloads.hf_lm.perplexity import document_nll, paired_perplexity

        if self.model is None or not len(self._val):
            return None
        texts = [self.texts.of_sample(int(i)) for i in self._val]
        self.model.eval()
        tuned, counts = document_nll(self.model, self.tokenizer, texts, self.context)
        base, _ = document_nll(load_model(self.folder).to(next(self.model.parameters()).device), self.tokenizer,
                               texts, self.context)
        paired = paired_perplexity(tuned, base, counts, self.confidence)
        return {"perplexity": paired["perplexity"], "base_perplexity": paired["base_perplexity"],
                "ratio": paired["ratio"].to_dict()}


def _context(wanted: int, config: dict) -> int:
    """The training window: ``wanted`` tokens, never past the positions the base has (its max_position_embeddings)."""
    limit = config.get("max_position_embeddings") or config.get("n_positions") or wanted
    return min(wanted, int(limit) - 1)


def versus_base_table(evidence: dict | None, cfg):
    """Gate 2's table for a fine-tuned model: its held-out perplexity over its base's, paired on the run's validation
    documents, must be significantly below ``max_perplexity_ratio`` (the interval's upper end): a run that made the
    base no better at the user's documents, or that cannot show it, is not handed to deployment."""
    import great_expectations.expectations as gxe
    import pandas as pd

    from aigc.config.form import how_to_set, how_to_set_setting
    from aigc.quality.evaluation import figure
    from aigc.quality.gate import Table

    limit = cfg.workload.settings.max_perplexity_ratio
    ratio = (evidence or {}).get("ratio") or {}
    upper = ratio.get("hi")
    frame = pd.DataFrame([{"perplexity_vs_base_hi": float("inf") if upper is None else upper}])
    return Table("versus_base", frame, [
        gxe.ExpectColumnValuesToBeBetween(column="perplexity_vs_base_hi", max_value=limit, strict_max=True),
    ], explain={"perplexity_vs_base_hi": (
        f"the fine-tuned model's held-out perplexity is {figure(ratio, '{:.3f}')} times its base model's on the run's "
        f"validation documents, not significantly below {limit:g}: fine-tuning did not make it better at the "
        f"documents than where it started, or too few documents show it ({how_to_set('train', 'val_max')} and "
        f"more data widen the sample). Train longer ({how_to_set('train', 'steps')}) or lower the learning rate "
        f"({how_to_set('train', 'lr')}); or raise {how_to_set_setting('hf-causal-lm', 'max_perplexity_ratio')}")})
