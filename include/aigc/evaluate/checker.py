"""An attribute checker that reads colour, shape, size and position from pixels, independent of any generator.

It knows the reference world (``aigc.shapes``): one shape on a plain light background. Each
pixel's coverage is how far it is from the background colour (the median of the border),
relative to the shape's own colour, so anti-aliased and blurred edges count fractionally; then

* colour: the nearest palette colour to the shape's most distinct pixels;
* shape and size: each candidate shape is drawn, as the renderer draws it, with the area seen
  (searching larger extents when the shape is cut by the border); the best-matching coverage
  map names the shape, and its extent the size (nearest of the palette's sizes);
* position: the grid third of the fitted frame's centre, per axis.

Each verdict comes with a margin (how far from the nearest decision boundary, 0–1), the
evaluator's certainty: the least certain outputs go to human review. Its accuracy on held-out
real images is measured with every evaluation; only then does its alignment figure mean anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from aigc.shapes import COLOURS, POSITIONS, SIZES

ATTRIBUTES = ("colour", "shape", "size", "position")
_PALETTE = np.array(list(COLOURS.values()), dtype=np.float32)  # (K, 3)
_NAMES = list(COLOURS)
_GRID = {v: k for k, v in POSITIONS.items()}
_FILL = {"triangle": 0.5, "circle": float(np.pi / 4), "square": 1.0}
_SIZE_NAMES = sorted(SIZES, key=SIZES.get)
_SIZE_BOUNDS_SCALED = [SIZES[n] for n in _SIZE_NAMES]
_MASK_DISTANCE = 60.0
FEATURES = 12


@dataclass
class Reading:
    attributes: dict[str, str] | None
    """None when no shape was found."""
    margin: float
    """0 (on a decision boundary) … 1 (far from every boundary): the checker's certainty."""
    features: np.ndarray
    """(FEATURES,) continuous description, for Fréchet distance and diversity."""


def _nearest(value: float, centres: list[float]) -> tuple[int, float]:
    """Index of the nearest centre and the margin to the boundary with the next one (0–1)."""
    d = [abs(value - c) for c in centres]
    i = int(np.argmin(d))
    neighbours = [abs(centres[j] - centres[i]) for j in range(len(centres)) if j != i]
    half = min(neighbours) / 2 if neighbours else 1.0
    return i, float(max(0.0, 1 - d[i] / half)) if half else 0.0


def _coverage(shape: str, cx: float, cy: float, extent: float, r: int, supersample: int = 4) -> np.ndarray:
    """(R, R) in [0, 1]: how much of each pixel a shape of that frame covers (drawn as aigc.shapes draws)."""
    side = r * supersample
    canvas = Image.new("L", (side, side), 0)
    draw = ImageDraw.Draw(canvas)
    x0, y0 = (cx - extent / 2) * side, (cy - extent / 2) * side
    x1, y1 = (cx + extent / 2) * side, (cy + extent / 2) * side
    if shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=255)
    elif shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=255)
    else:
        draw.polygon([(cx * side, y0), (x1, y1), (x0, y1)], fill=255)
    return np.asarray(canvas.resize((r, r), Image.Resampling.BOX), dtype=np.float32) / 255


def _fit_shape(alpha: np.ndarray, area: float, cols: np.ndarray, rows: np.ndarray, r: int):
    """(shape, extent, frame centre x, y, margin) of the template that best matches the coverage map.

    Each shape is drawn with the area seen. A shape cut by the image border shows less area than
    it has: then larger extents are searched, anchored on the edges that are not at the border;
    a shape that merely touches the border looks cut too, so the uncut reading competes.
    """
    bx, by = (cols.min() + cols.max() + 1) / 2 / r, (rows.min() + rows.max() + 1) / 2 / r
    left, right = cols.min() / r, (cols.max() + 1) / r
    top, bottom = rows.min() / r, (rows.max() + 1) / r
    clipped = (left <= 0, right >= 1, top <= 0, bottom >= 1)
    fits = []
    for name, fill in _FILL.items():
        first = float(np.sqrt(area / fill)) / r
        fits.append((float(np.abs(alpha - _coverage(name, bx, by, first, r)).sum()), name, first, bx, by))
        for extent in (np.linspace(first, first * 1.5, 16)[1:] if any(clipped) else []):
            fx = right - extent / 2 if clipped[0] and not clipped[1] else \
                left + extent / 2 if clipped[1] and not clipped[0] else bx
            fy = bottom - extent / 2 if clipped[2] and not clipped[3] else \
                top + extent / 2 if clipped[3] and not clipped[2] else by
            error = float(np.abs(alpha - _coverage(name, fx, fy, extent, r)).sum())
            fits.append((error, name, float(extent), fx, fy))
    fits.sort()
    best_err, shape, extent, fx, fy = fits[0]
    second_err = next(f[0] for f in fits if f[1] != shape)
    return shape, extent, fx, fy, float(1 - best_err / second_err) if second_err > 0 else 1.0


def read(image: np.ndarray) -> Reading:
    """``image``: (R, R, 3) uint8."""
    img = image.astype(np.float32)
    r = img.shape[0]
    border = np.concatenate([img[0], img[-1], img[:, 0], img[:, -1]])
    background = np.median(border, axis=0)
    distance = np.abs(img - background).max(axis=2)  # (R, R)
    core = distance > _MASK_DISTANCE
    features = np.zeros(FEATURES, dtype=np.float32)
    features[3:6] = background / 255
    if core.sum() < 2:
        return Reading(None, 0.0, features)
    # The shape's colour from its most distinct pixels: blurred (generated) edges mix in background.
    colour = img[distance >= 0.7 * distance.max()].mean(axis=0)
    # Soft coverage: anti-aliased edge pixels count by how far they are from the background,
    # so area and centroid are sub-pixel accurate (a hard mask loses about a pixel per edge).
    full = max(float(np.abs(colour - background).max()), 1.0)
    alpha = np.clip(distance / full, 0.0, 1.0)
    alpha[alpha < 0.15] = 0.0  # background noise (generated images) is not shape
    area = float(alpha.sum())
    ys, xs = np.mgrid[0:r, 0:r]
    cx, cy = float((alpha * (xs + 0.5)).sum() / area / r), float((alpha * (ys + 0.5)).sum() / area / r)
    inside = alpha >= 0.5
    cols, rows = np.nonzero(inside.any(axis=0))[0], np.nonzero(inside.any(axis=1))[0]
    if not len(cols):
        return Reading(None, 0.0, features)
    w, h = (cols.max() - cols.min() + 1) / r, (rows.max() - rows.min() + 1) / r
    shape, extent, bx, by, shape_margin = _fit_shape(alpha, area, cols, rows, r)
    size_i, size_margin = _nearest(extent, _SIZE_BOUNDS_SCALED)
    distances = np.linalg.norm(_PALETTE - colour, axis=1)
    order = np.argsort(distances)
    colour_margin = float(1 - distances[order[0]] / max(distances[order[1]], 1e-6))
    # Position from the fitted frame's centre, not the centroid: a triangle's sits below its frame's.
    gx, mx = _nearest(bx, [1 / 6, 3 / 6, 5 / 6])
    gy, my = _nearest(by, [1 / 6, 3 / 6, 5 / 6])
    features[:] = [*(colour / 255), *(background / 255), cx, cy, w, h, area / (r * r), extent]
    attributes = {"colour": _NAMES[int(order[0])], "shape": shape,
                  "size": _SIZE_NAMES[size_i], "position": _GRID[(gx, gy)]}
    return Reading(attributes, min(colour_margin, mx, my, size_margin, shape_margin), features)


def score(expected: dict[str, str], reading: Reading) -> dict[str, bool]:
    """Per attribute: did the image show what the caption asked for?"""
    got = reading.attributes or {}
    return {a: got.get(a) == expected[a] for a in ATTRIBUTES}
