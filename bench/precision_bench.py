"""B8, the seeds' open question: training resolution (32 vs 64 px) × precision (fp32, bf16, fp16 with a scaler).

    python -m bench.precision_bench [--steps 300] [--rounds 3] [--prompts 128] [--configs 32/fp32 64/bf16 …]

Same data and budget for every configuration: one demo drop drawn at 64 px (the 32 px model reads it resized, as
the pipeline does), the demo's training settings and the same number of optimizer steps of the same global batch.

1. Step probe: one rank's training step (micro-batch 32, the demo's share of a rank; one thread on the CPU) built
   from the training loop's own pieces (``train.distributed.autocast``, ``train.loop.optimizer_step``), all
   configurations in turn in each of ``--rounds`` rounds, on the CPU each in a fresh process, on CUDA all of a
   round in one (a process start outlasts a GPU probe): samples/s (median, min, max) and peak memory: on CUDA
   ``torch.cuda.max_memory_allocated``, reset for each; on the CPU the resident set's high-water mark
   (``/proc/self/status`` VmHWM, reset through ``clear_refs``). Both: in all, and above what a process holds
   between steps (weights, optimizer state).
2. Training: each trainable configuration trained by ``aigc train``'s function (torchrun, the demo's ranks) for
   ``--steps``: final validation loss, gradient-norm spikes (a step's norm over 5× the median of the 50 before it),
   steps the fp16 scaler skipped, samples/s, wall time; then its model's alignment on ``--prompts`` evaluation
   prompts (the checker's all-attributes verdict, Wilson 95% interval).
3. The recommendation, by the evaluation stage's own rule (``aigc.evaluate.metrics.recommend``): the configuration
   cheapest in training time per sample in every probe round among those whose alignment is not significantly
   below the best's (paired interval on the same prompts and seeds); peak memory breaks ties. It is written as the
   config override that applies it (``PipelineConfig.override``), with the Pareto front and a plot.

fp16 on a CPU: the probe measures it (PyTorch has no fast fp16 CPU kernels: it runs over 10× slower than fp32), but
it is not trained: ``TrainConfig.precision='fp16'`` needs CUDA. Nor is a precision the probe found over
``--max-slowdown`` (4) times slower than the fastest at the same resolution (bf16 on a CPU without bf16
instructions): same model, same data, only the numerics differ, so it cannot be the cheapest (``untrainable``).
A configuration the first probe round rules out so is not probed in the later rounds (``run_probes``: it would
take most of the probing time, 10-30x slower than the rest, for a figure no decision reads).
With a GPU every configuration is trained on it unless the probe rules it out.
The last line is one JSON object, also written to ``bench/results/precision.json`` (or ``$AIGC_BENCH_RESULTS``;
plot: ``precision.png``; ``--results`` elsewhere: the demo's full budget is ``--steps 1500 --results
bench/results/precision_1500.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.paths import results_path
from bench.provenance import write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = results_path("precision.json")  # bench/results, or $AIGC_BENCH_RESULTS
DATE = "2026-11-28"
CONFIGS = ("32/fp32", "32/bf16", "32/fp16", "64/fp32", "64/bf16", "64/fp16")
PROBE_BATCH = 32
SPIKE_WINDOW, SPIKE_K = 50, 5.0


def parse(config: str) -> tuple[int, str]:
    side, precision = config.split("/")
    return int(side), precision


def how_to_apply(config: str) -> tuple[dict, str]:
    """(the configuration changes, the command) that train the demo model as ``config`` (``32/bf16``) says: the
    table derives them from the recommended configuration, so an older results file is read with today's settings."""
    side, precision = parse(config)
    return ({"workload": {"settings": {"resolution": side}}, "train": {"precision": precision}},
            f"aigc train --resolution {side} --precision {precision}")


# --- 1. the step probe (runs in its own process: ``--probe 64/bf16``, or ``--probe 32/fp32,64/bf16`` on CUDA) ----

def _resident() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def probe(config: str, device_name: str, steps: int, max_s: float) -> dict:
    """Time ``steps`` training steps of one rank (at least 2, fewer than ``steps`` once ``max_s`` is spent) after
    one warm-up step, and the memory they peak at."""
    import torch

    from aigc.train import distributed as D
    from aigc.train.loop import optimizer_step
    from aigc.workloads.image.config import CVAEShape
    from aigc.workloads.image.cvae import ConditionalVAE
    from aigc.workloads.image.tokenizer import Vocab
    from aigc.workloads.world import random_scene, render

    side, precision = parse(config)
    device = torch.device(device_name)
    if device.type == "cpu":
        torch.set_num_threads(1)
    rng = random.Random(0)
    scenes = [random_scene(rng) for _ in range(PROBE_BATCH)]
    cfg = CVAEShape(resolution=side)
    vocab = Vocab.build(s.caption for s in scenes)
    pixels = np.stack([np.asarray(render(s, side).convert("RGB")) for s in scenes])
    images = (torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255).to(device)
    ids = vocab.encode([s.caption for s in scenes], cfg.max_tokens).to(device)
    torch.manual_seed(0)
    model = ConditionalVAE(len(vocab), cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step() -> None:
        with D.autocast(precision, device):
            out = model(images, ids)
        scaler.scale(out.loss).backward()
        optimizer_step(scaler, opt, model.parameters(), 1.0)
        opt.zero_grad(set_to_none=True)

    step()  # the first step allocates the optimizer state and autocast's weight copies
    sync()
    if device.type == "cuda":
        held = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        held, _ = _resident()
        Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts again from the resident set
    times: list[float] = []
    while len(times) < steps and not (len(times) >= 2 and sum(times) > max_s):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else _resident()[1]
    return {"config": config, "device": device.type, "steps": len(times),
            "samples_per_s": PROBE_BATCH / statistics.median(times), "peak_bytes": peak,
            "peak_above_held_bytes": max(0, peak - held),
            "memory": "torch.cuda.max_memory_allocated" if device.type == "cuda" else "VmHWM (resident set)"}


def run_probes(configs: list[str], device: str, rounds: int, steps: int, max_s: float,
               max_slowdown: float | None = None) -> dict:
    """All configurations in turn in each round (the order rotates). On the CPU each in a fresh process: its
    memory figure is the process's high-water mark. On CUDA one process a round runs them all: the allocator's
    peak is reset for each, and a process start (seconds: PyTorch, the CUDA context) would outlast the probe.

    With ``max_slowdown``, a configuration the first round already rules out of training (``untrainable``: fp16
    without CUDA, or a precision that many times slower than its resolution's fastest) is not probed again: it
    is 10-30x slower than the rest, so its later rounds would take most of the probing, to confirm a figure no
    decision reads. Its entry says ``screened`` and why."""
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    screened: dict[str, str] = {}
    for r in range(rounds):
        active = [c for c in configs if c not in screened]
        if not active:  # every one ruled out (fp16 alone on a CPU): nothing left to time
            break
        order = active[r % len(active):] + active[:r % len(active)]
        groups = [order] if device == "cuda" else [[c] for c in order]
        for group in groups:
            out = subprocess.run([sys.executable, "-m", "bench.precision_bench", "--probe", ",".join(group),
                                  "--device", device, "--probe-steps", str(steps), "--probe-max-s", str(max_s)],
                                 capture_output=True, text=True, check=False, cwd=ROOT)
            if out.returncode:
                sys.exit(f"probe {','.join(group)} failed: {out.stderr[-2000:]}")
            measured = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"config"')]
            if [m["config"] for m in measured] != group:
                sys.exit(f"probe {','.join(group)} answered for {[m['config'] for m in measured]}")
            for m in measured:
                runs[m["config"]].append(m)
                print(f"B8 probe round {r + 1}: {m['config']:8s} {m['samples_per_s']:8.1f} samples/s, peak "
                      f"{m['peak_bytes'] / 2**20:.0f} MiB ({m['peak_above_held_bytes'] / 2**20:.1f} above held)",
                      file=sys.stderr, flush=True)
        if r == 0 and max_slowdown:
            screened = untrainable({c: runs[c][0] for c in configs}, device, max_slowdown)
            for c, why in screened.items():
                print(f"B8 probe: {c} screened after one round: {why}", file=sys.stderr, flush=True)
    out = {}
    for config, ms in runs.items():
        speeds = [m["samples_per_s"] for m in ms]
        out[config] = {"samples_per_s": round(statistics.median(speeds), 2),
                       "min_max": [round(min(speeds), 2), round(max(speeds), 2)], "runs": len(ms),
                       "ms_per_sample_rounds": [round(1000 / s, 4) for s in speeds],
                       "steps_per_run": [m["steps"] for m in ms],
                       "peak_mib": round(statistics.median(m["peak_bytes"] for m in ms) / 2**20, 1),
                       "peak_above_held_mib": round(statistics.median(m["peak_above_held_bytes"] for m in ms) / 2**20,
                                                    2),
                       "memory": ms[0]["memory"], "device": ms[0]["device"]}
        if config in screened:
            out[config]["screened"] = screened[config]
    return out


# --- 2. training and quality --------------------------------------------------------------------------------------

def grad_spikes(norms: list[float], skipped: list[int], window: int = SPIKE_WINDOW, k: float = SPIKE_K) -> dict:
    """Steps whose gradient norm exceeds ``k`` × the median of the ``window`` counted steps before it (steps the
    fp16 scaler skipped, whose norm is the overflow itself, are counted apart and left out)."""
    kept: list[float] = []
    spikes, worst = 0, 0.0
    for norm, skip in zip(norms, skipped, strict=True):
        if skip or not math.isfinite(norm):
            continue
        if len(kept) >= window:
            ratio = norm / max(statistics.median(kept[-window:]), 1e-12)
            worst = max(worst, ratio)
            spikes += ratio > k
        kept.append(norm)
    return {"spikes": spikes, "worst_ratio": round(worst, 2), "skipped_steps": int(sum(skipped)),
            "rule": f"norm > {k:g}x the median of the {window} steps before"}


def config_for(config: str, steps: int):
    """The demo preset for one configuration: its model trains at its side on the 64 px curated data (``ensure_data``:
    the store resizes them for 32 px)."""
    from aigc.config import preset
    from aigc.workloads.image import IMAGE

    side, precision = parse(config)
    return preset("demo", IMAGE).override({
        "workload": {"settings": {"resolution": side}}, "model": {"name": f"b8-{side}px-{precision}"},
        "train": {"precision": precision, "steps": steps, "eval_every": steps, "checkpoint_every": steps}})


def ensure_data(lake, steps: int) -> None:
    from aigc.lake.keys import partition
    from aigc.lake.publish import NotPublished, resolve
    from aigc.prepare import publish_prepared
    from aigc.workloads.image import prepare_image
    from aigc.workloads.image.rawdrop import make_raw_drop

    cfg = config_for("64/fp32", steps)  # the data at 64 px, for both sides
    try:
        resolve(lake, partition("curated", cfg.prepare.dataset, DATE))
    except NotPublished:
        raw = lake.sub(f"raw/{cfg.raw.source}")
        make_raw_drop(raw, DATE, cfg.raw, cfg.workload.settings.resolution)
        summary = prepare_image(raw, lake, DATE, cfg.prepare, settings=cfg.workload.settings)
        publish_prepared(lake, cfg.prepare.dataset, DATE, summary["run_id"])


def train_and_score(lake, config: str, steps: int, prompts: list[dict], confidence: float) -> dict:
    import torch

    from aigc.lake.keys import join
    from aigc.train.artifacts import METRICS, MODEL_CARD, WEIGHTS, training_run_prefix
    from aigc.train.launch import run_training
    from aigc.workloads import load_workload
    from aigc.workloads.image.grid import variant_quality

    cfg = config_for(config, steps)
    started = time.perf_counter()
    summary = run_training(lake, DATE, cfg, on_line=lambda _line: None)
    wall = time.perf_counter() - started
    prefix = training_run_prefix(cfg.model.name, DATE, summary["run_id"])
    metrics = lake.read_parquet([join(prefix, METRICS)]).to_pylist()
    trained = [r for r in metrics if r["step"] > 0]
    # The trained weights served as gate 3 would serve them (fp32), scored as the evaluation stage scores a variant.
    gen = load_workload("image").serving(lake.get_json(join(prefix, MODEL_CARD)), "fp32",
                                         lake.get_bytes(join(prefix, WEIGHTS)), torch.device("cpu"), summary["run_id"])
    quality = variant_quality(gen, prompts, None, confidence)
    verdicts, alignment = quality["verdicts"], quality["alignment"]
    out = {"run_id": summary["run_id"], "steps": summary["steps"], "precision": summary["precision"],
           "world_size": summary["world_size"], "wall_s": round(wall, 1),
           "samples_per_s": summary["median_samples_per_s"], "final_val_loss": summary["final_val_loss"],
           "initial_val_loss": summary["initial_val_loss"],
           "grad": grad_spikes([r["grad_norm"] for r in trained], [int(r.get("skipped_step") or 0) for r in trained]),
           "alignment": alignment.value, "alignment_ci": alignment.to_dict(), "verdicts": verdicts}
    print(f"B8 train {config:8s} {wall:6.1f} s, val loss {out['final_val_loss']:.5f}, alignment {alignment}, "
          f"{out['grad']['spikes']} spike(s), {out['grad']['skipped_steps']} skipped", file=sys.stderr, flush=True)
    return out


def untrainable(probes: dict, device: str, max_slowdown: float) -> dict[str, str]:
    """Configurations not worth training, with the reason: fp16 without CUDA (the pipeline refuses it), and a
    precision the probe found over ``max_slowdown`` times slower than the fastest at the same resolution (bf16 on a
    CPU without bf16 instructions runs ~10x slower). The model and the data are the same, only the numerics
    differ, so it cannot be the cheapest, and to be recommended it would have to beat that faster twin's alignment
    significantly; training it would take that many times longer to find out."""
    out = {}
    for c, p in probes.items():
        side, precision = parse(c)
        if precision == "fp16" and device != "cuda":
            out[c] = "TrainConfig.precision=fp16 needs CUDA"
            continue
        twins = {o: q["samples_per_s"] for o, q in probes.items() if parse(o)[0] == side
                 and not (parse(o)[1] == "fp16" and device != "cuda")}
        fastest = max(twins, key=twins.get)
        if twins[fastest] > max_slowdown * p["samples_per_s"]:
            out[c] = (f"{twins[fastest] / p['samples_per_s']:.1f}x slower than {fastest} in the probe "
                      f"(over --max-slowdown {max_slowdown:g}): the same model at the same resolution")
    return out


# --- 3. the recommendation ----------------------------------------------------------------------------------------

def recommendation(probes: dict, trained: dict, epsilon: float, confidence: float, tolerance: float) -> dict:
    """The evaluation stage's rule over the trained configurations: cost = training ms per sample in each probe
    round, size = peak memory; the chosen one as the config override that applies it."""
    from aigc.evaluate.metrics import pareto_front, recommend

    points = [{"variant": c, "alignment": t["alignment"], "alignment_ci": t["alignment_ci"],
               "latency_ms": round(1000 / probes[c]["samples_per_s"], 4),
               "latency_rounds_ms": probes[c]["ms_per_sample_rounds"],
               "size_bytes": int(probes[c]["peak_mib"] * 2**20), "final_val_loss": t["final_val_loss"]}
              for c, t in trained.items()]
    chosen, points = recommend(points, {c: t["verdicts"] for c, t in trained.items()}, epsilon=epsilon,
                               confidence=confidence, latency_tolerance=tolerance)
    front = pareto_front([p for p in points if p["alignment"] is not None], "alignment", "latency_ms")
    apply, cli = how_to_apply(chosen["variant"]) if chosen else (None, None)
    return {"points": points, "front": [p["variant"] for p in front], "recommended": chosen and chosen["variant"],
            "apply": apply, "cli": cli,
            "rule": f"cheapest (training ms per sample, faster by > {tolerance:.0%} in every probe round) of the "
                    f"configurations shown to be no worse than the best by {epsilon} or more (the upper end of the "
                    f"paired {confidence:.0%} interval of the loss below it); peak memory breaks ties "
                    f"(aigc.evaluate.metrics.recommend)"}


def plot(rec: dict) -> bytes:
    from aigc.plots import pareto_chart

    chosen = next((p for p in rec["points"] if p["variant"] == rec["recommended"]), None)
    front = [p for p in rec["points"] if p["variant"] in rec["front"]]
    return pareto_chart(rec["points"], front, chosen, title="B8: alignment after the same training budget against "
                        "training time per sample", x_label="training ms per sample (log scale)",
                        legend=("label: px/precision", "grey line: the front", "ring: recommended", "bar: interval"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="optimizer steps of every training run (the budget)")
    ap.add_argument("--rounds", type=int, default=3, help="probe rounds")
    ap.add_argument("--probe-steps", type=int, default=8)
    ap.add_argument("--probe-max-s", type=float, default=8.0, help="a probe stops after this long (≥ 2 steps)")
    ap.add_argument("--prompts", type=int, default=128, help="evaluation prompts per trained model")
    ap.add_argument("--max-slowdown", type=float, default=4.0,
                    help="not trained: a precision this many times slower in the probe than the fastest one at the "
                         "same resolution")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    ap.add_argument("--root", default=".bench/precision", help="bench lake folder (the drop is kept between runs)")
    ap.add_argument("--results", default=str(RESULTS), help="JSON out (the plot beside it, .png)")
    ap.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:  # one configuration, or several in turn (on CUDA: run_probes)
        device = args.device or "cpu"
        for config in args.probe.split(","):
            print(json.dumps(probe(config, device, args.probe_steps, args.probe_max_s)), flush=True)
            if device == "cuda":
                import gc

                import torch

                gc.collect()  # the last one's model and optimizer are gone before the next one's held memory is read
                torch.cuda.empty_cache()  # and their cached blocks go back (probe() resets the peak itself)
        return

    import torch

    from aigc.config import EvaluateConfig
    from aigc.lake import open_lake
    from aigc.workloads.image.reference import evaluation_prompts

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    started = time.perf_counter()
    probes = run_probes(args.configs, device, args.rounds, args.probe_steps, args.probe_max_s, args.max_slowdown)
    # A configuration screened after one round stays out, whatever the medians of the others became since.
    not_trained = {**untrainable(probes, device, args.max_slowdown),
                   **{c: f"{p['screened']} (screened after one probe round)" for c, p in probes.items()
                      if "screened" in p}}
    trainable = [c for c in args.configs if c not in not_trained]
    lake = open_lake(str(Path(args.root).resolve()))
    ensure_data(lake, args.steps)
    e = EvaluateConfig()
    prompts = evaluation_prompts(args.prompts, e.seed)
    trained = {c: train_and_score(lake, c, args.steps, prompts, e.confidence) for c in trainable}
    rec = recommendation(probes, trained, e.epsilon, e.confidence, e.latency_tolerance)
    batch = config_for(CONFIGS[0], args.steps).train.batch_size
    result = {"device": device, "steps": args.steps, "global_batch": batch, "prompts": len(prompts), "probe": probes,
              "trained": {c: {k: v for k, v in t.items() if k != "verdicts"} for c, t in trained.items()},
              "not_trained": not_trained,
              **rec, "seconds": round(time.perf_counter() - started, 1)}
    print("\nB8      samples/s (probe)   peak MiB   val loss   alignment [95%]          spikes  skipped",
          file=sys.stderr)
    for c in args.configs:
        p, t = probes[c], trained.get(c)
        tail = (f"{t['final_val_loss']:.5f}   {t['alignment']:.3f} [{t['alignment_ci']['lo']:.3f}, "
                f"{t['alignment_ci']['hi']:.3f}]   {t['grad']['spikes']:>6}  {t['grad']['skipped_steps']:>7}"
                if t else f"not trained: {not_trained[c]}")
        print(f"{c:8s} {p['samples_per_s']:>10.1f} ({p['min_max'][0]:.0f}-{p['min_max'][1]:.0f})  "
              f"{p['peak_mib']:>8.0f}   {tail}", file=sys.stderr)
    print(f"recommended: {rec['recommended']} ({rec['cli']})", file=sys.stderr)
    out = Path(args.results)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_results(out, result)
    out.with_suffix(".png").write_bytes(plot(rec))
    print(json.dumps({k: result[k] for k in ("device", "steps", "recommended", "apply", "front", "seconds")}))


if __name__ == "__main__":
    main()
