"""Sampling error for every figure that moves a model or a verdict.

* a rate (alignment, checker accuracy): Wilson's score interval, right near 0 and 1 where the
  normal approximation is not;
* a difference between two configurations scored on the same prompts and seeds: Newcombe's
  interval for paired proportions (method 10, built from the two Wilson intervals and the
  correlation of the pairs), narrower than an unpaired one because most prompts get the same
  verdict from both;
* anything else (the Fréchet distance): a percentile bootstrap with a fixed seed.

Decisions read an interval against a threshold with three outcomes (``outcome``): a minimum passes only when the
lower end clears it, fails when the whole interval is below, and is undecided otherwise; an undecided rate can
draw more samples in looks whose error rates hold over all of them (``sequential_rate``). Promotion and the
recommendation ask for evidence the same way (non-inferiority: the upper end of a loss below its margin).
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


def paired_mean_difference(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Estimate:
    """mean(a) − mean(b) for scores of the same items, with the normal interval of the mean paired difference (its
    sample standard deviation; no value below two items)."""
    if len(a) != len(b):
        raise ValueError(f"paired scores must be of equal length, got {len(a)} and {len(b)}")
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) < 2:
        return Estimate(None, None, None, len(d), confidence)
    half = z_of(confidence) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return Estimate(float(d.mean()), float(d.mean()) - half, float(d.mean()) + half, len(d), confidence)


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


@dataclass(frozen=True)
class Sequential:
    """A rate measured in rounds until it is decided against a threshold (``sequential_rate``)."""

    estimate: Estimate
    rounds: int
    max_rounds: int
    outcome: str
    """"pass" (the interval clears the threshold), "fail" (wholly on the wrong side), "undecided" (at the budget)."""

    def to_dict(self) -> dict:
        return {"rounds": self.rounds, "max_rounds": self.max_rounds, "outcome": self.outcome,
                "confidence_per_look": self.estimate.confidence, "n": self.estimate.n}


def outcome(estimate: Estimate | dict, threshold: float, at_least: bool = True) -> str:
    """Three outcomes of a rate against a threshold: a minimum passes only when the interval's lower end clears it
    (a maximum: the upper end), fails when the whole interval is on the wrong side, and is undecided otherwise."""
    e = estimate.to_dict() if isinstance(estimate, Estimate) else (estimate or {})
    lo, hi = e.get("lo"), e.get("hi")
    if lo is None or hi is None:
        return "undecided"
    if at_least:
        return "pass" if lo >= threshold else "fail" if hi < threshold else "undecided"
    return "pass" if hi <= threshold else "fail" if lo > threshold else "undecided"


def sequential_rate(draw: Callable[[int], Sequence[bool]], n: int, threshold: float, *, confidence: float,
                    max_rounds: int, at_least: bool = True) -> Sequential:
    """A rate decided against ``threshold`` with as few samples as it takes: ``draw(m)`` judges ``m`` items (the
    first ``n``, then ``2n``, ``4n`` … up to ``max_rounds`` looks) and each look reads Wilson's interval at the level
    that keeps the error rates over all looks: α = 1 − ``confidence`` spent evenly, α / ``max_rounds`` a look
    (Bonferroni's bound on the union of the looks; the linear spending function of Lan & DeMets, "Discrete
    sequential boundaries for clinical trials", Biometrika 70(3), 1983, with equal steps). So a rate exactly at a
    minimum passes by chance with probability at most α / 2 however many looks it takes, and one well clear of it
    decides at the first look."""
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be at least 1, got {max_rounds}")
    level = 1 - (1 - confidence) / max_rounds
    for look in range(1, max_rounds + 1):
        verdicts = draw(n * 2 ** (look - 1))
        estimate = clopper_pearson(sum(bool(v) for v in verdicts), len(verdicts), level)
        decided = outcome(estimate, threshold, at_least)
        if decided != "undecided":
            break
    return Sequential(estimate, look, max_rounds, decided)


def _log_choose(n: int) -> np.ndarray:
    return np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n + 1)])


def binomial_pmf(n: int, p: float, log_choose: np.ndarray | None = None) -> np.ndarray:
    """P(k successes in n trials), k = 0 … n (log-space, so large n neither overflows nor underflows to NaN)."""
    if p <= 0 or p >= 1:
        out = np.zeros(n + 1)
        out[0 if p <= 0 else n] = 1.0
        return out
    k = np.arange(n + 1)
    return np.exp((_log_choose(n) if log_choose is None else log_choose) + k * math.log(p) + (n - k) * math.log1p(-p))


def clopper_pearson(successes: int, n: int, confidence: float = 0.95) -> Estimate:
    """The rate successes / n with Clopper and Pearson's exact interval ("The use of confidence or fiducial limits
    illustrated in the case of the binomial", Biometrika 26(4), 1934): each end is the rate at which the observed
    count is just in the (1 − confidence) / 2 tail, so a model exactly at a minimum clears it by chance with
    probability at most (1 − confidence) / 2 at any sample size (Wilson's interval only approximately: 2.6 % at
    64 prompts and 0.3). Gate 5's decisions read it; found by bisection on the binomial tails."""
    if n == 0:
        return Estimate(None, None, None, 0, confidence)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..n={n}, got {successes}")
    tail, log_choose = (1 - confidence) / 2, _log_choose(n)

    def solve(reaches_tail) -> float:
        a, b = 0.0, 1.0
        for _ in range(50):
            mid = (a + b) / 2
            a, b = (a, mid) if reaches_tail(mid) else (mid, b)
        return (a + b) / 2

    lo = 0.0 if successes == 0 else solve(lambda p: binomial_pmf(n, p, log_choose)[successes:].sum() >= tail)
    hi = 1.0 if successes == n else solve(lambda p: binomial_pmf(n, p, log_choose)[: successes + 1].sum() <= tail)
    return Estimate(successes / n, lo, hi, n, confidence)


def exact_regions(n: int, threshold: float, confidence: float, at_least: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """For every count 0 … n: whether Clopper–Pearson's interval clears ``threshold`` (pass) and whether it lies
    wholly on the wrong side (fail), read from the binomial tails at the threshold itself (the interval's end is
    past the threshold exactly when the count is in the threshold's (1 − confidence) / 2 tail)."""
    tail = (1 - confidence) / 2
    if not 0 < threshold < 1:  # at 0 or 1: every interval reaches it, and only the extreme count ends there
        s = np.arange(n + 1)
        above, below = (s >= 0, s < 0) if threshold <= 0 else (s < 0, s < n)
        return (above, below) if at_least else (s > n, s >= 1) if threshold <= 0 else (s >= 0, s < 0)
    pmf = binomial_pmf(n, threshold)
    above = np.cumsum(pmf[::-1])[::-1] <= tail  # P(X ≥ s) in the tail: the lower end is above the threshold
    below = np.cumsum(pmf) <= tail  # P(X ≤ s) in the tail: the upper end is below it
    return (above, below) if at_least else (below, above)


def pass_probability(rate: float, threshold: float, n: int, *, confidence: float, max_rounds: int,
                     at_least: bool = True) -> tuple[float, float]:
    """(P(pass at the first look), P(pass within ``max_rounds`` looks)) of ``sequential_rate`` for a true rate
    ``rate``, computed exactly: the distribution of successes not yet decided is carried from look to look (each
    look adds as many items as were judged before it) and the mass whose interval clears ``threshold`` is counted."""
    level = 1 - (1 - confidence) / max_rounds
    undecided, judged, passed, first = np.array([1.0]), 0, 0.0, 0.0
    for look in range(1, max_rounds + 1):
        m = n * 2 ** (look - 1)
        undecided = np.convolve(undecided, binomial_pmf(m - judged, rate))
        judged = m
        wins, losses = exact_regions(m, threshold, level, at_least)
        passed += float(undecided[wins].sum())
        first = passed if look == 1 else first
        undecided = np.where(wins | losses, 0.0, undecided)
    return first, passed


def design(threshold: float, expected: float, n: int, *, confidence: float, max_rounds: int,
           at_least: bool = True) -> dict:
    """The two error rates a check on a rate is designed for, computed exactly for its sample (``n`` items at the
    first look, ``max_rounds`` looks): a false pass (a model exactly at ``threshold`` passes; at most
    (1 − ``confidence``) / 2 by construction) and a false failure (a model at ``expected``, the quality the preset's
    model usually has, does not pass), with the chance that such a model passes at the first look."""
    _, false_pass = pass_probability(threshold, threshold, n, confidence=confidence, max_rounds=max_rounds,
                                     at_least=at_least)
    first, passes = pass_probability(expected, threshold, n, confidence=confidence, max_rounds=max_rounds,
                                     at_least=at_least)
    return {"threshold": threshold, "expected": expected, "n": n, "max_rounds": max_rounds,
            "false_pass_at_threshold": round(false_pass, 5), "false_pass_bound": round((1 - confidence) / 2, 5),
            "false_failure_at_expected": round(max(0.0, 1 - passes), 5), "first_look_pass_at_expected": round(first, 5)}
