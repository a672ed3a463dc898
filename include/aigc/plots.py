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


def pareto_chart(points: list[dict], front: list[dict], chosen: dict | None,
                 size: tuple[int, int] = (760, 460), *,
                 title: str = "alignment (all attributes, with its interval) against latency per sample",
                 x_label: str = "ms per sample (log scale)", legend: tuple[str, ...] | None = None) -> bytes:
    """Alignment (with its interval) against latency per sample on a log axis (variants' costs span
    40×), every point labelled variant/policy clear of the others, the front joined, the
    recommended configuration ringed."""
    w, h = size
    left, right, top, bottom = 70, 150, 36, 50
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    draw.text((left, 10), title, fill="black")
    scored = [p for p in points if p.get("alignment") is not None and p["latency_ms"] > 0]
    if not scored:
        draw.text((w // 2 - 40, h // 2), "no data", fill="gray")
        return _png(img)
    lows = [(p.get("alignment_ci") or {}).get("lo", p["alignment"]) for p in scored]
    highs = [(p.get("alignment_ci") or {}).get("hi", p["alignment"]) for p in scored]
    x0 = math.log10(min(p["latency_ms"] for p in scored)) - 0.1
    x1 = math.log10(max(p["latency_ms"] for p in scored)) + 0.1
    y0, y1 = max(0.0, min(lows) - 0.02), min(1.0, max(highs) + 0.02)
    y1 = y1 if y1 > y0 else y0 + 0.1
    px = lambda ms: left + (math.log10(ms) - x0) / (x1 - x0) * (w - left - right)  # noqa: E731
    py = lambda y: h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom)  # noqa: E731
    draw.rectangle((left, top, w - right, h - bottom), outline=(120, 120, 120))
    for i in range(5):
        yv, xv = y0 + (y1 - y0) * i / 4, 10 ** (x0 + (x1 - x0) * i / 4)
        draw.text((4, py(yv) - 6), f"{yv:.3g}", fill=(80, 80, 80))
        draw.text((px(xv) - 12, h - bottom + 6), f"{xv:.3g}", fill=(80, 80, 80))
    draw.text((w // 2 - 80, h - 20), x_label, fill="black")
    draw.text((4, top - 20), "alignment", fill="black")
    on_front = sorted((px(p["latency_ms"]), py(p["alignment"])) for p in front)
    if len(on_front) > 1:
        draw.line(on_front, fill=(150, 150, 150), width=2)
    variants = sorted({p["variant"] for p in scored})
    placed: list[tuple[float, float, float, float]] = []
    for p, lo, hi in zip(scored, lows, highs, strict=True):
        colour = PALETTE[variants.index(p["variant"]) % len(PALETTE)]
        x, y = px(p["latency_ms"]), py(p["alignment"])
        draw.line([(x, py(lo)), (x, py(hi))], fill=colour, width=1)
        shape = draw.ellipse if p.get("policy") == "adaptive" else draw.rectangle
        shape((x - 4, y - 4, x + 4, y + 4), fill=colour)
        if chosen and (p["variant"], p.get("policy")) == (chosen["variant"], chosen.get("policy")):
            draw.ellipse((x - 9, y - 9, x + 9, y + 9), outline="black", width=2)
        label = "/".join(filter(None, (p["variant"], p.get("policy"))))  # B8's points have no batch policy
        box = _free_spot(placed, x, y, 6 * len(label), 11)
        placed.append(box)
        draw.text(box[:2], label, fill=colour)
    legend = legend or ("dot: adaptive", "square: batch1", "grey line: the front", "ring: recommended",
                        "bar: interval")
    for i, line in enumerate(legend):
        draw.text((w - right + 8, top + 6 + 14 * i), line, fill="black")
    return _png(img)


def _free_spot(placed: list[tuple[float, float, float, float]], x: float, y: float, width: float,
               height: float) -> tuple[float, float, float, float]:
    """A label box near (x, y) that overlaps no box placed so far (else the last one tried)."""
    for dy in (-14, 4, -28, 18, -42, 32, -56, 46):
        for dx in (7, -7 - width):
            box = (x + dx, y + dy, x + dx + width, y + dy + height)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                return box
    return box
