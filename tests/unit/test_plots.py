"""Charts and galleries people read: every Pareto point labelled clear of the others, every image captioned."""

import io

import numpy as np
from PIL import Image

from aigc.plots import _free_spot, pareto_chart
from aigc.workloads.image.gallery import gallery_png
from aigc.workloads.world import Scene, png_bytes, render


def _ink(img: Image.Image, box) -> int:
    """Dark pixels in a region: drawn text."""
    return int((np.asarray(img.crop(box).convert("L")) < 128).sum())


def test_label_boxes_near_coincident_points_do_not_overlap():
    placed = []
    for _ in range(6):  # six configurations at (almost) the same cost and quality
        placed.append(_free_spot(placed, 100.0, 100.0, 90.0, 11.0))
    for i, a in enumerate(placed):
        for b in placed[i + 1:]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)


def test_the_pareto_chart_labels_every_point():
    points = [{"variant": v, "policy": p, "alignment": q, "latency_ms": ms, "alignment_ci": {"lo": q - 0.02,
                                                                                         "hi": q + 0.02}}
              for v, p, q, ms in [("fp32", "batch1", 0.87, 3.5), ("fp32", "adaptive", 0.87, 2.0),
                                  ("int8", "adaptive", 0.86, 0.9), ("bf16", "batch1", 0.87, 35.0)]]
    png = pareto_chart(points, points[2:3], points[2])
    img = Image.open(io.BytesIO(png))
    assert img.size == (760, 460)
    # Ink right of each point (where its label goes first): 4 labels, plus the axes' own text.
    assert _ink(img, (70, 36, 610, 410)) > 4 * 60


def test_every_gallery_image_has_its_prompt_under_it():
    scenes = [Scene("red", "circle", "small", "top left"), Scene("blue", "square", "large", "bottom")]
    captions = [s.caption for s in scenes]
    images = [png_bytes(render(s, 32)) for s in scenes]
    with_text = Image.open(io.BytesIO(gallery_png(images, captions)))
    tile = 96 + 4  # 32 px scaled ×3, with a margin
    assert with_text.size[0] == 2 * tile and with_text.size[1] > tile  # room for the caption under each image
    assert _ink(with_text, (0, 98, tile, with_text.size[1])) > 30 and _ink(with_text, (tile, 98, 2 * tile,
                                                                                      with_text.size[1])) > 30
