"""Every benchmark's latest figures, read from ``bench/results/*.json`` (what ``make bench`` wrote), into the README's
and the docs' generated blocks.

    python -m bench.summary [--gpu] [--markdown bench/results/summary.md] [--no-docs]

Each row: what it compares, the data size, the runs behind the figure, the result against the strongest simple
alternative (median, with its range where the file has one), the goal and whether it was met. A comparison with no
result file says so (``not run``); nothing here is estimated, and each table ends with the host, date and commit its
files record. The README and ``docs/`` quote figures only in blocks marked ``<!-- generated: NAME -->`` …
``<!-- end of generated -->``, which this rewrites (``BLOCKS`` names them); ``tests/docs`` fails when a block differs
from what the results files give, or a figure is typed outside one. ``--gpu``: the GPU section's table, from
``bench/results/gpu/`` (``make bench-gpu``).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path

from aigc.config import EvaluationGateThresholds
from bench.paths import DEFAULT, GPU
from bench.precision_bench import how_to_apply
from bench.provenance import ROOT, provenance_of

RESULTS = DEFAULT
# Gate 5's minimum alignment: a recommendation among configurations none of which could reach it (the upper ends of
# their intervals below it: models that learned nothing yet, as in B8's short profile) would rank noise, so such a
# row gives no verdict.
USEFUL_ALIGNMENT = EvaluationGateThresholds().min_alignment


def _load(name: str, results: Path | None = None):
    path = (results or RESULTS) / name
    return json.loads(path.read_text()) if path.exists() else None


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else "met" if ok else "MISSED"


def loading_rows(d) -> list[list]:
    rows = []
    for kept, r in d["reading"].items():
        for where in ("s3", "folder"):
            ratio = r[f"{where} shards_vs_objects"]
            rows.append(["B2 loading", f"Parquet shards vs one object per image (16 threads), {where}",
                         f"{kept} pairs", r[f"{where} shards"]["runs"],
                         f"{ratio:.1f}x ({r[f'{where} shards']['median']:.0f} vs "
                         f"{r[f'{where} objects']['median']:.0f} samples/s)",
                         ">= 10x" if where == "s3" else "-", _verdict(ratio >= 10) if where == "s3" else "n/a"])
    where = d.get("lake", "S3") + (f", model on {d['device']}" if d.get("device", "cpu") != "cpu" else "")
    for f in (d.get("feeding_by_size") or {"": d.get("feeding")}).values():
        if not f:
            continue
        ratio = f["text_only_vs_image_text"]
        rows.append(["B2 loading", "training loop: text-only vs image-text (background decoder; inline "
                     f"{f['text_only_vs_inline']:.2f}x)", f"{f['samples']} pairs, {where}",
                     f["loop background"]["runs"],
                     f"{ratio:.2f}x ({f['loop text-only']['median']:.0f} vs {f['loop background']['median']:.0f} "
                     "samples/s)", "<= 2x", _verdict(ratio <= 2)])
    return rows


def batching_rows(d) -> list[list]:
    rows = []
    for r in d["rows"] + (d["gpu"] if isinstance(d.get("gpu"), list) else []):  # gpu: the rows or why not run
        budget = f", budget {r['budget_bytes'] / 2**20:.1f} MiB" if r.get("budget_bytes") else ""
        planner = r.get("best_planner")
        vs = (f"the best planner ({planner}) / the best fixed batch ({r['oracle']})" if planner
              else f"the best fixed batch ({r['oracle']})")
        ratio = (f"{r['ours_vs_best_planner']:.2f}x / {r['ours_vs_oracle']:.2f}x" if planner
                 else f"{r['ours_vs_oracle']:.2f}x")
        result = f"{ratio} their items/s, OOM rate {r['oom_rate']:.2f}"
        if r["workload"].endswith("_gpu") and not (r.get("synchronized") or r.get("budget_bytes")):
            # Before batches waited for their GPU work (the budget's accountant waits for it): launch rates.
            result = f"not valid: the clock read kernel launches, not GPU work ({result}); rerun make bench-gpu"
        rows.append(["B1 batching", f"adaptive batcher vs {vs} in hindsight{budget}",
                     f"{r['items']} {r['workload']} items", r.get("repeats", d.get("repeats")), result, "-", "n/a"])
    return rows


def scaling_rows(d) -> list[list]:
    sizes = d["sizes"]
    first, last = sizes[0], sizes[-1]
    ratio = d["rows_per_s_largest_over_smallest"]
    return [["19 prep scaling", f"rows/s at {last['records']:,} vs {first['records']:,} records",
             f"{first['records']:,}-{last['records']:,}", last["runs"],
             f"{last['rows_per_s']:,.0f} vs {first['rows_per_s']:,.0f} rows/s ({ratio:.2f}x); no removal below "
             f"the threshold: {d['no_removal_below_threshold']}", ">= 0.8x",
             _verdict(ratio >= 0.8 and d["no_removal_below_threshold"])]]


def fanout_rows(d) -> list[list]:
    d = d["rows"] if isinstance(d, dict) else d  # a list before results were stamped
    big = max(r["records"] for r in d)
    by = {r["config"]: r for r in d if r["records"] == big}
    one, two = by.get("fan-out, 1 worker"), by.get("fan-out, 2 workers")
    if not (one and two):
        return []
    return [["19 prep fan-out", "mapped preparation, 2 workers vs 1", f"{big:,} records", two["runs"],
             f"{one['median_s'] / two['median_s']:.2f}x faster (merge {two['merge_s']:.1f} s of {two['median_s']:.1f})",
             "-", "n/a"]]


def balance_rows(d) -> list[list]:
    rows, measured, sim = [], d["measured"], d["simulated"]
    worlds = sorted({int(k.split()[0]) for k in measured})
    for world in worlds:
        ours = measured[f"{world} ranks, balanced"]
        others = {k.split(", ")[1]: v for k, v in measured.items() if k.startswith(f"{world} ranks,")
                  and not k.endswith("balanced")}
        best_name, best = min(others.items(), key=lambda kv: kv[1]["waste"]["median"])
        waste = ours["waste"]["median"]
        cut = [k for k, v in others.items() if v.get("screened")]
        screened = f"; {', '.join(cut)} screened out after one run" if cut else ""
        rows.append(["B3 balance", f"{world} ranks: time waiting for the slowest rank, ours vs {best_name} (best of "
                     f"{len(others)}{screened})", f"text demo, {d['steps']} steps", ours["runs"],
                     f"{waste:.1%} ({ours['waste']['min_max'][0]:.1%}-{ours['waste']['min_max'][1]:.1%}) vs "
                     f"{best['waste']['median']:.1%}; {ours['samples_per_s']['median']:.0f} vs "
                     f"{best['samples_per_s']['median']:.0f} samples/s", "<= 5%", _verdict(waste <= 0.05)])
    for world in (8, 64):
        ours = sim.get(f"{world} ranks, balanced")
        if ours:
            others = {k.split(", ")[1]: v["waste"] for k, v in sim.items() if k.startswith(f"{world} ranks,")
                      and not k.endswith("balanced")}
            best_name = min(others, key=others.get)
            rows.append(["B3 balance", f"{world} ranks, simulated from measured step times (fit R² "
                         f"{sim['fit']['r2']:.2f}): ours vs {best_name}", "text demo lengths", 1,
                         f"{ours['waste']:.1%} vs {others[best_name]:.1%}", "<= 5%", _verdict(ours["waste"] <= 0.05)])
    return rows


def ddp_rows(d) -> list[list]:
    rows = []
    for name, v in (d.get("ddp_scaling") or {}).items():
        if name.startswith("2 ranks"):
            rows.append(["B5 DDP", f"{name} vs 1 rank x 1 thread (gloo, same global batch)", "demo shapes",
                         v["runs"], f"{v['vs_1_rank']:.2f}x ({v['samples_per_s']:.0f} samples/s)",
                         ">= 1.7x", _verdict(v["vs_1_rank"] >= 1.7)])
    return rows


def variants_rows(d) -> list[list]:
    rows = []
    for name, v in d["variants"].items():
        if name == "fp32":
            continue
        gap = v["fp32_minus_variant"]
        rows.append(["B6 variants", f"{name} on {v['device']} vs fp32: latency b1 / adaptive (batch "
                     f"{v['adaptive']['batch']}), alignment",
                     f"{d.get('timing_prompts', '?')} prompts timed, {d['prompts']} scored"
                     + (f", {'the shipped demo ' if 'shipped' in d.get('model', '') else ''}model of "
                        f"{d['train_steps']} steps" if d.get("train_steps") else ""), v["runs"],
                     f"{v['speedup_vs_fp32_batch1']:.2f}x / {v['speedup_vs_fp32_adaptive']:.2f}x faster, "
                     f"{v['size_bytes'] / 1024:.0f} KiB; fp32 - it {gap['value']:+.3f} [{gap['lo']:+.3f}, "
                     f"{gap['hi']:+.3f}]", ">= 1.5x, not lower" if name == "int8" else "-",
                     _verdict(d["goal"]["met"]) if name == "int8" and d.get("goal") else "n/a"])
    return rows


def long_prompt_rows(d) -> list[list]:
    rows = []
    label = "41 hf-causal-lm long prompts" if d.get("model") == "hf-causal-lm" else "B1 long prompts"
    for r in d["rows"]:
        ours = r["policies"]["ours"]
        rows.append([label, f"adaptive batcher vs best fixed ({r['best_fixed']}) under "
                     f"{r['capacity_mib']:.0f} MiB; fixed 32 with retries", f"{r['prompts']} x {r['prompt_tokens']} "
                     "tokens", d["repeats"], f"{r['ours_vs_best_fixed']:.2f}x, {ours['violations']} violations; "
                     f"fixed 32 completed: {r['policies']['fixed_32']['completed']}", "-", "n/a"])
    return rows


def _versus_best(r: dict, policy: str) -> str:
    """A summary entry's ratio of ``policy`` to the best fixed batch: of medians (widest range), and paired by repeat
    where the file has it."""
    (lo, hi), p = r[f"{policy}_vs_best_fixed_range"], r.get(f"{policy}_vs_best_fixed_paired")
    paired = (f"; paired by repeat {p['median']:.2f}x ({p['range'][0]:.2f}-{p['range'][1]:.2f}), faster in "
              f"{p['faster_in']} of {p['repeats']}" if p else "")
    return f"{r[f'{policy}_vs_best_fixed']:.2f}x ({lo:.2f}-{hi:.2f}){paired}"


JUDGED = {"ours": "our batcher (the workload's settings: a size judged on one batch)",
          "ours_judge2": "our batcher with the core's default (two batches a judgement)"}
"""The batcher's rows of a generation bench: with the workload's settings and with the core's default."""


def hf_generate_rows(d) -> list[list]:
    rows = []
    judged = JUDGED
    for r in d["summary"]:
        for policy, what in judged.items():
            ours = next(x for x in d["rows"] if x["prompts"] == r["prompts"] and x["policy"] == policy)
            rows.append(["41 hf-causal-lm generation", f"{what} vs transformers' best fixed batch in hindsight: "
                         "generate on prompts in file order or sorted by length, or pipeline('text-generation') "
                         f"({r['best_fixed']}), greedy, new tokens/s", f"{r['prompts']} prompts of 8-990 tokens, "
                         f"{d['new_tokens']} new", ours["repeats"], f"{_versus_best(r, policy)}; outputs equal to "
                         f"batch 1's: {ours['agreement_with_b1']:.0%}", ">= 1.0x" if policy == "ours" else "-",
                         _verdict(r[f"{policy}_vs_best_fixed"] >= 1.0 if policy == "ours" else None)])
    for other in d.get("other_hosts", []):  # their summaries only: the batcher against their best fixed batch
        for r in other["summary"]:
            rows.append(["41 hf-causal-lm generation", f"{judged['ours']} vs the best fixed batch ({r['best_fixed']}), "
                         f"on another host: {provenance_of(other)}", f"{r['prompts']} prompts of 8-990 tokens, "
                         f"{other['new_tokens']} new", r["repeats"], _versus_best(r, "ours"), ">= 1.0x",
                         _verdict(r["ours_vs_best_fixed"] >= 1.0)])
    return rows


def hf_diffusion_rows(d) -> list[list]:
    rows = []
    what = (f"vs diffusers' pipeline call at the best fixed batch in hindsight ({{best}}), "
            f"{d['steps']} steps of {d['scheduler']}, guidance {d['guidance']:g}, images/s")
    judged = {**JUDGED, "ours_warm": "our batcher starting from the size an earlier run learned (a later night)"}
    for r in d["summary"]:
        for policy, who in judged.items():
            if f"{policy}_vs_best_fixed" not in r:
                continue
            ours = next(x for x in d["rows"] if x["prompts"] == r["prompts"] and x["policy"] == policy)
            bar = policy != "ours_judge2"  # the core's default: a reference for the workload's setting, no bar
            rows.append(["42 hf-diffusion generation", f"{who} {what.format(best=r['best_fixed'])}",
                         f"{r['prompts']} prompts", r["repeats"], f"{_versus_best(r, policy)}; images within a grey "
                         f"level of batch 1's: {ours['agreement_with_b1']:.0%}", ">= 1.0x" if bar else "-",
                         _verdict(r[f"{policy}_vs_best_fixed"] >= 1.0 if bar else None)])
    for other in d.get("other_hosts", []):
        for r in other["summary"]:
            rows.append(["42 hf-diffusion generation", f"our batcher vs the best fixed batch ({r['best_fixed']}), "
                         f"on another host: {provenance_of(other)}", f"{r['prompts']} prompts", r["repeats"],
                         _versus_best(r, "ours"), ">= 1.0x", _verdict(r["ours_vs_best_fixed"] >= 1.0)])
    return rows


def pipeline_rows(d) -> list[list]:
    rows, s = [], d["summary"]
    for mode in ("dags-test", "scheduler"):
        m = s.get(mode)
        if not m:
            continue
        wall = m["wall_s"]
        label = "airflow dags test (make demo)" if mode == "dags-test" else "real scheduler, LocalExecutor"
        if "overhead_vs_cli" in m:
            o = m["overhead_vs_cli"]
            busy, gaps = m["busy_s"]["median"], m["gaps_s"]["median"]
            rows.append(["B7 pipeline", f"{label} vs the aigc CLI chain: wall time (tasks busy {busy:.0f} s, "
                         f"gaps {gaps:.0f} s)", f"{d['preset']} preset", o["runs"],
                         f"{o['median']:+.0%} ({o['min_max'][0]:+.0%} to {o['min_max'][1]:+.0%}); "
                         f"{wall['median']:.0f} vs {s['cli']['wall_s']['median']:.0f} s", "<= +15%",
                         _verdict(o["median"] <= 0.15)])
        if d["preset"] == "demo":
            rows.append(["B7 pipeline", f"demo wall time, {label}", "demo preset", wall["runs"],
                         f"{wall['median'] / 60:.1f} min ({wall['min_max'][0] / 60:.1f}-{wall['min_max'][1] / 60:.1f})",
                         "<= 5 min", _verdict(wall["median"] <= 300)])
    return rows


def precision_rows(d) -> list[list]:
    rows = []
    data = f"demo drop at 64 px, {d['steps']} steps x {d['global_batch']}"
    for config, p in d["probe"].items():
        t = d["trained"].get(config)
        probe = (f"{p['samples_per_s']:.0f} samples/s ({p['min_max'][0]:.0f}-{p['min_max'][1]:.0f}), peak "
                 f"{p['peak_mib']:.0f} MiB (+{p['peak_above_held_mib']:.0f} a step)")
        if t:
            ci = t["alignment_ci"]
            trained = (f"; val loss {t['final_val_loss']:.4f}, alignment {t['alignment']:.2f} [{ci['lo']:.2f}, "
                       f"{ci['hi']:.2f}], {t['grad']['spikes']} norm spikes, {t['grad']['skipped_steps']} skipped")
        else:
            trained = f"; not trained ({d['not_trained'][config]})"
        rows.append(["B8 resolution x precision", f"{config} on {p['device']}: probe speed and memory, then quality",
                     data, f"probe {p['runs']}, train {1 if t else 0}", probe + trained, "-", "n/a"])
    chosen = d.get("recommended")
    best_hi = max((t["alignment_ci"]["hi"] for t in d["trained"].values()), default=0.0)
    # make bench leaves fp16 out on a CPU: the pipeline refuses to train it there (make bench-full probes it).
    left_out = ("; fp16 not run on a CPU, where it cannot train (make bench-gpu trains it, make bench-full probes "
                "it)" if d.get("device") == "cpu" and not any(c.endswith("fp16") for c in d["probe"]) else "")
    # The file says which rule chose (the rule became evidence of non-inferiority after some files were written).
    rule = ("shown to be within epsilon of the best alignment" if "shown to be" in d.get("rule", "")
            else "not significantly below the best alignment, the rule before evidence was required")
    what = f"recommendation by the evaluation stage's rule (cheapest training time per sample {rule}){left_out}"
    if best_hi < USEFUL_ALIGNMENT:  # every configuration learned nothing yet: ranking them would rank noise
        rows.append(["B8 resolution x precision", what, data, len(d["trained"]),
                     f"no verdict: no configuration's alignment interval reaches {USEFUL_ALIGNMENT} (best upper end "
                     f"{best_hi:.2f}); train longer (--steps) for a meaningful comparison",
                     "a Pareto table, plot and recommendation", "n/a"])
        return rows
    rows.append(["B8 resolution x precision", what, data, len(d["trained"]),
                 f"{chosen} ({how_to_apply(chosen)[1]}); front: {', '.join(d['front'])}" if chosen else "none",
                 "a Pareto table, plot and recommendation", _verdict(chosen is not None)])
    return rows


PROFILES = {"standard": "make bench", "full": "make bench-full", "gpu": "make bench-gpu"}


def bench_time_rows(d) -> list[list]:
    """One row per profile run (``run_all.py`` keeps each profile's times apart); ``make bench`` has the goal."""
    rows = []
    for profile, command in PROFILES.items():
        p = d.get(profile)
        if not p:
            continue
        if p.get("missing"):
            rows.append([command, "wall time of every benchmark", "", "", f"not measured: no time for {p['missing']}",
                         "", ""])
            continue
        longest = sorted(p["seconds"].items(), key=lambda kv: -kv[1])[:3]
        whole = f"one run {p['one_run_s'] / 60:.1f} min" if p.get("one_run_s") else "the scripts' latest runs"
        goal = p.get("goal_s")
        rows.append([command, f"wall time of every benchmark ({whole}, {p['measured'][:10]}); longest: "
                     + ", ".join(f"{name} {s / 60:.1f} min" for name, s in longest), "all of the above", 1,
                     f"{p['total_s'] / 60:.1f} min", f"<= {goal / 60:.0f} min" if goal else "-",
                     _verdict(p["total_s"] <= goal) if goal else "n/a"])
    return rows


def script_times_md(d) -> list[str]:
    """Each script's latest wall time in minutes, one column per profile that has run (markdown lines)."""
    profiles = [p for p in PROFILES if d.get(p, {}).get("seconds")]
    if not profiles:
        return []
    names = list(dict.fromkeys(n for p in profiles for n in d[p]["seconds"]))
    hosts = [f"{PROFILES[p]}: {d[p].get('host', 'host not recorded')}, {d[p].get('measured', '?')[:10]}, "
             f"commit {d[p].get('commit', 'not recorded')}"
             for p in profiles]
    lines = ["", f"Each script's latest wall time, minutes ({'; '.join(hosts)}):", "",
             "| script | " + " | ".join(PROFILES[p] for p in profiles) + " |", "|---|" + "---|" * len(profiles)]
    for name in names:
        cells = [f"{d[p]['seconds'][name] / 60:.1f}" if name in d[p]["seconds"] else "" for p in profiles]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(f"**{d[p]['total_s'] / 60:.1f}**" if d[p].get("total_s") else ""
                                              for p in profiles) + " |")
    return lines


SOURCES: list[tuple[str, str, Callable[[dict], list[list]]]] = [
    ("prepare_scaling.json", "19 prep scaling", scaling_rows),
    ("prepare_fanout.json", "19 prep fan-out", fanout_rows),
    ("loading.json", "B2 loading", loading_rows),
    ("batching.json", "B1 batching", batching_rows),
    ("long_prompts.json", "B1 long prompts", long_prompt_rows),
    ("long_prompts_hf.json", "41 hf-causal-lm long prompts", long_prompt_rows),
    ("hf_generate.json", "41 hf-causal-lm generation", hf_generate_rows),
    ("hf_diffusion.json", "42 hf-diffusion generation", hf_diffusion_rows),
    ("balance.json", "B3 balance", balance_rows),
    ("train.json", "B5 DDP", ddp_rows),
    ("variants.json", "B6 variants", variants_rows),
    ("pipeline_smoke.json", "B7 pipeline", pipeline_rows),
    ("pipeline_demo.json", "B7 pipeline (demo)", pipeline_rows),
    ("precision.json", "B8 resolution x precision", precision_rows),
    ("precision_1500.json", "B8 at the demo's budget", precision_rows),
    ("bench_times.json", "make bench", bench_time_rows),
]


# The GPU section's comparisons (run_all.py --gpu): the others have no GPU form.
GPU_SOURCES = ("loading.json", "batching.json", "variants.json", "precision.json", "bench_times.json")


def table(gpu: bool = False, results: Path | None = None) -> list[list]:
    results = results or (GPU if gpu else DEFAULT)
    rows = []
    for name, label, extract in SOURCES:
        if gpu and name not in GPU_SOURCES:
            continue
        data = _load(name, results)
        missing = results / name
        missing = missing.relative_to(DEFAULT.parents[1]) if missing.is_relative_to(DEFAULT.parents[1]) else missing
        rows += extract(data) if data else [[label, f"not run (no {missing})", "", "", "", "", ""]]
    return rows


HEAD = ["id", "compares", "data", "runs", "result (median)", "goal", "verdict"]


def _md_table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def sources_md(results: Path, gpu: bool = False) -> list[str]:
    """Where each file's figures were measured (host; date; commit), as the file records it."""
    lines = ["", "Measured (as each results file records it):", ""]
    for name, _label, _extract in SOURCES:
        data = _load(name, results)
        if data is not None and (not gpu or name in GPU_SOURCES):
            lines.append(f"- `{name}`: {provenance_of(data)}")
    return lines


def table_md(gpu: bool = False, results: Path | None = None) -> str:
    """The whole table, each file's provenance and (CPU) each script's wall time: docs/benchmarks.md's blocks."""
    results = results or (GPU if gpu else DEFAULT)
    md = _md_table(HEAD, table(gpu, results)) + sources_md(results, gpu)
    md += script_times_md(_load("bench_times.json", results) or {})
    return "\n".join(md)


def claims_md(results: Path | None = None) -> str:
    """The rows that carry a goal, for the README: the claims, met or missed, each with its figure."""
    rows = [[r[0], r[1], r[4], r[5], r[6]] for r in table(False, results) if r[5] not in ("", "-")]
    return "\n".join(_md_table(["id", "compares", "result (median)", "goal", "verdict"], rows)
                     + ["", "Hosts, dates, commits and every other row: [Benchmarks](docs/benchmarks.md)."])


def demo_dates_md(results: Path | None = None) -> str:
    """Gate 5 over consecutive nightly demo runs (bench/demo_dates.py), one table per workload's results file."""
    results = results or DEFAULT
    md = []
    for name in ("demo_dates.json", "demo_dates_text.json"):
        d = _load(name, results)
        if not d:
            md += ["", f"`{name}`: not run (`make demo-dates`)."]
            continue
        rate = d["pass_rate"]
        md += ["", f"**{d.get('workload', 'image')}**: gate 5 passed on {d['passed']} of {d['days']} consecutive dates "
               f"from {d['start']} (pass rate's {rate['confidence']:.0%} interval {rate['lo']:.2f}–{rate['hi']:.2f}); "
               f"production moved on {d['promoted']}"
               + (", never to a version significantly worse than the best production before it"
                  if d.get("promoted_significantly_worse_than_best") == 0 else
                  f" ({d.get('promoted_significantly_worse_than_best', '?')} significantly worse than the best "
                  "production before)")
               + f"; recommended: {', '.join(d['recommended'])}. {provenance_of(d)}.", "",
               "| date | gate 5 | looks | trained from | promoted | best − it | model quality on the evaluation set "
               "| content quality |",
               "|---|---|---|---|---|---|---|---|"]
        for day in d["dates"]:
            checks = day.get("checks", {})
            to_best = (day.get("intervals") or {}).get("regression_vs_best") or {}
            md.append(f"| {day['date']} | {'passed' if day['passed'] else 'failed'} | {day.get('rounds', '')} | "
                      f"{day.get('started_from') or 'scratch'} | {'yes' if day.get('promoted') else 'no'} | "
                      + (f"{to_best['value']:+.3f} [{to_best['lo']:+.3f}, {to_best['hi']:+.3f}]"
                         if to_best.get("lo") is not None else "") + " | "
                      f"{checks.get('model_alignment', {}).get('observed', '')} | "
                      f"{checks.get('content_alignment', {}).get('observed', '')} |")
    return "\n".join(md[1:])


def demo_front_md(results: Path | None = None, workload: str = "hf-diffusion") -> str:
    """The quality/cost front stage 5 drew on the last date of ``bench.demo_dates --workload WORKLOAD``: every
    eligible variant × batch policy, its alignment with interval, its loss against the best, its cost, the workload's
    other figures, and the recommendation."""
    name = f"demo_dates_{workload}.json"
    d = _load(name, results or DEFAULT)
    if not d or not d["dates"][-1].get("points"):
        return f"`{name}`: not run (`python -m bench.demo_dates --workload {workload} --days 1`)."
    day = d["dates"][-1]

    def ci(e: dict | None) -> str:
        return "" if not e or e.get("value") is None else f"{e['value']:.3f} [{e['lo']:.3f}, {e['hi']:.3f}]"

    def num(v) -> str:
        return "" if v is None else f"{v:.3f}"

    md = [f"**{workload}** demo, {day['date']} ({day['version']}): gate 5 {'passed' if day['passed'] else 'failed'}; "
          f"recommended **{day['recommended']}**, the cheapest configuration not significantly worse than the best "
          f"on alignment{' and on CLIP score' if any(p.get('score_vs_best') for p in day['points']) else ''}. "
          f"{provenance_of(d)}.", "",
          "| variant | policy | alignment [95 % CI] | best − it | CLIP score | its best − it | as good | "
          "ms/image (range over rounds) | MB | FID (checker) | FID (CLIP features) | on the front |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(day["points"], key=lambda p: p["latency_ms"]):
        lo, hi = p.get("latency_range_ms") or [p["latency_ms"]] * 2
        md.append(f"| {p['variant']} | {p['policy']} | {ci(p.get('alignment_ci'))} | {ci(p.get('vs_best'))} | "
                  f"{num(p.get('clip_score'))} | {ci(p.get('score_vs_best'))} | "
                  f"{'yes' if p.get('as_good') else 'no'} | {p['latency_ms']:.1f} ({lo:.1f}–{hi:.1f}) | "
                  f"{(p.get('size_bytes') or 0) / 1e6:.1f} | {num(p.get('fid'))} | {num(p.get('feature_fid'))} | "
                  f"{'yes' if p['on_front'] else ''} |")
    return "\n".join(md)


def review_loop_md(results: Path | None = None) -> str:
    """Two nights with and without reviewers' labels, active against random selection (bench/review_loop.py)."""
    d = _load("review_loop.json", results or DEFAULT)
    if not d:
        return "`review_loop.json`: not run (`python -m bench.review_loop`)."
    steps = f"{d['steps']} steps" if isinstance(d.get("steps"), int) else "the demo's steps"
    names = {"labels_active_vs_none": "labels of the active queue − no labels",
             "labels_random_vs_none": "labels of a random queue − no labels",
             "active_vs_random": "active queue − random queue"}
    md = [f"Night 1 ({d['nights'][0]}) queued {d['review_items']} of its {d.get('prompts', '')} outputs for review "
          f"each way; simulated reviewers erring at {d['error_rate']:.0%} labelled them; both nights trained "
          f"{steps}; night 2 ({d['nights'][1]}) trained each candidate from the same production on the same window "
          f"with the same seeds (labels up-weighted ×{d['upweight']}), and "
          f"each answered the same {d['eval_prompts']} evaluation prompts. {d['note'].capitalize()}. "
          f"{provenance_of(d)}.", "",
          "| night 2 candidate | its queue's outputs labelled wrong | labels used | prompts judged wrong | samples "
          "they reached | training samples | alignment |", "|---|---|---|---|---|---|---|"]
    for arm, r in d["arms"].items():
        used, queue = r.get("review_labels") or {}, (d.get("label_rounds") or {}).get(arm)
        wrong = f"{queue['labelled_wrong']} of {queue['queued']}" if queue else ""
        md.append(f"| {arm} | {wrong} | {used.get('labels', 0)} | {used.get('prompts_wrong', '')} | "
                  f"{used.get('samples_matched', '')} | {used.get('training_samples_before', '')}"
                  + (f" → {used['training_samples_after']}" if used else "") + f" | {r['alignment']:.3f} |")
    md += ["", "| paired difference in alignment | [95 % CI] | verdict |", "|---|---|---|"]
    for name, c in d["compared"].items():
        md.append(f"| {names.get(name, name)} | {c['value']:+.4f} [{c['lo']:+.4f}, {c['hi']:+.4f}] | {c['verdict']} |")
    return "\n".join(md)


def make_test_md(results: Path | None = None) -> str:
    """What ``make test`` took on a fresh clone (bench/make_test_time.py)."""
    d = _load("make_test.json", results or DEFAULT)
    if not d:
        return "`make test`'s time: not measured (`python -m bench.make_test_time`)."
    def one(run: dict) -> str:
        suite = run.get("suite_s", run["wall_s"] - run["setup_s"])
        return (f"{run['wall_s'] / 60:.1f} min: the install {run['setup_s'] / 60:.1f} min, then {run['tests']} tests "
                f"({run['passed']} passed, {run['skipped']} skipped) in {suite / 60:.1f} min; on {provenance_of(run)}")

    others = "".join(f" On another host it took {one(run)}." for run in d.get("other_hosts", []))
    return f"`make test` on a fresh clone took {one(d)}, against a budget of 15 min.{others}"


# The blocks the README and the docs may hold, by name: ``<!-- generated: NAME -->`` … ``<!-- end of generated -->``.
BLOCKS: dict[str, Callable[[], str]] = {
    "bench-table": lambda: table_md(False),
    "gpu-bench-table": lambda: table_md(True),
    "bench-claims": lambda: claims_md(),
    "demo-dates": lambda: demo_dates_md(),
    "make-test": lambda: make_test_md(),
    "demo-front": lambda: demo_front_md(),
    "review-loop": lambda: review_loop_md(),
}
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end of generated -->)", re.S)


def regenerate(text: str) -> str:
    """``text`` with every generated block written afresh from the results files."""
    def fill(m: re.Match) -> str:
        if m["name"] not in BLOCKS:
            raise ValueError(f"unknown generated block {m['name']!r}: one of {sorted(BLOCKS)}")
        return f"{m[1]}{BLOCKS[m['name']]().rstrip()}\n{m[4]}"
    return BLOCK.sub(fill, text)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def main() -> None:
    global RESULTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true", help="the GPU section's table (bench/results/gpu)")
    ap.add_argument("--markdown", default=None, help="default: summary.md beside the results")
    ap.add_argument("--no-docs", action="store_true", help="leave the README's and docs' generated blocks alone")
    args = ap.parse_args()
    RESULTS = GPU if args.gpu else DEFAULT
    rows = table(args.gpu)
    widths = [max(len(str(r[i])) for r in [HEAD, *rows]) for i in range(len(HEAD))]
    for r in [HEAD, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    Path(args.markdown or RESULTS / "summary.md").write_text(table_md(args.gpu) + "\n")
    if not args.no_docs:
        for path in documents():
            text = path.read_text()
            if (new := regenerate(text)) != text:
                path.write_text(new)
                print(f"rewrote the generated blocks of {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
