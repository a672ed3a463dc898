"""The text workload's stage 5: the day's continuations judged, perplexity, long-context recall, the grid.

    evaluations/<model>/dt=<date>/run=<id>/metrics.json   every figure gate 5 judges, with its interval
    evaluations/<model>/dt=<date>/run=<id>/pareto.json    the grid (variant × policy), its front, the choice
    evaluations/<model>/dt=<date>/run=<id>/review/queue.jsonl  the least certain continuations
    evaluations/<model>/dt=<date>/run=<id>/report.html    figures, checks, samples

Quality is the checker's validity (``checker.judge``: every complete line a scene of the grammar, items
numbered on, recalled facts right), a Wilson interval over outputs; held-out perplexity comes with a
bootstrap interval over documents; recall is probed at 512, 2,048 and 4,096 tokens back. The grid and the
recommendation use the image workload's rules (``aigc.evaluate.metrics.recommend``): the same prompts for
every configuration, paired intervals, cost only where it is faster in every timing round.
"""

from __future__ import annotations

import html
import json
import logging
import math
import random
import re
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from aigc.evaluate.metrics import pareto_front, recommend
from aigc.evaluate.stats import bootstrap, wilson
from aigc.lake.keys import join
from aigc.safety import blocked_term
from aigc.workloads.text.checker import judge, recall_right
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


def _timed(serving, prompts: list[str], policy: str, cfg) -> tuple[list[str], float]:
    """(outputs, ms per prompt) of one pass: one prompt at a time, or the stage's adaptive batcher."""
    t0 = time.perf_counter()
    if policy == "batch1":
        outputs = [serving.generate([p], [0])[0] for p in prompts]
    else:
        from aigc.batching import AdaptiveBatcher, DeviceProbe
        from aigc.workloads.text.generate import DecoderMemory, generate_ids

        ids = serving.prompt_ids(prompts)
        m = serving.model
        memory = DecoderMemory(layers=m.layers, width=m.width, heads=m.blocks[0].heads, vocab=m.head.out_features,
                               new_tokens=serving.new_tokens)
        probe = DeviceProbe("cpu", budget_fraction=cfg.batching.budget_fraction)
        batcher = AdaptiveBatcher(lambda b: [serving.tokenizer.decode(x) for x in generate_ids(
            m, [ids[i] for i in b], serving.new_tokens, serving.pad_id, serving.eos_id)], [len(x) for x in ids],
            memory, probe.budget_bytes)
        outputs = batcher()[0]
    return outputs, (time.perf_counter() - t0) * 1000 / max(1, len(prompts))


def evaluate_text(lake, generation: dict, cfg, *, run_id: str, workload) -> dict:
    from aigc.evaluate.scored import Evaluation
    from aigc.registry.loader import load_serving
    from aigc.train.data import load_window

    e = cfg.evaluate
    ev = Evaluation.of(lake, generation, run_id)
    date, model, version, prefix, record, rows = ev.date, ev.model, ev.version, ev.prefix, ev.record, ev.rows
    fp32 = load_serving(lake, model, version, "fp32", "cpu", workload.serving)

    # The day's content.
    generated = [r for r in rows if r["status"] == "generated"]
    verdicts = [judge(r["prompt"], r["text"]) for r in generated]
    outputs = [r["text"] for r in generated]
    content = wilson(sum(v["valid"] for v in verdicts), len(verdicts), e.confidence)
    safety = sum(blocked_term(r["prompt"], cfg.prepare.blocklist) is not None
                 or blocked_term(r["text"], cfg.prepare.blocklist) is not None for r in generated)

    # Held-out perplexity: the day's validation documents (the split training never trained on).
    index = load_window(lake, cfg.prepare.dataset, date, 1, ("bytes",))
    _train, held_out = index.split(cfg.train.val_fraction, cfg.train.val_max)
    texts, training = [], []
    held = set(held_out.tolist())
    for s in sorted(set(index.shard_of.tolist())):
        column = index.shard(lake, s).read(columns=["text"]).column("text").to_pylist()
        for i in np.flatnonzero(index.shard_of == s).tolist():
            (texts if i in held else training).append(column[int(index.row_of[i])])
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

    # The grid: every eligible variant × policy on the same evaluation prompts.
    prompts = eval_prompts(e.eval_prompts, e.seed)
    eligible = (record.get("smoke_test") or {}).get("eligible_variants") or ["fp32"]
    points, grid_verdicts = [], {}
    for variant in eligible:
        serving = fp32 if variant == "fp32" else load_serving(lake, model, version, variant, "cpu", workload.serving)
        outs, _ = _timed(serving, prompts, "adaptive", cfg)
        grid_verdicts[variant] = [judge(p, o)["valid"] for p, o in zip(prompts, outs, strict=True)]
        timing = prompts[: e.latency_prompts]
        for policy in [p for p in e.batch_policies.split(",") if p in ("batch1", "adaptive")]:
            rounds = [_timed(serving, timing, policy, cfg)[1] for _ in range(e.latency_rounds)]
            points.append({"variant": variant, "policy": policy,
                           "alignment": sum(grid_verdicts[variant]) / len(prompts),
                           "latency_ms": statistics.median(rounds), "latency_rounds_ms": rounds,
                           "size_bytes": record.get("variants", {}).get(variant, {}).get("size_bytes")})
    chosen, points = recommend(points, grid_verdicts, epsilon=e.epsilon, confidence=e.confidence,
                               latency_tolerance=e.latency_tolerance)
    front = pareto_front(points, "alignment", "latency_ms")

    production, regression = ev.against_production(lake, workload, lambda prod: [
        judge(p, o)["valid"] for p, o in zip(prompts, _timed(prod, prompts, "adaptive", cfg)[0], strict=True)],
        grid_verdicts["fp32"], e.confidence)

    model_validity = wilson(sum(grid_verdicts[chosen["variant"]]), len(prompts), e.confidence) if chosen else None
    metrics = {
        "date": date, "model": model, "version": version, "generation_run": generation["run_id"],
        "workload": "text", "alignment": {"all": content.value}, "generated": len(generated),
        "refused": sum(r["status"] == "refused" for r in rows), "safety_violations": safety,
        "perplexity": ppl.value if ppl else None, "held_out_documents": len(texts), "recall": recall,
        "distinct_2": round(distinct_2(outputs), 4),
        "repetition": round(sum(map(repetition, outputs)) / len(outputs), 4) if outputs else None,
        "memorised": round(memorised(outputs, training[:2000]), 4),
        "recall_lines_right": f"{sum(v['recalls_right'] for v in verdicts)}/{sum(v['recalls'] for v in verdicts)}",
        "eval_prompts": len(prompts), "recommended": chosen, "production_before": production,
        "regression_vs_production": round(regression.value, 4) if regression else None,
        "intervals": {"alignment": content.to_dict(),
                      "model_alignment": model_validity.to_dict() if model_validity else None,
                      "perplexity": ppl.to_dict() if ppl else None,
                      "regression_vs_production": regression.to_dict() if regression else None},
        "validity_note": "alignment here is the checker's validity: every complete generated line a scene of the "
                         "grammar, items numbered on, recalled facts right",
    }
    lake.put_json(join(prefix, "pareto.json"), {"points": points, "front": front, "recommended": chosen,
                                                "eval_prompts": len(prompts)})
    certainty = sorted(((mean_logprob(fp32, r["prompt"], r["text"]), r, v) for r, v in zip(generated, verdicts,
                                                                                           strict=True)),
                       key=lambda x: x[0])[: e.review_items]
    lake.put_bytes(join(prefix, "review", "queue.jsonl"), "".join(json.dumps({
        "prompt_id": r["prompt_id"], "prompt_tail": r["prompt"][-200:], "text": r["text"], "valid": v["valid"],
        "mean_logprob": round(lp, 4), "run_id": run_id}) + "\n" for lp, r, v in certainty).encode())
    metrics["review"] = {"queued": len(certainty)}
    metrics["seconds"] = round(time.perf_counter() - ev.started, 2)
    lake.put_json(join(prefix, "metrics.json"), metrics)
    write_text_report(lake, prefix, metrics, points, generated[:12])
    log.info("evaluation %s: validity %s (content), %s (recommended); perplexity %s; recall %s; %d safety "
             "violation(s)", run_id, content, model_validity, ppl,
             {d: round(r["value"] or 0, 3) for d, r in recall.items()}, safety)
    return {"stage": "evaluate", "date": date, "run_id": run_id, "model": model, "version": version,
            "generation_run": generation["run_id"], "alignment": content.value, "perplexity": metrics["perplexity"],
            "recall": {d: r["value"] for d, r in recall.items()}, "safety_violations": safety,
            "recommended": chosen, "report_uri": lake.url(join(prefix, "report.html")), "run_uri": lake.url(prefix)}


def write_text_report(lake, prefix: str, metrics: dict, points: list[dict], samples: list[dict]) -> str:
    gate = metrics.get("gates", {}).get("evaluation") or {}
    rows = "".join(f"<tr><td>{html.escape(c['title'])}</td><td>{html.escape(c['observed'])}</td>"
                   f"<td>{html.escape(c['threshold'])}</td><td>{'pass' if c['passed'] else 'FAIL'}</td></tr>"
                   for c in gate.get("checks", []))
    figures = {k: metrics.get(k) for k in ("perplexity", "distinct_2", "repetition", "memorised", "safety_violations",
                                           "recall_lines_right", "regression_vs_production")}
    recall = "".join(f"<li>{d} tokens back: {r['value']} (n = {r['n']})"
                     f"{' — beyond the context' if r['beyond_context'] else ''}</li>"
                     for d, r in metrics["recall"].items())
    grid = "".join(f"<tr><td>{p['variant']}</td><td>{p['policy']}</td><td>{p['alignment']:.3f}</td>"
                   f"<td>{p['latency_ms']:.1f}</td></tr>" for p in points)
    texts = "".join(f"<pre>…{html.escape(s['prompt'][-120:])}<b>{html.escape(s['text'])}</b></pre>" for s in samples)
    title = f"{metrics['model']} {metrics['version']}, {metrics['date']}"
    page = (f"<html><head><meta charset='utf-8'><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>Validity of the day's content: {metrics['intervals']['alignment']}</p>"
            f"<h2>Gate 5</h2><table>{rows}</table><h2>Figures</h2><pre>{html.escape(json.dumps(figures, indent=1))}"
            f"</pre><h2>Long-context recall</h2><ul>{recall}</ul><h2>Grid</h2><table><tr><th>variant</th>"
            f"<th>policy</th><th>validity</th><th>ms per prompt</th></tr>{grid}</table><h2>Samples</h2>{texts}"
            "</body></html>")
    lake.put_bytes(join(prefix, "report.html"), page.encode())
    return join(prefix, "report.html")


def text_checks(metrics: dict, t, settings):
    """Gate 5 for text: the day's validity and the recommended configuration's, perplexity, safety."""
    from aigc.config.form import how_to_set, how_to_set_setting
    from aigc.quality.evaluation import Check, figure

    iv = metrics["intervals"]
    ppl = iv.get("perplexity") or {}
    longer = f"Train longer or on more data ({how_to_set('train', 'steps')})"
    return [
        Check("content_alignment", "validity of the day's continuations", (iv["alignment"] or {}).get("hi") or 0.0,
              t.min_alignment, True, figure(iv["alignment"]),
              f"the share of the day's continuations whose every line follows the logs' rules is "
              f"{figure(iv['alignment'])}, significantly below the minimum {t.min_alignment:g}. {longer}; or lower "
              f"{how_to_set('evaluate_gate', 'min_alignment')}."),
        Check("model_alignment", "validity of the recommended configuration on the evaluation prompts",
              (iv.get("model_alignment") or {}).get("hi") or 0.0, t.min_alignment, True,
              figure(iv.get("model_alignment")),
              f"the recommended configuration continues {figure(iv.get('model_alignment'))} of the fixed evaluation "
              f"prompts validly, significantly below the minimum {t.min_alignment:g}. {longer}."),
        Check("perplexity", "held-out perplexity", ppl.get("lo") if ppl.get("lo") is not None else 1e9,
              settings.max_perplexity, False, figure(ppl, "{:.3f}"),
              f"held-out perplexity is {figure(ppl, '{:.3f}')}, significantly above the maximum "
              f"{settings.max_perplexity:g}: "
              f"the model predicts unseen logs poorly. {longer}; or raise "
              f"{how_to_set_setting('text', 'max_perplexity')}."),
        Check("safety_violations", "continuations of blocked prompts, or with blocked terms",
              float(metrics["safety_violations"]), 0.0, False, str(metrics["safety_violations"]),
              f"{metrics['safety_violations']} continuation(s) answered a blocked prompt or contain a blocked term, "
              "where the maximum is 0; this check has no threshold to change."),
    ]
