"""Stages 3 and 4 settings: variants and gate 3; adaptive batching, generation and gate 4."""

from __future__ import annotations

from dataclasses import dataclass

from aigc.config._checks import _check_range
from aigc.config.variant_names import AUTO, VARIANTS, is_variant
from aigc.jsonlines import check_limits


@dataclass(frozen=True)
class DeployConfig:
    """Stage 3: which optimised variants to build and how to measure them."""

    variants: str = "fp32,bf16"
    """Comma-separated, of the workload's ``variant_kinds``: fp32 (the baseline, always built), bf16, pruned, int8dyn
    (int8 linear layers, PyTorch's dynamic quantization, CPU) (the core builds these from the state dict), onnx
    (ONNX Runtime fp32), int8 (ONNX Runtime, static post-training quantization), which a workload that exports a
    graph builds (the image workload's default is fp32, bf16, pruned, onnx and int8); and for a workload that serves
    with denoising steps (hf-diffusion), an encoding with its steps and scheduler (``bf16-s20``, ``fp32-s8-dpm``:
    ``config.variant_names``), which reads the encoding's weights."""
    sparsity: float = 0.5
    """Pruned variant: fraction of conv/linear weights set to zero (smallest magnitude first)."""
    smoke_prompts: int = 32
    """Fixed prompts (the workload's ``smoke_prompts``, seeded) every variant generates for comparison."""
    seed: int = 1234
    calibration_samples: int = 256
    """Curated captions fed through the graph to calibrate INT8 activation ranges."""
    latency_batch: int = 64
    """The larger batch at which latency per sample is measured (batch 1 is always measured)."""
    latency_repeats: int = 7
    """Timed repeats per latency figure; the median is recorded."""

    def __post_init__(self) -> None:
        unknown = [v for v in self.variant_list if not is_variant(v)]
        if unknown or not self.variant_list:
            raise ValueError(f"DeployConfig.variants must list some of {VARIANTS} (or, for a workload that serves with "
                             f"denoising steps, an encoding with steps: bf16-s20, fp32-s8-dpm), got {self.variants!r}: "
                             f"{unknown} unknown")
        _check_range(self, "sparsity", 0.0, 0.99)
        _check_range(self, "smoke_prompts", 1, 100_000)
        _check_range(self, "calibration_samples", 1, 1_000_000)
        _check_range(self, "latency_batch", 1, 1 << 16)
        _check_range(self, "latency_repeats", 1, 1000)

    @property
    def variant_list(self) -> list[str]:
        names = [v.strip() for v in self.variants.split(",") if v.strip()]
        return ["fp32", *[v for v in names if v != "fp32"]]  # the baseline first, always


@dataclass(frozen=True)
class DeployGateThresholds:
    """Gate 3 (deploy → generate): the smoke test every variant takes; fp32 must pass it. How close a variant's
    outputs must be to fp32's is the workload's (``Workload.variant_checks``, bounds in its settings)."""

    max_latency_ms: float = 100.0
    """Per sample, at batch 1 (≈4 ms for the demo model on one idle core; the margin absorbs a busy host)."""
    max_slowdown_vs_fp32: float = 3.0
    """A variant slower than fp32 by more than this factor at batch 1, on the device gate 3 timed it on, is not
    eligible: a variant exists to serve cheaper, and this one only costs there (bf16 on a CPU that emulates it, one
    without AVX512-BF16 or AMX, ran the demo model ~20× slower than fp32), while stage 5 would judge it on every
    evaluation prompt for a point it cannot recommend."""

    def __post_init__(self) -> None:
        _check_range(self, "max_latency_ms", 0.0, 1e7)
        _check_range(self, "max_slowdown_vs_fp32", 1.0, 1e6)


@dataclass(frozen=True)
class BatchingConfig:
    """Stage 4's adaptive batcher (``aigc.batching``): memory is a ceiling, throughput decides the size."""

    budget_fraction: float = 0.8
    """Of the device's free memory (pynvml on GPUs; cgroup/psutil on CPU)."""
    budget_mb: int = 0
    """A fixed budget instead of the probe (0: probe)."""
    safety_margin_mb: int = 256
    grow: float = 2.0
    """Factor between the batch sizes tried while exploring and re-probing."""
    shrink: float = 0.7
    """A size that ran out of memory twice in a row becomes a ceiling at this fraction of it."""
    max_batch: int = 0
    """A hard cap on the batch size (0: none; the memory budget and measured throughput decide)."""
    max_retries: int = 8
    """Out-of-memory retries of a single item before it is reported as too large."""
    backoff_s: float = 0.05
    backoff_max_s: float = 2.0
    jitter: float = 0.5
    tolerance: float = 0.03
    """Relative items/s gain a size must show over the best so far to replace it."""
    judge_batches: int = 2
    """Batches a size is judged on once they last a fifth of the batcher's judging time (``AdaptiveBatcher``): two
    hold a millisecond batch's timer noise down; a workload whose batches last tens of milliseconds and whose buckets
    hold few items may judge on one (the hf-causal-lm workload)."""
    oom_rate: float = 0.0
    """Fault injection (tests, benchmarks): raise out-of-memory at this rate."""

    def __post_init__(self) -> None:
        _check_range(self, "budget_fraction", 0.01, 1.0)
        _check_range(self, "budget_mb", 0, 1 << 30)
        _check_range(self, "safety_margin_mb", 0, 1 << 30)
        _check_range(self, "grow", 1.05, 10.0)
        _check_range(self, "shrink", 0.01, 0.99)
        _check_range(self, "max_batch", 0, 1 << 20)
        _check_range(self, "max_retries", 0, 1000)
        _check_range(self, "backoff_s", 0.0, 60.0)
        _check_range(self, "backoff_max_s", 0.0, 3600.0)
        _check_range(self, "jitter", 0.0, 1.0)
        _check_range(self, "tolerance", 0.0, 1.0)
        _check_range(self, "judge_batches", 1, 64)
        _check_range(self, "oom_rate", 0.0, 0.9)

    def batcher_options(self) -> dict:
        """These settings as ``AdaptiveBatcher``'s keyword arguments: stage 4's batcher and the grid's that times it
        are built from one place."""
        return {"grow": self.grow, "shrink": self.shrink, "max_batch": self.max_batch, "max_retries": self.max_retries,
                "backoff_s": self.backoff_s, "backoff_max_s": self.backoff_max_s, "jitter": self.jitter,
                "tolerance": self.tolerance, "judge_batches": self.judge_batches}


@dataclass(frozen=True)
class GenerateConfig:
    """Stage 4: which prompts, which model variant, how many mapped shards."""

    variant: str = AUTO
    """The candidate's variant to generate with; it must have passed gate 3. ``auto`` (the default): each shard's
    worker chooses: the variant stage 5 recommended for its device class (the
    version's, else production's), else on a CUDA worker the fastest variant gate 3 passed and timed on a GPU, else
    bf16 there where gate 3 passed it, else fp32; ONNX and int8 variants only where a CPU worker's class had them
    recommended."""
    model_ref: str = "candidate"
    """Registry alias or version to generate with."""
    prompts: int = 512
    """Demo prompt set: this many held-out captions (when no prompt file was dropped)."""
    blocked_prompts: int = 8
    """…plus this many prompts with blocked terms, which must be refused."""
    shards: int = 4
    """Mapped tasks (one per shard)."""
    seed: int = 0
    max_prompt_chars: int = 512
    gallery_images: int = 64
    """Images per gallery PNG (a grid)."""
    max_prompt_file_bytes: int = 256 * 1024 * 1024
    """A prompt file larger than this is refused before it is read (and if it grows past it while read)."""
    max_prompts: int = 1_000_000
    """…and one of more prompts (non-blank lines)."""
    max_line_bytes: int = 64 * 1024
    """A prompt file's line longer than this is refused as its prompt (``record_too_large``), the rest answered;
    the reader skips it in bounded memory."""
    max_json_depth: int = 16
    """…a line nested deeper, or holding a longer integer (``malformed_json``), or more values…"""
    max_json_int_digits: int = 20
    max_json_values: int = 1000

    def __post_init__(self) -> None:
        if self.variant != AUTO and not is_variant(self.variant):
            raise ValueError(f"GenerateConfig.variant must be {AUTO!r}, one of {VARIANTS} or an encoding with steps "
                             f"(bf16-s20, fp32-s8-dpm), got {self.variant!r}")
        _check_range(self, "prompts", 1, 10_000_000)
        _check_range(self, "blocked_prompts", 0, 1_000_000)
        _check_range(self, "shards", 1, 4096)
        _check_range(self, "max_prompt_chars", 1, 100_000)
        _check_range(self, "gallery_images", 1, 4096)
        _check_range(self, "max_prompt_file_bytes", 1, 1 << 40)
        _check_range(self, "max_prompts", 1, 100_000_000)
        check_limits(self)

    @property
    def json_limits(self):
        """The bounds on one line of a prompt file (``aigc.jsonlines``)."""
        from aigc.jsonlines import JsonLimits

        return JsonLimits.of(self, "generate")


@dataclass(frozen=True)
class GenerateGateThresholds:
    """Gate 4 (generate → evaluate)."""

    max_blank_fraction: float = 0.02
    """Of the generated outputs, the share that may be blank (what blank means is the workload's: a flat image, an
    empty text)."""

    def __post_init__(self) -> None:
        _check_range(self, "max_blank_fraction", 0.0, 1.0)
