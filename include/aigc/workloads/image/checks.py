"""The image workload's per-record checks of stage 1: pure functions, run in worker processes.

Each record either becomes a curated row or a ``Rejected`` with a machine-readable reason
and a human detail naming the value and the limit.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import threading
import unicodedata
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

from aigc.config import PrepareConfig
from aigc.jsonlines import JsonLimits
from aigc.lake.keys import LakeKeyError, validate_key
from aigc.prepare import minhash
from aigc.prepare.records import Rejected, Unreadable, parse_record
from aigc.safety import blocked_term
from aigc.workloads.image import image_minhash
from aigc.workloads.image.config import ImageSettings

REASONS = (
    "invalid_utf8", "malformed_json", "record_too_large", "missing_field", "image_key_invalid", "duplicate_id",
    "caption_empty", "caption_too_short", "caption_too_long", "blocked_term", "image_missing", "image_empty",
    "image_too_big_bytes", "image_undecodable", "image_too_large", "image_too_small",
    "exact_duplicate", "near_duplicate",
)
"""Every quarantine reason, in the order checks run."""

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")
"""Decoders tried, in order: naming them spares Pillow probing every plugin it knows."""
RECORD_FIELDS = ("id", "caption", "image", "source", "created_at")
"""A raw record of an image drop: ``image`` is the key of its image object, relative to the drop."""
THUMB_SIDE = 8  # the RGB thumbnail near-duplicate detection compares


def parse_line(data: bytes, limits: JsonLimits | None = None) -> dict | Rejected:
    """Bytes of one JSONL line → the record, or why not."""
    record = parse_record(data, RECORD_FIELDS, limits)
    if isinstance(record, Rejected):
        return Rejected(record.reason, record.detail)  # no id for these: the line is not a record of ours
    try:
        validate_key(record["image"])  # a record must not point outside its drop
    except LakeKeyError as e:
        return Rejected("image_key_invalid", str(e), record)
    return record


def normalise_caption(caption: str, cfg: ImageSettings, blocklist: str | None = None) -> str | Rejected:
    """A caption in NFC with its spaces collapsed, or why not: its length against ``cfg``'s limits, and the
    blocklist (``PrepareConfig.blocklist``: a file, None for the shipped list)."""
    text = unicodedata.normalize("NFC", caption)
    text = " ".join(text.split())  # every Unicode space, tab or newline → one space
    if not text:
        return Rejected("caption_empty", "caption is empty after whitespace normalisation")
    if len(text) < cfg.min_caption_chars:
        limit = cfg.min_caption_chars
        return Rejected("caption_too_short", f"caption shorter than min_caption_chars={limit} (got {len(text)})")
    if len(text) > cfg.max_caption_chars:
        return Rejected(
            "caption_too_long",
            f"caption longer than max_caption_chars={cfg.max_caption_chars} (got {len(text)}); "
            "raise --max-caption-chars",
        )
    term = blocked_term(text, blocklist)
    if term:
        return Rejected("blocked_term", f"caption contains blocked term {term!r}")
    return text


@dataclass
class DecodedImage:
    png: bytes
    """The curated image: RGB PNG at the configured resolution."""
    orig_width: int
    orig_height: int
    orig_mode: str
    pixels: bytes
    """The curated image's RGB pixels, row by row (what ``thumbnails`` reduces)."""

    @property
    def thumb(self) -> bytes:
        """THUMB_SIDE² RGB cells (box-averaged), for near-duplicate checks."""
        side = int(math.isqrt(len(self.pixels) // 3))
        return thumbnails(np.frombuffer(self.pixels, dtype=np.uint8).reshape(1, side, side, 3))[0].tobytes()


_guarded = threading.local()  # set while a batch runs under one guard: entering it per image costs 5 µs


@contextlib.contextmanager
def _bomb_warnings_as_errors() -> Iterator[None]:
    """Pillow's decompression-bomb warning becomes an error (a rejection), once per batch or image."""
    if getattr(_guarded, "on", False):
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        _guarded.on = True
        try:
            yield
        finally:
            _guarded.on = False


def decode_image(data: bytes | Unreadable | None, cfg: ImageSettings) -> DecodedImage | Rejected:
    """Bytes of a drop's image → the curated image (RGB PNG at ``cfg.resolution``), or why not: the size limits are
    checked on the header, before a pixel is decompressed."""
    if isinstance(data, Unreadable):
        return Rejected("image_key_invalid", data.detail)
    if data is None:
        return Rejected("image_missing", "the image object named by the record does not exist")
    if not data:
        return Rejected("image_empty", "the image object has zero bytes")
    if len(data) > cfg.max_image_bytes:
        limit = cfg.max_image_bytes
        return Rejected("image_too_big_bytes", f"image has {len(data)} bytes, above max_image_bytes={limit}")
    try:
        with _bomb_warnings_as_errors():
            img = Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)  # reads the header only
            w, h = img.size
            # The bomb guard runs on the header, before a single pixel is decompressed.
            if w * h > cfg.max_image_pixels or max(w, h) > cfg.max_side:
                return Rejected(
                    "image_too_large",
                    f"image is {w}×{h}; limits are max_side={cfg.max_side}, max_image_pixels={cfg.max_image_pixels}",
                )
            if min(w, h) < cfg.min_side:
                return Rejected("image_too_small", f"image is {w}×{h}, below min_side={cfg.min_side}")
            img.load()  # full decode: truncated or corrupt data fails here
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        return Rejected("image_too_large", f"decompression-bomb guard: {e}")
    except UnidentifiedImageError:  # Pillow's message names a buffer's address: say it plainly, the same every run
        return Rejected("image_undecodable", f"{len(data)} bytes that are not a {'/'.join(IMAGE_FORMATS)} image")
    except (OSError, SyntaxError, ValueError) as e:
        return Rejected("image_undecodable", f"{type(e).__name__}: {e}")
    orig_mode, fmt = img.mode, img.format
    if img.mode.startswith("I"):  # 16/32-bit grey: scale to 8 bits, a plain convert would clip to white
        img = Image.fromarray((np.asarray(img, dtype=np.uint32) >> 8).clip(0, 255).astype(np.uint8), "L")
    if img.mode != "RGB":
        if "A" in img.getbands() or img.mode == "P" and "transparency" in img.info:
            background = Image.new("RGBA", img.size, (255, 255, 255, 255))
            img = Image.alpha_composite(background, img.convert("RGBA"))
        img = img.convert("RGB")
    if img.size != (cfg.resolution, cfg.resolution):
        img = img.resize((cfg.resolution, cfg.resolution), Image.Resampling.LANCZOS)
    if fmt == "PNG" and orig_mode == "RGB" and (w, h) == (cfg.resolution,) * 2:
        png = data  # already what we want: keep the producer's bytes, skip a re-encode
    else:
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        png = buf.getvalue()
    return DecodedImage(png, w, h, orig_mode, rgb_bytes(img))


def thumbnails(pixels: np.ndarray) -> np.ndarray:
    """(n, side, side, RGB) uint8 → (n, THUMB_SIDE, THUMB_SIDE, RGB): each cell the mean of its block,
    exactly as Pillow's BOX resize computes it, for a whole batch in a few numpy calls.

    Pillow resizes in two passes (along rows, then columns), each rounding half up in fixed
    point; with a power-of-two block side its weights are exact, so the same two roundings here
    give the same bytes (a test compares them). Any other side goes through Pillow itself.
    """
    n, side = pixels.shape[0], pixels.shape[1]
    block = side // THUMB_SIDE
    if side % THUMB_SIDE or block < 2 or block & (block - 1):
        return np.stack([np.asarray(Image.fromarray(p, "RGB").resize((THUMB_SIDE, THUMB_SIDE), Image.Resampling.BOX))
                         for p in pixels]).reshape(n, THUMB_SIDE, THUMB_SIDE, 3)
    shift, half = block.bit_length() - 1, block // 2
    # Summing strided slices one by one is several times faster than .sum() over a middle axis.
    by_column = pixels.reshape(n, side, THUMB_SIDE, block, 3)
    across = np.add(by_column[:, :, :, 0], by_column[:, :, :, 1], dtype=np.uint16)
    for k in range(2, block):
        across += by_column[:, :, :, k]
    across += half
    across >>= shift  # (n, side, THUMB_SIDE, RGB): the first pass, rounded
    by_row = across.reshape(n, THUMB_SIDE, block, THUMB_SIDE, 3)
    cells = by_row[:, :, 0] + by_row[:, :, 1]
    for k in range(2, block):
        cells += by_row[:, :, k]
    cells += half
    cells >>= shift
    return cells.astype(np.uint8)


def rgb_bytes(img: Image.Image) -> bytes:
    """``img.tobytes()`` for a loaded RGB image, through Pillow's raw encoder directly: the same
    bytes (a test checks) for a quarter of the cost, which counts once per curated image."""
    try:
        encoder = Image.core.raw_encoder("RGB", "RGB")
        encoder.setimage(img.im, (0, 0, *img.size))
        _, status, data = encoder.encode(img.width * img.height * 3)
        encoder.cleanup()
    except (AttributeError, TypeError, ValueError):  # a Pillow whose core differs: the public way
        return img.tobytes()
    return data if status == 1 else img.tobytes()  # 1: all of it in one call


def content_hash(image_sha256: str, caption: str) -> str:
    return hashlib.sha256(f"{image_sha256}\0{caption}".encode()).hexdigest()


def examine(record: dict, image: bytes | None, cfg: PrepareConfig, settings: ImageSettings) -> dict | Rejected:
    """One parsed record and its image bytes → a curated row (plus dedup keys) or a rejection."""
    return examine_all([(record, image)], cfg, settings)[0]


def examine_all(pairs: list[tuple[dict, bytes | None]], cfg: PrepareConfig,
                settings: ImageSettings) -> list[dict | Rejected]:
    """``examine`` for a batch of (record, image bytes): the near-dup keys of every row are
    computed together, vectorised over the batch."""
    with _bomb_warnings_as_errors():
        out = [_examine_one(record, image, cfg, settings) for record, image in pairs]
    rows = [row for row in out if not isinstance(row, Rejected)]
    if rows:
        side = settings.resolution
        pixels = np.frombuffer(b"".join(row.pop("_pixels") for row in rows), dtype=np.uint8)
        pixels = pixels.reshape(len(rows), side, side, 3)
        thumbs = thumbnails(pixels).reshape(len(rows), -1)
        sigs = image_minhash.signatures([row["caption"] for row in rows], image_minhash.grid(pixels),
                                        cfg.near_dup_num_perm)
        keys = minhash.band_keys(sigs, cfg.near_dup_threshold, cfg.near_dup_num_perm)  # (rows, bands)
        for row, thumb, sig, row_keys in zip(rows, thumbs, sigs, keys, strict=True):
            # Near-dup keys as bytes: they pickle far cheaper than numpy arrays.
            row["_thumb"], row["_sig"], row["_bands"] = thumb.tobytes(), sig.tobytes(), row_keys.tobytes()
    return out


def _examine_one(record: dict, image: bytes | None, cfg: PrepareConfig, settings: ImageSettings) -> dict | Rejected:
    caption = normalise_caption(record["caption"], settings, cfg.blocklist)
    if isinstance(caption, Rejected):
        return caption
    decoded = decode_image(image, settings)
    if isinstance(decoded, Rejected):
        return decoded
    image_sha = hashlib.sha256(image).hexdigest()
    return {
        "id": record["id"],
        "caption": caption,
        "image": decoded.png,
        "width": settings.resolution,
        "height": settings.resolution,
        "mode": "RGB",
        "orig_width": decoded.orig_width,
        "orig_height": decoded.orig_height,
        "orig_mode": decoded.orig_mode,
        "caption_chars": len(caption),
        "image_sha256": image_sha,
        "content_hash": content_hash(image_sha, caption),
        "source": record["source"],
        "created_at": record["created_at"],
        "_pixels": decoded.pixels,
    }
