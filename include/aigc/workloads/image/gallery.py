"""The image workload's preview: a grid of generated images, each with its prompt under it."""

from __future__ import annotations

import io
import math
import textwrap

from PIL import Image

from aigc.workloads.world import png_bytes


def gallery_png(images: list[bytes], captions: list[str], columns: int = 8, tile: int = 96) -> bytes:
    """A grid of ``images``, each at least ``tile`` px wide with its prompt written under it."""
    from PIL import ImageDraw

    tiles = [Image.open(io.BytesIO(b)).convert("RGB") for b in images]
    if not tiles:  # every prompt refused: an empty (white) gallery, not a missing file
        return png_bytes(Image.new("RGB", (16, 16), "white"))
    w, h = tiles[0].size
    scale = max(1, tile // w)
    cell_w, line_h = w * scale + 4, 11
    wrapped = [textwrap.wrap(c, max(8, cell_w // 6))[:4] for c in captions]
    cell_h = h * scale + 4 + line_h * max((len(lines) for lines in wrapped), default=0)
    rows = math.ceil(len(tiles) / columns)
    grid = Image.new("RGB", (min(columns, len(tiles)) * cell_w, rows * cell_h), "white")
    draw = ImageDraw.Draw(grid)
    for i, (image, lines) in enumerate(zip(tiles, wrapped, strict=True)):
        x, y = (i % columns) * cell_w, (i // columns) * cell_h
        grid.paste(image.resize((w * scale, h * scale), Image.Resampling.NEAREST), (x + 2, y + 2))
        for j, line in enumerate(lines):
            draw.text((x + 2, y + h * scale + 3 + j * line_h), line, fill=(40, 40, 40))
    return png_bytes(grid)
