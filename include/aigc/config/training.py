"""Stage 2 settings: the generator, its distributed training, and gate 2."""

from __future__ import annotations

from dataclasses import dataclass

from aigc.config._checks import _check_range
from aigc.config.review_names import REVIEW_FEEDBACK


@dataclass(frozen=True)
class ModelConfig:
    """The model stage 2 trains (its shape is the workload's: ``cfg.workload.settings``)."""

    name: str = "model"
    """Model name: training output under ``training/<name>/``, registry under ``models/<name>/``. A preset names it
    after the workload unless the workload names it (``Workload.config_overrides``): two workloads never share a
    registry by accident."""


PRECISIONS = ("auto", "fp32", "bf16", "fp16")
GRAD_COMPRESSIONS = ("none", "fp16", "bf16")
INIT_FROM = ("production", "scratch")
SPLITS = ("balanced", "length_grouped", "shuffled", "round_robin", "contiguous")


@dataclass(frozen=True)
class TrainConfig:
    """Stage 2: DDP training under torchrun. Batch sizes are global, so 1 and N processes train alike."""

    window_days: int = 3
    """Train on the published curated partitions of the last this-many days, ending at the run's date."""
    steps: int = 1500
    """Optimizer steps in all (over as many epochs as that takes)."""
    batch_size: int = 64
    """Samples per optimizer step over all ranks: micro_batch × grad_accum × world size."""
    grad_accum: int = 1
    """Micro-steps per optimizer step; DDP all-reduces only on the last one."""
    lr: float = 2e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 50
    weight_decay: float = 0.01
    clip_grad_norm: float = 1.0
    """The averaged gradient's norm is clipped to this (0: not clipped)."""
    clip_local_grad_norm: float = 0.0
    """Each rank's own gradient is clipped to this norm before the ranks' gradients are averaged (0: off), so one
    rank's exploding gradient (a bad shard, an overflow) cannot swamp the others' in the all-reduce: the seed's
    "clip before the all-reduce". It replaces DDP's overlapped all-reduce with one after the backward pass."""
    precision: str = "auto"
    """auto (bf16 on a GPU that has it, else fp32), fp32, bf16 (autocast, CPU or GPU), fp16 (GPU, GradScaler)."""
    grad_compression: str = "none"
    """DDP communication hook: compress gradients to fp16/bf16 for the all-reduce."""
    split: str = "balanced"
    """How the samples of a step are dealt to the ranks (train/balance.py): balanced by estimated cost (the
    default), or the simple alternatives kept for comparison (bench B3): length_grouped (Hugging Face's
    group_by_length: megabatches sorted by length), shuffled (DistributedSampler with shuffle), round_robin
    (without: the stored order, rank r takes every world-th sample), contiguous (each rank one block of the
    stored order)."""
    val_fraction: float = 0.05
    val_max: int = 512
    eval_every: int = 250
    checkpoint_every: int = 250
    health_every: int = 10
    """Gather every rank's local gradient norm (before the all-reduce) this often."""
    health_k: float = 5.0
    """A rank whose local norm exceeds k × the median of all ranks is flagged."""
    prefetch_batches: int = 8
    cache_bytes: int = 2 << 30
    """Decoded images each rank keeps in memory (whole shards, least recently used dropped first)."""
    init_from: str = "production"
    """Where the weights start (``aigc.train.warm_start``): production (the registry's production version, when
    there is one and it fits the workload's model and the window's vocabulary: each night's candidate is
    production trained on the newest window) or scratch (freshly initialised weights every run)."""
    review_feedback: str = "off"
    """What reviewers' labels do to this run's window (``aigc.train.feedback``): off, upweight (the samples of
    prompts judged wrong are seen review_upweight times per epoch) or drop (they leave the training split). Needs a
    workload whose samples carry their prompt (``Workload.prompt_column``: the image workloads' captions)."""
    review_upweight: int = 4
    """How many times per epoch review_feedback=upweight shows a sample of a prompt judged wrong."""
    seed: int = 0
    nproc: int = 0
    """Processes per node (torchrun --nproc-per-node); 0: one per visible GPU, or 2 on a host without GPUs."""
    nnodes: str = "1"
    """torchrun --nnodes: a count or a MIN:MAX range (elastic)."""
    rdzv_endpoint: str = ""
    """host:port of the c10d rendezvous for several nodes; empty: one node (--standalone), or for several, node 0
    announces its own through the lake and the others find it there (``aigc.train.rendezvous``)."""
    threads: int = 0
    """Intra-op threads per process; 0 shares the CPU cores among the local processes."""
    timeout_s: int = 6 * 3600

    def __post_init__(self) -> None:
        _check_range(self, "window_days", 1, 366)
        _check_range(self, "steps", 1, 10_000_000)
        _check_range(self, "batch_size", 1, 1 << 20)
        _check_range(self, "grad_accum", 1, 1024)
        _check_range(self, "lr", 1e-7, 10.0)
        _check_range(self, "min_lr_ratio", 0.0, 1.0)
        _check_range(self, "warmup_steps", 0, 10_000_000)
        _check_range(self, "weight_decay", 0.0, 10.0)
        _check_range(self, "clip_grad_norm", 0.0, 1e6)
        _check_range(self, "clip_local_grad_norm", 0.0, 1e6)
        _check_range(self, "review_upweight", 1, 1000)
        for name, allowed in (("precision", PRECISIONS), ("grad_compression", GRAD_COMPRESSIONS), ("split", SPLITS),
                              ("init_from", INIT_FROM), ("review_feedback", REVIEW_FEEDBACK)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"TrainConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        _check_range(self, "val_fraction", 0.0, 0.5)
        _check_range(self, "val_max", 1, 1_000_000)
        _check_range(self, "eval_every", 1, 10_000_000)
        _check_range(self, "checkpoint_every", 1, 10_000_000)
        _check_range(self, "health_every", 1, 10_000_000)
        _check_range(self, "health_k", 1.0, 1e6)
        _check_range(self, "prefetch_batches", 1, 1024)
        _check_range(self, "cache_bytes", 1 << 20, 1 << 40)
        _check_range(self, "nproc", 0, 1024)
        _check_range(self, "threads", 0, 1024)
        _check_range(self, "timeout_s", 1, 30 * 86400)
        object.__setattr__(self, "nnodes", str(self.nnodes))  # the form gives a number
        if not all(p.isdigit() and int(p) >= 1 for p in self.nnodes.split(":", 1)):
            raise ValueError(f"TrainConfig.nnodes must be N or MIN:MAX with N ≥ 1, got {self.nnodes!r}")

    @property
    def max_nodes(self) -> int:
        """The node count (the upper bound of MIN:MAX): how many node tasks the DAG starts."""
        return int(self.nnodes.split(":")[-1])

    def micro_batch(self, world_size: int) -> int:
        """Samples per rank per micro-step; the global batch must split evenly."""
        per_step = world_size * self.grad_accum
        if self.batch_size % per_step:
            raise ValueError(
                f"TrainConfig.batch_size={self.batch_size} does not split over {world_size} rank(s) × "
                f"grad_accum={self.grad_accum}; use a multiple of {per_step}")
        return self.batch_size // per_step


@dataclass(frozen=True)
class TrainingGateThresholds:
    """Gate 2 (train → deploy): what a training run must show before its model is handed on."""

    max_final_val_loss: float = 0.02
    """Validation loss at the last step, in the workload's unit (its ``loss_title``: per pixel, per token …)."""
    max_val_ratio: float = 0.8
    """Final / initial validation loss: training must have learned something."""
    max_imbalance: float = 0.05
    """The slowest rank's measured work over the run, max / mean − 1 of the ranks' busy seconds (train/timing.py).
    It passes on evidence: only when the upper end of the figure's one-sided 95% interval is within this (a run as
    unbalanced as this passes with probability at most 5%); the lower end above it fails the run, and an interval
    across it is "not enough evidence" (a longer run, more ``steps``, measures it more closely), which does not pass:
    a short run on a noisy host needs a wider maximum (the smoke preset's 25%)."""
    max_flagged_steps: int = 0
    """Health checks in which some rank's local gradient norm exceeded health_k × the median."""
    max_skipped_fraction: float = 0.5
    """Steps the fp16 GradScaler skipped (their gradients overflowed), as a share of all steps. A few while the
    scale settles are normal; a run that skips most of its updates has not trained."""

    def __post_init__(self) -> None:
        _check_range(self, "max_final_val_loss", 0.0, 1e9)
        _check_range(self, "max_val_ratio", 0.0, 10.0)
        _check_range(self, "max_imbalance", 0.0, 100.0)
        _check_range(self, "max_flagged_steps", 0, 1 << 40)
        _check_range(self, "max_skipped_fraction", 0.0, 1.0)
