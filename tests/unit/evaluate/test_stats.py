"""Intervals checked against published values and by their coverage on simulated data."""

import numpy as np
import pytest

from aigc.evaluate.stats import bootstrap, paired_difference, wilson, z_of


@pytest.mark.parametrize("k,n", [(81, 263), (15, 148), (1, 10), (127, 128), (640, 648)])
def test_wilson_bounds_are_where_the_score_test_is_at_its_critical_value(k, n):
    # Wilson's interval is, by definition, the p0 whose score statistic |p̂ − p0| / √(p0(1 − p0)/n) equals z.
    e, z = wilson(k, n), z_of(0.95)
    for p0 in (e.lo, e.hi):
        assert abs(k / n - p0) / np.sqrt(p0 * (1 - p0) / n) == pytest.approx(z, rel=1e-9)
    assert e.lo < k / n < e.hi


def test_wilson_at_the_edges_and_on_nothing():
    assert wilson(0, 10).lo == 0.0 and 0.2 < wilson(0, 10).hi < 0.35  # not the Wald interval's zero width
    assert wilson(10, 10).hi == 1.0 and 0.65 < wilson(10, 10).lo < 0.8
    assert wilson(0, 0).value is None and z_of(0.95) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError, match="within 0..n=5"):
        wilson(6, 5)


def test_paired_difference_is_antisymmetric_and_zero_for_identical_verdicts():
    rng = np.random.default_rng(3)
    a, b = rng.random(200) < 0.8, rng.random(200) < 0.7
    ab, ba = paired_difference(a, b), paired_difference(b, a)
    assert ab.value == pytest.approx(-ba.value) and ab.lo == pytest.approx(-ba.hi) and ab.hi == pytest.approx(-ba.lo)
    same = paired_difference(a, a)
    assert same.value == 0 and same.lo < 0 < same.hi  # no discordant pair is still not proof of equality
    with pytest.raises(ValueError, match="equal length"):
        paired_difference(a, b[:10])


def test_paired_interval_covers_the_true_difference_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    n, trials, covered = 300, 2000, 0
    # Correlated verdicts: most prompts are easy or hard for both configurations.
    for _ in range(trials):
        shared = rng.random(n)
        a = shared < 0.85
        b = np.where(rng.random(n) < 0.9, a, rng.random(n) < 0.80)
        truth = 0.85 - (0.9 * 0.85 + 0.1 * 0.80)
        d = paired_difference(a, b)
        covered += d.lo <= truth <= d.hi
    assert 0.93 <= covered / trials <= 0.985


def test_three_prompts_in_128_is_not_a_significant_difference():
    best = [True] * 109 + [False] * 19
    other = [True] * 106 + [False] * 22  # the same prompts, 3 more misses
    d = paired_difference(best, other)
    assert d.value == pytest.approx(3 / 128) and d.lo <= 0.0 < d.hi


def test_bootstrap_interval_brackets_its_value():
    data = np.random.default_rng(1).normal(size=500)
    e = bootstrap(lambda rng: float(data[rng.integers(0, 500, 500)].mean()), float(data.mean()), 500)
    assert e.lo < e.value < e.hi and e.hi - e.lo == pytest.approx(2 * 1.96 / np.sqrt(500), rel=0.25)
