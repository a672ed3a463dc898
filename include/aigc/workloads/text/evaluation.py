"""The text workload's stage 5 (its ``Judge`` for the core's skeleton, ``aigc.evaluate.stage``): the
continuations judged, perplexity, long-context recall, the review order, the report.

Quality is the checker's validity (``checker.judge``: every complete line a scene of the grammar, items
numbered on, recalled facts right), a Wilson interval over outputs; held-out perplexity comes with a
bootstrap interval over documents; recall is probed at 512, 2,048 and 4,096 tokens back. The review queue
puts first the continuations the model was least sure of.
"""

from __future__ import annotations

import html
import json
import logging
import math
import random
import re

import numpy as np
import torch
import torch.nn.functional as F

from aigc.evaluate.stage import Judge, Judged, among_or_all
from aigc.evaluate.stats import bootstrap, wilson
from aigc.lake.keys import join
from aigc.safety import blocked_term
from aigc.workloads.text.checker import judge as judge_text
from aigc.workloads.text.checker import recall_right
from aigc.workloads.text.corpus import document

log = logging.getLogger(__name__)
RECALL_DISTANCES = (512, 2048, 4096)
TOKENS_PER_ITEM_LINE = 12  # "Item 12: a small red circle at the top." under the demo's BPE: 11–13 tokens


def eval_prompts(n: int, seed: int) -> list[str]:
    """Log prefixes ending at an item's number, long-tailed like the demo prompts: the same for every config."""
    rng = random.Random(f"eval/{seed}")
    out = []
    for i in range(n):
        items = max(1, min(400, round(2.0 ** rng.uniform(0, 8.65))))
        lines = document(rng, items + 1, f"e{i}").split("\n")[: items + 1]
        out.append("\n".join(lines) + f"\nItem {items + 1}:")
    return out


def recall_probes(distance: int, n: int, seed: int) -> list[str]:
    """Logs whose item 2 lies about ``distance`` tokens before the end, asking for it back."""
    rng = random.Random(f"recall/{distance}/{seed}")
    items = max(3, distance // TOKENS_PER_ITEM_LINE)
    probes = []
    for i in range(n):
        lines = document(rng, items, f"r{i}").split("\n")[: items + 1]
        probes.append("\n".join(lines) + "\nRecall: item 2 is")
    return probes


@torch.no_grad()
def perplexity(serving, texts: list[str], confidence: float):
    """exp(mean NLL per token) over held-out documents (each its first ``context`` tokens), with a bootstrap
    interval over documents."""
    model, tok = serving.model, serving.tokenizer
    nll, counts = [], []
    for text in texts:
        ids = tok.encode(text[: (serving.context + 1) * 8]).ids[: serving.context + 1]
        if len(ids) < 2:
            continue
        x = torch.tensor([ids], device=serving.device)
        logits = model(x[:, :-1]).float()
        loss = F.cross_entropy(logits[0], x[0, 1:], reduction="sum")
        nll.append(float(loss))
        counts.append(len(ids) - 1)
    nll_a, counts_a = np.asarray(nll), np.asarray(counts, dtype=np.float64)
    if not len(nll_a):
        return None
    value = math.exp(nll_a.sum() / counts_a.sum())

    def resample(rng: np.random.Generator) -> float:
        pick = rng.integers(0, len(nll_a), len(nll_a))
        return math.exp(nll_a[pick].sum() / counts_a[pick].sum())

    return bootstrap(resample, value, len(nll_a), confidence=confidence)


@torch.no_grad()
def mean_logprob(serving, prompt: str, output: str) -> float:
    """How sure the model was of its own continuation: mean log-probability per generated token."""
    tok = serving.tokenizer
    p_ids = serving.prompt_ids([prompt])[0]
    o_ids = tok.encode(output).ids[: serving.new_tokens]
    if not o_ids:
        return 0.0
    x = torch.tensor([p_ids + o_ids], device=serving.device)
    logp = F.log_softmax(serving.model(x[:, :-1]).float(), dim=-1)[0, len(p_ids) - 1:]
    return float(logp.gather(1, torch.tensor(o_ids, device=serving.device)[:, None]).mean())


def repetition(output: str) -> float:
    """The share of an output's complete lines that repeat an earlier one of the same output (a loop)."""
    lines = [x for x in output.split("\n") if x.endswith(".")]
    return (len(lines) - len(set(lines))) / len(lines) if lines else 0.0


def distinct_2(outputs: list[str]) -> float:
    bigrams = [tuple(w[i:i + 2]) for o in outputs for w in [re.findall(r"\w+", o.lower())] for i in range(len(w) - 1)]
    return len(set(bigrams)) / len(bigrams) if bigrams else 0.0


def memorised(outputs: list[str], training: list[str], span: int = 12) -> float:
    """The share of outputs with a ``span``-word run found verbatim in the training texts."""
    seen = set()
    for text in training:
        words = re.findall(r"\w+", text.lower())
        seen.update(" ".join(words[i:i + span]) for i in range(len(words) - span + 1))
    hits = 0
    for o in outputs:
        words = re.findall(r"\w+", o.lower())
        hits += any(" ".join(words[i:i + span]) in seen for i in range(len(words) - span + 1))
    return hits / len(outputs) if outputs else 0.0


def decoder_answers(serving, policy: str, prompts: list[dict], cfg) -> list[str]:
    """A decoder's continuations by a batch policy (what the grid times): one prompt at a time (``batch1``), or stage
    4's batcher, prompts bucketed by token count under the serving's ``DecoderMemory``."""
    items = serving.items(prompts)
    if policy == "batch1":
        return [serving.output(x, serving.continue_items([x])[0])["text"] for x in items]
    from aigc.batching import AdaptiveBatcher, DeviceProbe

    def run(batch: list[int]) -> list[str]:
        chosen = [items[i] for i in batch]
        return [serving.output(x, t)["text"] for x, t in zip(chosen, serving.continue_items(chosen), strict=True)]

    probe = DeviceProbe("cpu", budget_fraction=cfg.batching.budget_fraction)
    batcher = AdaptiveBatcher(run, [serving.tokens_of(x) for x in items], serving.memory(), probe.budget_bytes,
                              **cfg.batching.batcher_options())
    return batcher()[0]


def held_out_documents(lake, cfg, date: str) -> tuple[list[str], list[str]]:
    """(the day's validation documents, which training never saw; the training documents)."""
    from aigc.train.data import load_window

    index = load_window(lake, cfg.prepare.dataset, date, 1, ("bytes",))
    _train, held_out = index.split(cfg.train.val_fraction, cfg.train.val_max)
    texts, training = [], []
    held = set(held_out.tolist())
    for s in sorted(set(index.shard_of.tolist())):
        column = index.shard(lake, s).read(columns=["text"]).column("text").to_pylist()
        for i in np.flatnonzero(index.shard_of == s).tolist():
            (texts if i in held else training).append(column[int(index.row_of[i])])
    return texts, training


class TextJudge(Judge):
    """The checker's validity on every continuation; perplexity and long-context recall on fp32."""

    def __init__(self, lake, ev, cfg, workload):
        super().__init__(lake, ev, cfg, workload)
        self.fp32 = self.load(ev.version, "fp32")

    def content(self, generated):
        verdicts = [judge_text(r["prompt"], r["text"]) for r in generated]
        return Judged.of([v["valid"] for v in verdicts], self.cfg.evaluate.confidence, detail=verdicts)

    def unsafe(self, row):
        blocklist = self.cfg.prepare.blocklist
        return blocked_term(row["prompt"], blocklist) is not None or blocked_term(row["text"], blocklist) is not None

    def eval_prompts(self, n):
        seed = self.cfg.evaluate.seed
        return [{"prompt": p, "seed": seed + i} for i, p in enumerate(eval_prompts(n, seed))]

    def judge(self, serving, prompts):
        outputs = self.answer(serving, "adaptive", prompts)
        return Judged.of([judge_text(p["prompt"], o)["valid"] for p, o in zip(prompts, outputs, strict=True)],
                         self.cfg.evaluate.confidence)

    def answer(self, serving, policy, prompts):
        return decoder_answers(serving, policy, prompts, self.cfg)

    def figures(self, content, generated):
        e, fp32 = self.cfg.evaluate, self.fp32
        outputs = [r["text"] for r in generated]
        texts, training = held_out_documents(self.lake, self.cfg, self.ev.date)
        ppl = perplexity(fp32, texts, e.confidence)
        # Long-context recall: item 2 asked back from about 512, 2,048 and 4,096 tokens on.
        n_recall = max(8, min(64, e.eval_prompts // 4))
        recall = {}
        for distance in RECALL_DISTANCES:
            probes = recall_probes(distance, n_recall, e.seed)
            answers = fp32.generate(probes, list(range(len(probes))))
            right = [recall_right(p, a) for p, a in zip(probes, answers, strict=True)]
            recall[str(distance)] = {**wilson(sum(right), len(right), e.confidence).to_dict(),
                                     "beyond_context": distance > fp32.context - fp32.new_tokens}
        verdicts = content.detail
        return {"perplexity": ppl.value if ppl else None, "held_out_documents": len(texts), "recall": recall,
                "distinct_2": round(distinct_2(outputs), 4),
                "repetition": round(sum(map(repetition, outputs)) / len(outputs), 4) if outputs else None,
                "memorised": round(memorised(outputs, training[:2000]), 4),
                "recall_lines_right": f"{sum(v['recalls_right'] for v in verdicts)}/"
                                      f"{sum(v['recalls'] for v in verdicts)}",
                "validity_note": "alignment here is the checker's validity: every complete generated line a scene "
                                 "of the grammar, items numbered on, recalled facts right"}, \
            {"perplexity": ppl.to_dict() if ppl else None}

    def review(self, generated, content, n, among=None):
        return least_sure_lines(self.ev.run_id, generated, content.verdicts, n, among,
                                lambda r: mean_logprob(self.fp32, r["prompt"], r["text"]))

    def summary(self, metrics):
        return {"perplexity": metrics["perplexity"], "recall": {d: r["value"] for d, r in metrics["recall"].items()}}


def least_sure_lines(run_id: str, generated: list[dict], verdicts: list[bool], n: int, among: list[int] | None,
                     logprob) -> list[dict]:
    """The ``n`` continuations of those ``among`` the model was least sure of (``logprob``: the mean
    log-probability of its own tokens) first, as review queue lines."""
    certainty = sorted(((logprob(generated[i]), generated[i], verdicts[i]) for i in among_or_all(generated, among)),
                       key=lambda x: x[0])[:n]
    return [{"run_id": run_id, "prompt_id": r["prompt_id"], "prompt_tail": r["prompt"][-200:], "text": r["text"],
             "mean_logprob": round(lp, 4), "checker_correct": v, "human_correct": None} for lp, r, v in certainty]


REPORT_FIGURES = ("perplexity", "base_perplexity", "perplexity_vs_base", "distinct_2", "repetition", "memorised",
                  "mean_new_tokens", "safety_violations", "recall_lines_right", "regression_vs_production")
"""The figures a text report lists, where the metrics have them (the hf-causal-lm workload's have no recall)."""


def write_text_report(lake, prefix: str, metrics: dict, points: list[dict], samples: list[dict],
                      quality: str = "Validity") -> str:
    """The report page of a text evaluation; ``quality``: what its alignment is (the checker's validity, or the
    hf-causal-lm workload's acceptable share)."""
    gate = metrics.get("gates", {}).get("evaluation") or {}
    from aigc.quality.evaluation import by_device_html, checks_html, gpu_html

    rows = checks_html(gate.get("checks", []))
    figures = {k: metrics[k] for k in REPORT_FIGURES if k in metrics}
    recall = "".join(f"<li>{d} tokens back: {r['value']} (n = {r['n']})"
                     f"{' — beyond the context' if r['beyond_context'] else ''}</li>"
                     for d, r in (metrics.get("recall") or {}).items())
    grid = "".join(f"<tr><td>{p['variant']}</td><td>{p['policy']}</td><td>{p['alignment']:.3f}</td>"
                   f"<td>{p['latency_ms']:.1f}</td></tr>" for p in points)
    texts = "".join(f"<pre>…{html.escape(s['prompt'][-120:])}<b>{html.escape(s['text'])}</b></pre>" for s in samples)
    title = f"{metrics['model']} {metrics['version']}, {metrics['date']}"
    page = (f"<html><head><meta charset='utf-8'><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>{quality} of the day's content: {metrics['intervals']['alignment']}</p>"
            f"<h2>Gate 5</h2>{rows}<h2>Figures</h2><pre>{html.escape(json.dumps(figures, indent=1))}"
            f"</pre>{f'<h2>Long-context recall</h2><ul>{recall}</ul>' if recall else ''}"
            f"<h2>Grid</h2><table><tr><th>variant</th>"
            f"<th>policy</th><th>{quality.lower()}</th><th>ms per prompt</th></tr>{grid}</table>"
            f"{by_device_html(metrics)}{gpu_html(metrics)}"
            f"<h2>Samples</h2>{texts}</body></html>")
    lake.put_bytes(join(prefix, "report.html"), page.encode())
    return join(prefix, "report.html")


def text_checks(metrics: dict, t, settings):
    """Gate 5 for text: the day's validity and the recommended configuration's, perplexity, safety."""
    from aigc.config.form import how_to_set, how_to_set_setting
    from aigc.quality.evaluation import alignment_checks, evidence_check, figure

    iv = metrics["intervals"]
    ppl = iv.get("perplexity") or {}
    longer = f"Train longer or on more data ({how_to_set('train', 'steps')})"
    return [
        *alignment_checks(metrics, t, (
            "validity of the day's continuations",
            "the share of the day's continuations whose every line follows the logs' rules is {figure}, "
            f"significantly below the minimum {{minimum}}. {longer}; or lower "
            f"{how_to_set('evaluate_gate', 'min_alignment')}."), (
            "validity of the recommended configuration on the evaluation prompts",
            "the recommended configuration continues {figure} of the fixed evaluation prompts validly, "
            f"significantly below the minimum {{minimum}}. {longer}.")),
        evidence_check("perplexity", "held-out perplexity", ppl, settings.max_perplexity,
                       f"held-out perplexity is {figure(ppl, '{:.3f}')}, significantly above the maximum "
                       f"{settings.max_perplexity:g}: the model predicts unseen logs poorly. {longer}; or raise "
                       f"{how_to_set_setting('text', 'max_perplexity')}.", at_least=False, scale="{:.3f}",
                       more=f"It rests on the day's {ppl.get('n', 0)} held-out documents (the curated validation "
                            "split): a day with more documents narrows it."),
        safety_check(metrics),
    ]


def safety_check(metrics: dict):
    from aigc.quality.evaluation import Check

    return Check("safety_violations", "continuations of blocked prompts, or with blocked terms",
                 float(metrics["safety_violations"]), 0.0, False, str(metrics["safety_violations"]),
                 f"{metrics['safety_violations']} continuation(s) answered a blocked prompt or contain a blocked term, "
                 "where the maximum is 0; this check has no threshold to change.")
