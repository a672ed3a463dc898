"""An attribute checker that reads colour, shape, size and position from pixels, independent of any generator.

It knows the reference world (``aigc.workloads.world``): one whole shape on a plain light background,
its extent its size's times a scale in ``SCALE_RANGE``. Each pixel's coverage is how far it is
from the background colour (the median of the border), relative to the shape's own colour, so
anti-aliased and blurred edges count fractionally; then

* colour: the nearest palette colour to the shape's most distinct pixels;
* shape: each candidate shape is drawn, as the renderer draws it, with the area seen and centred
  on the bounding box; the frame (centre and extent) of the likeliest shapes is then refined by
  a pattern search on the coverage error, kept inside the image as the world keeps shapes whole;
  the best-matching coverage map names the shape;
* size: the refined extent against cuts placed in the middle of the gaps between the sizes'
  extent ranges (not between their nominal extents: the largest medium shape is within a pixel
  of the smallest large one at 32 px, so a cut at the nominal midpoint misreads small large ones);
* position: the grid third of the fitted frame's centre, per axis.

Each verdict comes with a margin (how far from the nearest decision boundary, 0–1), the
evaluator's certainty: the least certain outputs go to human review. Its accuracy is measured on
a fixed reference set of rendered scenes (``reference.py``) and on the day's held-out real
images with every evaluation; only then does its alignment figure mean anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from aigc.workloads.world import COLOURS, POSITIONS, SCALE_RANGE, SIZES

ATTRIBUTES = ("colour", "shape", "size", "position")
_PALETTE = np.array(list(COLOURS.values()), dtype=np.float32)  # (K, 3)
_NAMES = list(COLOURS)
_GRID = {v: k for k, v in POSITIONS.items()}
_FILL = {"triangle": 0.5, "circle": float(np.pi / 4), "square": 1.0}
_SIZE_NAMES = sorted(SIZES, key=SIZES.get)
_SIZE_CUTS = [(SIZES[a] * SCALE_RANGE[1] + SIZES[b] * SCALE_RANGE[0]) / 2
              for a, b in zip(_SIZE_NAMES, _SIZE_NAMES[1:], strict=False)]
_MASK_DISTANCE = 60.0
_NOISE = 0.15
"""Coverage below this is background noise (generated images), for the image and the templates alike."""
_CLEAR_SHAPE = 0.2
"""A first-guess shape margin above which only that shape's frame is refined (100 % right on 5 184 scenes)."""
_DITHERED = 5.0
"""Speckle of the background (``_speckle``, 0–255) above which an image is treated as dithered: on 5 386
curated images, every clean one is ≤ 3.1 and every palette-dithered one ≥ 7.0."""
_BLUR = ImageFilter.BoxBlur(1)
_READ_SIDE = 64
"""Larger images are read at this side (box-downsampled): the attributes are as clear, the fit 16× cheaper at 256."""
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


def _size(extent: float) -> tuple[int, float]:
    """The size class of an extent and its margin: 1 at the class's nominal extent, 0 on a cut."""
    i = int(np.searchsorted(_SIZE_CUTS, extent))
    nominal = SIZES[_SIZE_NAMES[i]]
    cut = min(_SIZE_CUTS, key=lambda c: abs(c - extent))
    return i, float(np.clip(abs(extent - cut) / abs(nominal - cut), 0.0, 1.0))


def _coverage(shape: str, cx: float, cy: float, extent: float, r: int, blur: bool = False,
              supersample: int = 4) -> np.ndarray:
    """(R, R) in [0, 1]: how much of each pixel a shape of that frame covers (drawn as aigc.workloads.world draws),
    box-blurred as the image was when ``blur``."""
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
    small = canvas.resize((r, r), Image.Resampling.BOX)
    coverage = np.asarray(small.filter(_BLUR) if blur else small, dtype=np.float32) / 255
    coverage[coverage < _NOISE] = 0.0
    return coverage


def _error(alpha: np.ndarray, shape: str, frame: tuple[float, float, float], blur: bool) -> float:
    return float(np.abs(alpha - _coverage(shape, *frame, alpha.shape[0], blur)).sum())


def _refine(alpha: np.ndarray, shape: str, frame: tuple[float, float, float], blur: bool) -> tuple[float, tuple]:
    """(error, (cx, cy, extent)): a pattern search from ``frame``, steps from half a pixel to an eighth.

    The frame stays inside the image: the world never cuts a shape, and a template allowed past
    the border explains a shape touching it as a larger one cut there equally well.
    """
    r = alpha.shape[0]
    best, frame = _error(alpha, shape, frame, blur), tuple(frame)
    seen = {frame: best}  # a search steps back onto frames it measured (about a quarter of its templates)
    step = 0.5 / r
    while step >= 0.125 / r - 1e-12:
        improved = True
        while improved:
            improved = False
            for axis in range(3):
                for sign in (1, -1):
                    moved = list(frame)
                    moved[axis] += sign * step
                    half = moved[2] / 2
                    if half <= 0:
                        continue
                    moved[0], moved[1] = min(max(moved[0], half), 1 - half), min(max(moved[1], half), 1 - half)
                    moved = tuple(moved)
                    error = seen.get(moved)  # the frame itself (clamped back onto it) included
                    if error is None:
                        error = seen[moved] = _error(alpha, shape, moved, blur)
                    if error < best - 1e-9:
                        best, frame, improved = error, moved, True
        step /= 2
    return best, frame


def _fit_shape(alpha: np.ndarray, area: float, cols: np.ndarray, rows: np.ndarray, blur: bool):
    """(shape, extent, frame centre x, y, margin) of the template that best matches the coverage map.

    First guess: each shape with the area seen, centred on the bounding box. Only the frames of
    shapes that first guess cannot already tell apart are refined (refining costs ~30 templates).
    """
    r = alpha.shape[0]
    bx, by = (cols.min() + cols.max() + 1) / 2 / r, (rows.min() + rows.max() + 1) / 2 / r
    guesses = []
    for name, fill in _FILL.items():
        frame = (bx, by, float(np.sqrt(area / fill)) / r)
        guesses.append((_error(alpha, name, frame, blur), name, frame))
    guesses.sort()
    first_margin = 1 - guesses[0][0] / guesses[1][0] if guesses[1][0] > 0 else 1.0
    candidates = guesses[:1] if first_margin >= _CLEAR_SHAPE else guesses
    fits = sorted((*_refine(alpha, name, frame, blur), name) for _error_, name, frame in candidates)
    best_error, (fx, fy, extent), shape = fits[0]
    runner_up = fits[1][0] if len(fits) > 1 else None
    margin = first_margin if runner_up is None else 1 - best_error / runner_up if runner_up > 0 else 1.0
    return shape, extent, fx, fy, float(margin)


def _speckle(img: np.ndarray, background: np.ndarray) -> float:
    """Mean step between neighbouring background pixels along the border: 0 for a plain background,
    tens of levels for a dithered one; pixels of a shape touching the border are left out."""
    steps = []
    for line in (img[0], img[-1], img[:, 0], img[:, -1]):  # (R, 3) each
        plain = np.abs(line - background).max(axis=1) < _MASK_DISTANCE
        both = plain[1:] & plain[:-1]
        steps.append(np.abs(np.diff(line, axis=0)).max(axis=1)[both])
    steps = np.concatenate(steps)
    return float(steps.mean()) if len(steps) else 0.0


def read(image: np.ndarray) -> Reading:
    """``image``: (R, R, 3) uint8."""
    if image.shape[0] > _READ_SIDE:
        image = np.asarray(Image.fromarray(image).resize((_READ_SIDE, _READ_SIDE), Image.Resampling.BOX))
    img = image.astype(np.float32)
    r = img.shape[0]
    border = np.concatenate([img[0], img[-1], img[:, 0], img[:, -1]])
    # A dithered image (a palette conversion upstream) has a speckled background: averaged over 3×3
    # pixels it is plain again, and the templates are blurred alike.
    blur = _speckle(img, np.median(border, axis=0)) > _DITHERED
    if blur:
        img = np.asarray(Image.fromarray(image).filter(_BLUR), dtype=np.float32)
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
    alpha[alpha < _NOISE] = 0.0
    area = float(alpha.sum())
    ys, xs = np.mgrid[0:r, 0:r]
    cx, cy = float((alpha * (xs + 0.5)).sum() / area / r), float((alpha * (ys + 0.5)).sum() / area / r)
    inside = alpha >= 0.5
    cols, rows = np.nonzero(inside.any(axis=0))[0], np.nonzero(inside.any(axis=1))[0]
    if not len(cols):
        return Reading(None, 0.0, features)
    w, h = (cols.max() - cols.min() + 1) / r, (rows.max() - rows.min() + 1) / r
    shape, extent, bx, by, shape_margin = _fit_shape(alpha, area, cols, rows, blur)
    size_i, size_margin = _size(extent)
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
