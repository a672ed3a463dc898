"""One table of every benchmark's latest figures, read from ``bench/results/*.json`` (what ``make bench`` wrote).

    python bench/summary.py [--gpu] [--markdown bench/results/summary.md] [--readme README.md]

Each row: what it compares, the data size, the runs behind the figure, the result against the strongest
simple alternative, the goal and whether it was met. A comparison with no result file says so (``not run``);
nothing here is estimated. The machine the figures were measured on is printed above the table.
``--gpu``: the GPU section's table, from ``bench/results/gpu/`` (``make bench-gpu``), into its own README block.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Callable
from pathlib import Path

from paths import DEFAULT, GPU

RESULTS = DEFAULT


def _load(name: str):
    path = RESULTS / name
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
    for r in d["rows"]:
        ours = r["policies"]["ours"]
        rows.append(["B1 long prompts", f"adaptive batcher vs best fixed ({r['best_fixed']}) under "
                     f"{r['capacity_mib']:.0f} MiB; fixed 32 with retries", f"{r['prompts']} x {r['prompt_tokens']} "
                     "tokens", d["repeats"], f"{r['ours_vs_best_fixed']:.2f}x, {ours['violations']} violations; "
                     f"fixed 32 completed: {r['policies']['fixed_32']['completed']}", "-", "n/a"])
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
    # make bench leaves fp16 out on a CPU: the pipeline refuses to train it there (make bench-full probes it).
    left_out = ("; fp16 not run on a CPU, where it cannot train (make bench-gpu trains it, make bench-full probes "
                "it)" if d.get("device") == "cpu" and not any(c.endswith("fp16") for c in d["probe"]) else "")
    rows.append(["B8 resolution x precision", "recommendation by the evaluation stage's rule (cheapest training "
                 f"time per sample not significantly below the best alignment){left_out}", data, len(d["trained"]),
                 f"{chosen} -> {json.dumps(d['apply'])}; front: {', '.join(d['front'])}" if chosen else "none",
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
    hosts = [f"{PROFILES[p]}: {d[p].get('host', 'host not recorded')}, {d[p].get('measured', '?')[:10]}"
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


def table(gpu: bool = False) -> list[list]:
    rows = []
    for name, label, extract in SOURCES:
        if gpu and name not in GPU_SOURCES:
            continue
        data = _load(name)
        missing = RESULTS / name
        missing = missing.relative_to(DEFAULT.parents[1]) if missing.is_relative_to(DEFAULT.parents[1]) else missing
        rows += extract(data) if data else [[label, f"not run (no {missing})", "", "", "", "", ""]]
    return rows


def cpu_model() -> str:
    """The CPU's model name (Linux), and whether it has bf16 instructions: hosts that both say "2 cores" differ 2x
    in these benches, and bf16 training is fast only with them."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    return f"{name or 'unknown CPU'} ({'with' if 'avx512_bf16' in info else 'no'} avx512_bf16)"


def gpu_model() -> str:
    """The GPUs NVML sees, with their memory ("" without a driver): the GPU section's rows depend on them."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: a CPU host
        return ""
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            gib = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            names.append(f"{name.decode() if isinstance(name, bytes) else name} ({gib:.0f} GiB)")
        return ", ".join(names)
    finally:
        pynvml.nvmlShutdown()


def machine() -> str:
    gpus = gpu_model()
    return (f"{platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()}){', GPU ' + gpus if gpus else ''}, "
            f"Python {platform.python_version()}, {platform.system()}")


def main() -> None:
    global RESULTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true", help="the GPU section's table (bench/results/gpu)")
    ap.add_argument("--markdown", default=None, help="default: summary.md beside the results")
    ap.add_argument("--readme", default=str(DEFAULT.parents[1] / "README.md"),
                    help="the README whose marked block gets the table ('' to leave it)")
    args = ap.parse_args()
    RESULTS = GPU if args.gpu else DEFAULT
    # The host its profile's run recorded (a table rewritten elsewhere, e.g. the GPU's, still names it); else this.
    host = ((_load("bench_times.json") or {}).get("gpu" if args.gpu else "standard") or {}).get("host") or machine()
    head = ["id", "compares", "data", "runs", "result (median)", "goal", "verdict"]
    rows = table(args.gpu)
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    print(f"benchmarks on {host}")
    for r in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    md = [f"Measured on {host}.", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    md += script_times_md(_load("bench_times.json") or {})
    Path(args.markdown or RESULTS / "summary.md").write_text("\n".join(md) + "\n")
    if args.readme:
        readme = Path(args.readme)
        readme.write_text(with_table(readme.read_text(), "\n".join(md), *(GPU_MARKERS if args.gpu else MARKERS)))


MARKERS = START, END = "<!-- bench summary: written by bench/summary.py -->", "<!-- end of bench summary -->"
GPU_MARKERS = "<!-- gpu bench summary: written by bench/summary.py --gpu -->", "<!-- end of gpu bench summary -->"


def with_table(text: str, table_md: str, start: str = START, end: str = END) -> str:
    """``text`` with the block between the README's two markers replaced by ``table_md`` (unchanged without them)."""
    if start not in text or end not in text:
        return text
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{table_md}\n{end}{rest.split(end, 1)[1]}"


if __name__ == "__main__":
    main()
