"""``aigc make-raw``: a realistic, deterministic, dirty raw drop of image–caption pairs.

Dirt comes at ``dirt_rate``, spread evenly over the kinds below. Some kinds are repaired by
stage 1 (wrong size or mode, messy whitespace), the others end in quarantine; the summary
counts each kind so tests can reconcile what prepare found against what was planted.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import struct
import zlib
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

from PIL import Image

from aigc.config import RawDropConfig
from aigc.lake import Lake
from aigc.lake.base import json_bytes
from aigc.lake.keys import join, parse_date
from aigc.prepare.drop import SUCCESS, drop_prefix
from aigc.progress import progress
from aigc.workloads.image.config import ImageSettings
from aigc.workloads.world import png_bytes, random_scene, render

DIRT_KINDS = (
    "undecodable", "truncated", "zero_byte", "wrong_size", "wrong_mode", "empty_caption",
    "blocked_caption", "long_caption", "invalid_utf8", "exact_duplicate", "near_duplicate",
    "missing_image", "malformed_json", "decompression_bomb", "duplicate_id", "messy_whitespace",
)
REPAIRED_KINDS = ("wrong_size", "wrong_mode", "messy_whitespace")
"""Dirt that prepare normalises instead of quarantining."""
_BLOCKED_SAMPLE = ("nsfw", "gore", "explicit")
PLANTED = "_planted.json"
"""Beside the records: the id of every planted defect by kind ([id, original id] for copies), the truth a test or
bench checks prepare's verdicts against. Prepare never reads it."""
_COPIES = ("exact_duplicate", "near_duplicate", "duplicate_id")


def make_raw_drop(raw: Lake, date: str | dt.date, cfg: RawDropConfig, resolution: int | None = None) -> dict:
    """Write the drop for ``date`` under ``raw`` (replacing one already there), its images ``resolution`` pixels
    square (None: ``ImageSettings``' default); return counts."""
    resolution = resolution or ImageSettings().resolution
    date = parse_date(date)
    prefix = drop_prefix(date)
    raw.delete_prefix(prefix)  # a re-run replaces the drop, it never appends to it
    rng = random.Random(f"{cfg.seed}:{date.isoformat()}")
    planted: Counter[str] = Counter()
    planted_ids: dict[str, list] = {}
    recent: deque[tuple[dict, bytes]] = deque(maxlen=256)  # clean records to duplicate from
    files, lines, uploads = [], [], []
    start = dt.datetime.combine(date, dt.time(), tzinfo=dt.UTC)

    with ThreadPoolExecutor(max_workers=16) as pool:  # many small objects: upload concurrently
        for i in progress(range(cfg.n), desc="make-raw", unit="rec"):
            rec_id = f"{cfg.source}-{date:%Y%m%d}-{i:08d}"
            scene = random_scene(rng)
            record = {
                "id": rec_id,
                "caption": scene.caption,
                "image": f"images/{rec_id}.png",
                "source": cfg.source,
                "created_at": (start + dt.timedelta(seconds=i)).isoformat(),
            }
            kind = rng.choice(DIRT_KINDS) if rng.random() < cfg.dirt_rate else None
            if kind in ("exact_duplicate", "near_duplicate", "duplicate_id") and not recent:
                kind = None
            image = None if kind else png_bytes(render(scene, resolution))
            line, image, original = _dirty(kind, record, image, scene, resolution, rng, recent)
            if kind:
                planted[kind] += 1
                planted_ids.setdefault(kind, []).append([rec_id, original] if kind in _COPIES else rec_id)
            else:
                recent.append((record, image))
            if image is not None:
                uploads.append(pool.submit(raw.put_bytes, join(prefix, record["image"]), image))
            lines.append(line)
            if len(lines) == cfg.records_per_file or i == cfg.n - 1:
                key = join(prefix, f"records-{len(files):05d}.jsonl")
                raw.put_bytes(key, b"\n".join(lines) + b"\n")
                files.append(key)
                lines = []
                for f in uploads:
                    f.result()  # surface upload errors here, and bound the queue
                uploads = []
    raw.put_bytes(join(prefix, PLANTED), json_bytes(dict(sorted(planted_ids.items()))))
    marker = {"records": cfg.n, "files": files, "created_at": dt.datetime.now(dt.UTC).isoformat()}
    raw.put_bytes(join(prefix, SUCCESS), json_bytes(marker))
    return {
        "drop": raw.url(prefix),
        "records": cfg.n,
        "files": len(files),
        "dirt": dict(sorted(planted.items())),
        "repairable": sum(planted[k] for k in REPAIRED_KINDS),
    }


def _dirty(kind, record, image, scene, res, rng, recent) -> tuple[bytes, bytes | None, str | None]:
    """Apply one kind of dirt; return (the JSONL line, the image bytes to upload or None, the id of the record a
    copy was made from or None)."""
    if kind in _COPIES:
        original, original_image = rng.choice(recent)
        if kind == "exact_duplicate":  # the same content re-uploaded under a new id
            return _line({**original, "id": record["id"], "image": record["image"]}), original_image, original["id"]
        if kind == "duplicate_id":  # new content that reuses an id already in the drop
            image = png_bytes(render(scene, res))
            return _line({**record, "id": original["id"]}), image, original["id"]
        noisy = Image.open(io.BytesIO(original_image)).convert("RGB")
        noisy = Image.eval(noisy, lambda v: max(0, min(255, v + rng.choice((-3, 0, 3)))))
        caption = original["caption"].replace("a ", "A ", 1) + rng.choice((".", " corner.", "!", " ."))
        return _line({**record, "caption": caption}), png_bytes(noisy), original["id"]
    return (*_defect(kind, record, image, scene, res, rng), None)


def _defect(kind, record, image, scene, res, rng) -> tuple[bytes, bytes | None]:
    """A record's own defect (not a copy of another): (the JSONL line, the image bytes to upload or None)."""
    if kind is None:
        return _line(record), image
    good = png_bytes(render(scene, res))
    if kind == "undecodable":
        return _line(record), rng.randbytes(200)
    if kind == "truncated":
        return _line(record), good[: len(good) // 2]
    if kind == "zero_byte":
        return _line(record), b""
    if kind == "wrong_size":
        return _line(record), png_bytes(render(scene, rng.choice((res // 2, res + res // 2))))
    if kind == "wrong_mode":
        img = render(scene, res)
        return _line(record), png_bytes(img.convert(rng.choice(("RGBA", "P"))))  # grey "L" would lose the colour
    if kind == "empty_caption":
        return _line({**record, "caption": rng.choice(("", "   ", "\t \n"))}), good
    if kind == "blocked_caption":
        return _line({**record, "caption": f"{record['caption']} {rng.choice(_BLOCKED_SAMPLE)}"}), good
    if kind == "long_caption":
        return _line({**record, "caption": " ".join([record["caption"]] * 60)}), good
    if kind == "invalid_utf8":
        return _line(record).replace(b'"caption": "a', b'"caption": "\xff\xfea', 1), good
    if kind == "missing_image":
        return _line({**record, "image": f"images/missing-{record['id']}.png"}), None
    if kind == "malformed_json":
        return _line(record)[: rng.randint(5, 40)], good
    if kind == "decompression_bomb":
        return _line(record), _png_bomb()
    if kind == "messy_whitespace":  # decomposed accents, doubled and odd spaces: normalised, kept
        caption = "  " + record["caption"].replace(" ", "  \u00a0", 2) + " \t"
        return _line({**record, "caption": caption}), good
    raise ValueError(f"unknown dirt kind {kind!r}")


def _line(record: dict) -> bytes:
    return json.dumps(record, ensure_ascii=False).encode()


@lru_cache(maxsize=1)
def _png_bomb(side: int = 8000) -> bytes:
    """A valid PNG of side² black pixels: ~200 KB that would decode to ~190 MB."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    z = zlib.compressobj(9)
    row = b"\0" * (1 + 3 * side)  # filter byte + RGB
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
