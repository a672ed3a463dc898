"""The ``hf-causal-lm`` workload's stage 5: judged with no grammar, against its own base.

* **Acceptable continuations** (the alignment gate 5 reads, a Wilson interval over outputs): an output is acceptable
  when it is not empty, does not loop (at most ``max_repetition`` of its word 4-grams repeat an earlier one of it)
  and holds no blocked term. The evaluation prompts are the day's held-out documents (the curated validation
  split, which training never saw) cut after a seeded number of tokens: the user's own data, not a reference world.
* **Perplexity against the base**, paired: the fine-tuned model's and the base's negative log-likelihood on the same
  held-out documents (each its first ``context + 1`` tokens), the ratio of the two perplexities with a bootstrap
  interval over documents (the same resample for both). Gate 5 passes it only when the interval's upper end is below
  ``max_perplexity_ratio`` (1: the fine-tuned model must be better than where it started, on evidence).
* Figures beside them: distinct bigrams, repetition, memorisation (12-word runs found verbatim in the training
  window), mean continuation length; the review queue puts first the continuations the model was least sure of.
"""

from __future__ import annotations

import random
import re

import numpy as np
import torch
import torch.nn.functional as F

from aigc.evaluate.stage import Judge, Judged
from aigc.safety import blocked_term
from aigc.workloads.hf_lm.perplexity import document_nll, paired_perplexity
from aigc.workloads.text.evaluation import decoder_answers, distinct_2, held_out_documents, least_sure_lines, memorised


def repeated_ngrams(text: str, n: int = 4) -> float:
    """The share of an output's word ``n``-grams that repeat an earlier one of the same output: near 1 for a model
    caught in a loop ("the cat the cat the cat"), near 0 for prose."""
    words = re.findall(r"\w+", text.lower())
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return (len(grams) - len(set(grams))) / len(grams) if grams else 0.0


def acceptable(text: str, blocklist, max_repetition: float) -> bool:
    return bool(text.strip()) and repeated_ngrams(text) <= max_repetition and blocked_term(text, blocklist) is None


class HFJudge(Judge):
    def __init__(self, lake, ev, cfg, workload):
        super().__init__(lake, ev, cfg, workload)
        self.settings = cfg.workload.settings
        self.fp32 = self.load(ev.version, "fp32")
        self.held_out, self.training = held_out_documents(lake, cfg, ev.date)
        if not self.held_out:
            raise ValueError(f"the curated partition of {ev.date} has no held-out documents to evaluate on (the "
                             "validation split is empty): curate more documents, or raise train.val_fraction")

    def ok(self, text: str) -> bool:
        return acceptable(text, self.cfg.prepare.blocklist, self.settings.max_repetition)

    def content(self, generated):
        return Judged.of([self.ok(r["text"]) for r in generated], self.cfg.evaluate.confidence)

    def unsafe(self, row):
        blocklist = self.cfg.prepare.blocklist
        return blocked_term(row["prompt"], blocklist) is not None or blocked_term(row["text"], blocklist) is not None

    def eval_prompts(self, n):
        """Prompt i: held-out document i (mod their number) cut after a seeded 8 to context − new_tokens tokens, so
        the first n of a longer look are the same."""
        seed, tok = self.cfg.evaluate.seed, self.fp32.tokenizer
        longest = max(8, self.fp32.context - self.fp32.new_tokens)
        prompts = []
        for i in range(n):
            ids = tok(self.held_out[i % len(self.held_out)][: longest * 16], add_special_tokens=False)["input_ids"]
            cut = random.Random(f"hf-eval/{seed}/{i}").randint(min(8, len(ids)), max(8, min(longest, len(ids))))
            prompts.append({"prompt": tok.decode(ids[:cut]), "seed": seed + i})
        return prompts

    def judge(self, serving, prompts):
        return Judged.of([self.ok(o) for o in self.answer(serving, "adaptive", prompts)], self.cfg.evaluate.confidence)

    def answer(self, serving, policy, prompts):
        return decoder_answers(serving, policy, prompts, self.cfg)

    def figures(self, content, generated):
        from aigc.workloads.hf_lm.base import load_model

        fp32, e = self.fp32, self.cfg.evaluate
        tuned, counts = document_nll(fp32.model, fp32.tokenizer, self.held_out, fp32.context)
        base, _ = document_nll(load_model(fp32.base_folder), fp32.tokenizer, self.held_out, fp32.context)
        paired = paired_perplexity(tuned, base, counts, e.confidence)
        outputs = [r["text"] for r in generated]
        return {"perplexity": round(paired["perplexity"], 4), "base_perplexity": round(paired["base_perplexity"], 4),
                "perplexity_vs_base": paired["ratio"].value, "held_out_documents": len(counts),
                "distinct_2": round(distinct_2(outputs), 4),
                "repetition": round(sum(map(repeated_ngrams, outputs)) / len(outputs), 4) if outputs else None,
                "memorised": round(memorised(outputs, self.training[:2000]), 4),
                "mean_new_tokens": round(float(np.mean([r["new_tokens"] for r in generated])), 2)
                if generated else None,
                "validity_note": "alignment here is the share of acceptable continuations: not empty, not looping (at "
                                 f"most {self.settings.max_repetition:g} of word 4-grams repeated), no blocked term"}, \
            {"perplexity_vs_base": paired["ratio"].to_dict()}

    def review(self, generated, content, n, among=None):
        return least_sure_lines(self.ev.run_id, generated, content.verdicts, n, among,
                                lambda r: self._mean_logprob(r["prompt"], r["text"]))

    @torch.no_grad()
    def _mean_logprob(self, prompt: str, output: str) -> float:
        s = self.fp32
        p_ids = s.items([{"prompt": prompt, "seed": 0}])[0].ids
        o_ids = s.tokenizer(output, add_special_tokens=False)["input_ids"][: s.new_tokens]
        if not o_ids:
            return 0.0
        x = torch.tensor([p_ids + o_ids], device=s.device)
        logp = F.log_softmax(s.model(input_ids=x[:, :-1]).logits.float(), dim=-1)[0, len(p_ids) - 1:]
        return float(logp.gather(1, torch.tensor(o_ids, device=s.device)[:, None]).mean())

    def summary(self, metrics):
        return {"perplexity": metrics["perplexity"], "base_perplexity": metrics["base_perplexity"]}


def hf_checks(metrics: dict, t, settings) -> list:
    """Gate 5: the acceptable share of the day's continuations and of the recommended configuration's, perplexity
    against the base (paired, on evidence), safety."""
    from aigc.config.form import how_to_set, how_to_set_setting
    from aigc.quality.evaluation import alignment_checks, evidence_check, figure
    from aigc.workloads.text.evaluation import safety_check

    ratio = metrics["intervals"].get("perplexity_vs_base") or {}
    longer = f"Train longer or on more data ({how_to_set('train', 'steps')})"
    return [
        *alignment_checks(metrics, t, (
            "acceptable share of the day's continuations",
            "the share of the day's continuations that are non-empty, not looping and free of blocked terms is "
            f"{{figure}}, significantly below the minimum {{minimum}}. {longer}; or lower "
            f"{how_to_set('evaluate_gate', 'min_alignment')}."), (
            "acceptable share of the recommended configuration on the evaluation prompts",
            "the recommended configuration answers {figure} of the evaluation prompts acceptably, significantly "
            f"below the minimum {{minimum}}. {longer}.")),
        evidence_check("perplexity_vs_base", "held-out perplexity over the base model's", ratio,
                       settings.max_perplexity_ratio,
                       f"the fine-tuned model's held-out perplexity is {figure(ratio, '{:.3f}')} times its base "
                       f"model's on the same documents, not below the maximum {settings.max_perplexity_ratio:g}: "
                       f"fine-tuning did not make it predict the user's documents better. {longer}, or lower the "
                       f"learning rate ({how_to_set('train', 'lr')}); or raise "
                       f"{how_to_set_setting('hf-causal-lm', 'max_perplexity_ratio')}.",
                       at_least=False, scale="{:.3f}",
                       more=f"It rests on the day's {ratio.get('n', 0)} held-out documents (the curated validation "
                            "split): a day with more documents narrows it."),
        safety_check(metrics),
    ]
