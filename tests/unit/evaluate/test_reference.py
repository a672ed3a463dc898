"""The checker's fixed reference set and the evaluation prompts: the same every day, every combination."""

import itertools

import pytest

from aigc.lake import LocalLake
from aigc.workloads.image.reference import (
    COMBINATIONS,
    checker_reference,
    evaluation_prompts,
    fingerprint,
    reference_scenes,
)
from aigc.workloads.world import COLOURS, POSITIONS, SHAPES, SIZES


def test_the_reference_set_is_every_combination_several_times_and_the_same_every_call():
    scenes = reference_scenes(4)
    assert len(scenes) == 4 * 648 == 2592
    combos = {(s.colour, s.shape, s.size, s.position) for s in scenes}
    assert combos == set(itertools.product(COLOURS, SHAPES, SIZES, POSITIONS))
    assert scenes == reference_scenes(4)
    assert len({(s.background, s.jitter, s.scale) for s in scenes}) == len(scenes)  # every rendering differs


def test_the_checker_is_right_on_99_percent_of_its_reference_set_with_confidence(tmp_path):
    lake = LocalLake(tmp_path / "lake")
    measured = checker_reference(lake, 32, 4)
    everything = measured["accuracy"]["all"]
    print(f"\nchecker on its reference set: {everything}; misread: {measured['misread']}")
    assert measured["scenes"] == 2592 and everything["lo"] >= 0.99  # the interval, not only the point, clears 99 %
    for attribute in ("colour", "shape", "size", "position"):
        assert measured["accuracy"][attribute]["value"] >= 0.995
    # Cached in the lake under the checker's fingerprint: a second evaluation reads it back.
    key = f"cache/checker/{fingerprint(32, 4)}/reference-r32.json"
    assert lake.exists(key) and checker_reference(lake, 32, 4)["correct"] == measured["correct"]


@pytest.mark.parametrize("resolution", [64])
def test_the_checker_reads_larger_images_as_well(tmp_path, resolution):
    measured = checker_reference(LocalLake(tmp_path / "lake"), resolution, 1)
    assert measured["accuracy"]["all"]["value"] >= 0.99


def test_evaluation_prompts_cover_every_combination_and_another_seed_draws_other_images():
    first, second = evaluation_prompts(648, 0), evaluation_prompts(648, 1)
    assert len({p["prompt"] for p in first}) == len(COMBINATIONS) == 648
    assert {p["prompt"] for p in first} == {p["prompt"] for p in second}
    assert {p["seed"] for p in first}.isdisjoint({p["seed"] for p in second})
    assert evaluation_prompts(648, 0) == first
    assert len(evaluation_prompts(700, 0)) == 700  # cycles past one of each
