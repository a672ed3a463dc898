"""Small PNG charts drawn with Pillow: loss curves, Pareto fronts. No plotting stack to install."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from PIL import Image, ImageDraw

PALETTE = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189), (23, 190, 207)]


def line_chart(series: dict[str, tuple[Sequence[float], Sequence[float]]], *, title: str, xlabel: str,
               ylabel: str, log_y: bool = False, size: tuple[int, int] = (720, 420),
               points: bool = False) -> bytes:
    """A PNG of one or more (x, y) series sharing axes; non-finite values are skipped."""
    w, h = size
    left, right, top, bottom = 70, 20, 36, 50
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    ty = (lambda y: math.log10(y)) if log_y else (lambda y: y)
    clean = {name: [(x, ty(y)) for x, y in zip(xs, ys, strict=True)
                    if math.isfinite(x) and math.isfinite(y) and (y > 0 or not log_y)]
             for name, (xs, ys) in series.items()}
    everything = [p for pts in clean.values() for p in pts]
    draw.text((left, 10), title, fill="black")
    if not everything:
        draw.text((w // 2 - 40, h // 2), "no data", fill="gray")
        return _png(img)
    x0, x1 = min(p[0] for p in everything), max(p[0] for p in everything)
    y0, y1 = min(p[1] for p in everything), max(p[1] for p in everything)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    px = lambda x: left + (x - x0) / (x1 - x0) * (w - left - right)  # noqa: E731
    py = lambda y: h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom)  # noqa: E731
    draw.rectangle((left, top, w - right, h - bottom), outline=(120, 120, 120))
    for i in range(5):
        yv = y0 + (y1 - y0) * i / 4
        label = f"{10 ** yv:.3g}" if log_y else f"{yv:.3g}"
        draw.text((4, py(yv) - 6), label, fill=(80, 80, 80))
        xv = x0 + (x1 - x0) * i / 4
        draw.text((px(xv) - 12, h - bottom + 6), f"{xv:.4g}", fill=(80, 80, 80))
    draw.text((w // 2 - 30, h - 20), xlabel, fill="black")
    draw.text((4, top - 20), ylabel + (" (log)" if log_y else ""), fill="black")
    for i, (name, pts) in enumerate(clean.items()):
        colour = PALETTE[i % len(PALETTE)]
        xy = [(px(x), py(y)) for x, y in sorted(pts)]
        if len(xy) > 1 and not points:
            draw.line(xy, fill=colour, width=2)
        for x, y in xy if (points or len(xy) == 1) else []:
            draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=colour)
        draw.text((w - right - 160, top + 6 + 14 * i), f"- {name}", fill=colour)
    return _png(img)


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
