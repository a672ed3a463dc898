"""The reference world: one shape on a plain background, and a caption that says what is drawn.

Stage 1 draws raw drops from it; stage 5 checks generated images against the same
vocabulary, so the caption grammar and the renderer live together here.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass

from PIL import Image, ImageDraw

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 215),
    "yellow": (235, 200, 30),
    "purple": (135, 55, 185),
    "orange": (240, 125, 25),
    "black": (25, 25, 25),
    "cyan": (30, 190, 200),
}
# Light backgrounds, far from every shape colour, so a pixel's class is never ambiguous.
BACKGROUNDS: tuple[tuple[int, int, int], ...] = (
    (245, 245, 245), (250, 240, 225), (228, 238, 250), (236, 250, 232), (250, 232, 240), (238, 236, 226),
)
SHAPES = ("circle", "square", "triangle")
SIZES: dict[str, float] = {"small": 0.22, "medium": 0.34, "large": 0.48}
"""Shape extent as a fraction of the image side."""
SCALE_RANGE = (0.85, 1.15)
"""A scene's extent is its size's extent times a scale drawn uniformly from this range."""
JITTER = 0.05
"""Largest offset of a shape's centre from its place, as a fraction of the image side."""
POSITIONS: dict[str, tuple[int, int]] = {
    "top left": (0, 0), "top": (1, 0), "top right": (2, 0),
    "left": (0, 1), "center": (1, 1), "right": (2, 1),
    "bottom left": (0, 2), "bottom": (1, 2), "bottom right": (2, 2),
}
_PLACE_PHRASE = {"top": "at the top", "bottom": "at the bottom", "left": "on the left", "right": "on the right"}
_SUPERSAMPLE = 4  # draw large, then downsample: anti-aliased edges like a real photo's


@dataclass(frozen=True)
class Scene:
    colour: str
    shape: str
    size: str
    position: str
    background: tuple[int, int, int] = BACKGROUNDS[0]
    jitter: tuple[float, float] = (0.0, 0.0)
    """Offset of the centre from its grid cell's centre, as a fraction of the image side."""
    scale: float = 1.0

    @property
    def caption(self) -> str:
        place = _PLACE_PHRASE.get(self.position, f"in the {self.position}")
        return f"a {self.size} {self.colour} {self.shape} {place}"


def random_scene(rng: random.Random) -> Scene:
    return Scene(
        colour=rng.choice(list(COLOURS)),
        shape=rng.choice(SHAPES),
        size=rng.choice(list(SIZES)),
        position=rng.choice(list(POSITIONS)),
        background=rng.choice(BACKGROUNDS),
        jitter=(rng.uniform(-JITTER, JITTER), rng.uniform(-JITTER, JITTER)),
        scale=rng.uniform(*SCALE_RANGE),
    )


def _inside(centre: float, extent: float, side: float) -> float:
    return min(max(centre, extent / 2), side - extent / 2)


def render(scene: Scene, resolution: int) -> Image.Image:
    """An RGB image of ``scene`` with side ``resolution``."""
    side = resolution * _SUPERSAMPLE
    img = Image.new("RGB", (side, side), scene.background)
    gx, gy = POSITIONS[scene.position]
    extent = SIZES[scene.size] * scene.scale * side
    # Cell centres at 1/6, 3/6, 5/6 of the side, pulled inwards so large shapes stay inside; jitter
    # comes after the pull (or every large corner shape would be drawn alike), and the shape is kept
    # whole: a shape cut by the border hides its extent, so its size could not be checked.
    cx = _inside(_inside(side * (gx * 2 + 1) / 6, extent, side) + scene.jitter[0] * side, extent, side)
    cy = _inside(_inside(side * (gy * 2 + 1) / 6, extent, side) + scene.jitter[1] * side, extent, side)
    x0, y0, x1, y1 = cx - extent / 2, cy - extent / 2, cx + extent / 2, cy + extent / 2
    draw = ImageDraw.Draw(img)
    fill = COLOURS[scene.colour]
    if scene.shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=fill)
    elif scene.shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=fill)
    else:
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=fill)
    return img.resize((resolution, resolution), Image.Resampling.LANCZOS)


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


_PHRASE_PLACE = {v: k for k, v in _PLACE_PHRASE.items()}


def parse_caption(caption: str) -> dict[str, str] | None:
    """The attributes a caption of this grammar asks for; None for a caption outside it."""
    words = caption.lower().split()
    if len(words) < 5 or words[0] != "a":
        return None
    size, colour, shape, place = words[1], words[2], words[3], " ".join(words[4:])
    position = _PHRASE_PLACE.get(place) or (place[len("in the "):] if place.startswith("in the ") else None)
    if size not in SIZES or colour not in COLOURS or shape not in SHAPES or position not in POSITIONS:
        return None
    return {"colour": colour, "shape": shape, "size": size, "position": position}
