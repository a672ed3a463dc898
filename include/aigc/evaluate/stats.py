"""Sampling error for every figure that moves a model or a verdict.

* a rate (alignment, checker accuracy): Wilson's score interval, right near 0 and 1 where the
  normal approximation is not;
* a difference between two configurations scored on the same prompts and seeds: Newcombe's
  interval for paired proportions (method 10, built from the two Wilson intervals and the
  correlation of the pairs), narrower than an unpaired one because most prompts get the same
  verdict from both;
* anything else (the Fréchet distance): a percentile bootstrap with a fixed seed.

Decisions read the intervals one way: a check fails only when the interval lies wholly on the
wrong side of its threshold ("significantly below"), so a configuration whose true figure meets
the threshold fails with probability at most (1 − confidence) / 2 per check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np


def z_of(confidence: float) -> float:
    """The two-sided normal quantile: 1.96 for 0.95."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return NormalDist().inv_cdf((1 + confidence) / 2)


@dataclass(frozen=True)
class Estimate:
    """A figure with its interval and the sample it rests on."""

    value: float | None
    lo: float | None
    hi: float | None
    n: int
    confidence: float

    def to_dict(self) -> dict:
        return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    def __str__(self) -> str:
        if self.value is None:
            return f"n/a (n={self.n})"
        return f"{self.value:.3f} [{self.lo:.3f}, {self.hi:.3f}] (n={self.n})"


def wilson(successes: int, n: int, confidence: float = 0.95) -> Estimate:
    """The rate successes / n with Wilson's score interval; an empty sample has no value."""
    if n == 0:
        return Estimate(None, None, None, 0, confidence)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..n={n}, got {successes}")
    z = z_of(confidence)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # At 0 or n successes one end is exactly 0 or 1; the formula gets there only up to rounding.
    lo, hi = (0.0 if successes == 0 else centre - half), (1.0 if successes == n else centre + half)
    return Estimate(p, max(0.0, lo), min(1.0, hi), n, confidence)


def paired_difference(a: Sequence[bool], b: Sequence[bool], confidence: float = 0.95) -> Estimate:
    """rate(a) − rate(b) for verdicts on the same items, with Newcombe's paired interval (method 10)."""
    if len(a) != len(b):
        raise ValueError(f"paired verdicts must be of equal length, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        return Estimate(None, None, None, 0, confidence)
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    both, only_a, only_b = int((x & y).sum()), int((x & ~y).sum()), int((~x & y).sum())
    neither = n - both - only_a - only_b
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    w1, w2 = wilson(both + only_a, n, confidence), wilson(both + only_b, n, confidence)
    margins = (both + only_a) * (neither + only_b) * (both + only_b) * (neither + only_a)
    phi = (both * neither - only_a * only_b) / math.sqrt(margins) if margins else 0.0
    d1, u1 = p1 - w1.lo, w1.hi - p1
    d2, u2 = p2 - w2.lo, w2.hi - p2
    delta = math.sqrt(max(0.0, d1 * d1 - 2 * phi * d1 * u2 + u2 * u2))
    epsilon = math.sqrt(max(0.0, u1 * u1 - 2 * phi * u1 * d2 + d2 * d2))
    diff = p1 - p2
    return Estimate(diff, max(-1.0, diff - delta), min(1.0, diff + epsilon), n, confidence)


def bootstrap(statistic: Callable[[np.random.Generator], float], value: float, n: int, *,
              resamples: int = 200, confidence: float = 0.95, seed: int = 0) -> Estimate:
    """A percentile interval for ``value``: ``statistic(rng)`` computes it once on a resample."""
    if not math.isfinite(value):
        return Estimate(None, None, None, n, confidence)
    rng = np.random.default_rng(seed)
    draws = np.array([statistic(rng) for _ in range(resamples)], dtype=np.float64)
    draws = draws[np.isfinite(draws)]
    if not len(draws):
        return Estimate(value, None, None, n, confidence)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(draws, [tail, 100 - tail])
    return Estimate(value, float(min(lo, value)), float(max(hi, value)), n, confidence)
