"""Quality gates (Great Expectations 1.x) between the stages."""

from aigc.quality.gate import GateFailed, Table, run_gate

__all__ = ["GateFailed", "Table", "run_gate"]
