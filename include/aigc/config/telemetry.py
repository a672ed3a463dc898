"""What the GPUs did: the sampler beside training and each generation shard (``aigc.telemetry``)."""

from __future__ import annotations

from dataclasses import dataclass

from aigc.config._checks import _check_range


@dataclass(frozen=True)
class TelemetryConfig:
    """GPU telemetry: pynvml read a few times a second on a thread of the task that uses the GPUs (the training
    launcher for its node's GPUs, a generation shard for its own); the task's summary gets the figures."""

    sample_hz: float = 4.0
    """Readings a second of each GPU (utilisation, memory used, power, temperature); 0 turns the sampler off."""
    min_gpu_utilisation: float = 0.3
    """A task whose GPUs' mean utilisation is below this fraction is flagged (``low_utilisation``) in its summary,
    the run report and the view: the GPU waited, for data or for the host (the seed's symptom, below 30 %)."""

    def __post_init__(self) -> None:
        _check_range(self, "sample_hz", 0.0, 100.0)
        _check_range(self, "min_gpu_utilisation", 0.0, 1.0)
