"""The checker, the Fréchet distance and the Pareto rule on inputs whose answers are known."""

import io
import itertools

import numpy as np
import pytest
from PIL import Image

from aigc.evaluate.checker import read, score
from aigc.evaluate.metrics import assess, frechet_distance, pareto_front, recommend
from aigc.shapes import COLOURS, POSITIONS, SHAPES, SIZES, Scene, parse_caption, render
from tests.training_fixtures import DATE


def test_every_caption_of_the_grammar_parses_back_to_its_scene():
    for colour, shape, size, position in itertools.product(COLOURS, SHAPES, SIZES, POSITIONS):
        scene = Scene(colour, shape, size, position)
        assert parse_caption(scene.caption) == {"colour": colour, "shape": shape, "size": size, "position": position}
    assert parse_caption("a photo of a cat") is None


def test_the_checker_reads_clean_renders_of_every_combination():
    wrong = []
    for colour, shape, size, position in itertools.product(COLOURS, SHAPES, SIZES, POSITIONS):
        scene = Scene(colour, shape, size, position)
        verdict = score(parse_caption(scene.caption), read(np.asarray(render(scene, 32))))
        if not all(verdict.values()):
            wrong.append(scene.caption)
    assert not wrong, wrong[:5]


def test_the_checker_is_accurate_on_real_images_with_jitter_scale_and_backgrounds():
    import random

    from aigc.shapes import png_bytes, random_scene

    rng = random.Random(7)
    scenes = [random_scene(rng) for _ in range(1000)]
    images = [np.asarray(Image.open(io.BytesIO(png_bytes(render(s, 32))))) for s in scenes]  # PNG round trip
    result = assess(images, [s.caption for s in scenes])
    print(f"\nchecker on 1000 rendered scenes: {result['alignment']}")
    assert result["alignment"]["all"] >= 0.98


def test_the_checker_on_the_held_out_curated_images(curated_lake):
    from aigc.evaluate.run import real_images

    images, captions = real_images(curated_lake, "shapes", DATE, 512)
    result = assess(images, captions)
    print(f"\nchecker on {len(images)} held-out curated images: {result['alignment']}")
    assert len(images) >= 16 and result["alignment"]["all"] >= 0.9  # a small sample: one miss is 4 %


def test_noise_is_not_read_as_a_shape_the_prompt_asked_for():
    rng = np.random.default_rng(0)
    noise = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(32)]
    result = assess(noise, ["a small red circle on the left"] * 32)
    assert result["alignment"]["all"] <= 0.1


def test_frechet_distance_is_zero_for_one_distribution_and_grows_with_the_shift():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(4000, 3)), rng.normal(size=(4000, 3))
    assert frechet_distance(a, b) < 0.02
    assert frechet_distance(a, b + 2.0) == pytest.approx(12.0, rel=0.05)  # ‖μ‖² = 3 · 2²


def test_the_pareto_front_and_the_recommendation_on_known_points():
    points = [{"name": n, "q": q, "c": c} for n, q, c in [
        ("a", 0.90, 10.0), ("b", 0.89, 4.0), ("c", 0.80, 1.0), ("d", 0.85, 5.0), ("e", 0.70, 2.0), ("f", 0.90, 12.0)]]
    front = pareto_front(points, "q", "c")
    assert [p["name"] for p in front] == ["c", "b", "a"]  # d is beaten by b, e by c, f by a
    assert recommend(front, "q", "c", epsilon=0.02)["name"] == "b"  # cheapest within 0.02 of 0.90
    assert recommend(front, "q", "c", epsilon=0.0)["name"] == "a"
    assert recommend(front, "q", "c", epsilon=0.2)["name"] == "c"
