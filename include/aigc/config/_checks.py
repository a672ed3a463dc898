"""Validation helpers every config dataclass uses: errors name the class, the field, the range and the value."""

from __future__ import annotations


def _check_range(obj: object, name: str, lo: float, hi: float) -> None:
    value = getattr(obj, name)
    if not lo <= value <= hi:
        raise ValueError(f"{type(obj).__name__}.{name} must be in [{lo}, {hi}], got {value!r}{_where(obj, name)}")


def _where(obj: object, name: str) -> str:
    """' (set with …)': where a user changes the field, for the classes the pipeline configures."""
    from aigc.config.form import SECTIONS, how_to_set, how_to_set_setting

    section = SECTIONS.get(type(obj).__name__)
    if section:
        return f" (set with {how_to_set(section, name)})"
    workload = getattr(type(obj), "workload", None)  # a workload's settings class names its workload
    return f" (set with {how_to_set_setting(workload, name)})" if isinstance(workload, str) else ""


def _check_order(obj: object, low: str, high: str) -> None:
    lo, hi = getattr(obj, low), getattr(obj, high)
    if lo > hi:
        cls = type(obj).__name__
        raise ValueError(f"{cls}.{low} ({lo}) must not exceed {cls}.{high} ({hi}){_where(obj, low)}")
