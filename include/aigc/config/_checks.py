"""Validation helpers every config dataclass uses: errors name the class, the field, the range and the value."""

from __future__ import annotations

RESOLUTIONS = (32, 64, 128, 256)


def _check_range(obj: object, name: str, lo: float, hi: float) -> None:
    value = getattr(obj, name)
    if not lo <= value <= hi:
        raise ValueError(f"{type(obj).__name__}.{name} must be in [{lo}, {hi}], got {value!r}")


def _check_order(obj: object, low: str, high: str) -> None:
    lo, hi = getattr(obj, low), getattr(obj, high)
    if lo > hi:
        cls = type(obj).__name__
        raise ValueError(f"{cls}.{low} ({lo}) must not exceed {cls}.{high} ({hi})")
