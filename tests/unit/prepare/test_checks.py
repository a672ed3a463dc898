"""Per-record checks of stage 1: each kind of bad record gets its reason and a useful detail."""

import hashlib
import io
import json

import numpy as np
import pytest
from PIL import Image

from aigc import safety
from aigc.config import PrepareConfig
from aigc.prepare.minhash import jaccard
from aigc.workloads.image import checks
from aigc.workloads.image.checks import Rejected, decode_image, examine, normalise_caption, parse_line
from aigc.workloads.image.config import ImageSettings
from aigc.workloads.image.rawdrop import _png_bomb
from aigc.workloads.world import Scene, png_bytes, render

CFG = PrepareConfig()
SETTINGS = ImageSettings()
SCENE = Scene("red", "circle", "large", "center")
GOOD = {"id": "r1", "caption": SCENE.caption, "image": "images/r1.png", "source": "shapes",
        "created_at": "2026-11-28T00:00:00+00:00"}


def line(**changes) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def rejected(result, reason: str) -> str:
    assert isinstance(result, Rejected), result
    assert result.reason == reason, result
    return result.detail


# --- parse_line ---------------------------------------------------------------------------------

def test_a_good_line_parses_to_its_record_and_an_empty_caption_is_not_a_missing_field():
    assert parse_line(line()) == GOOD
    assert parse_line(line(caption="")) == {**GOOD, "caption": ""}  # caption_empty is decided later


def test_invalid_utf8_names_the_byte_offset():
    data = line()[:14] + b"\xff\xfe" + line()[14:]
    assert rejected(parse_line(data), "invalid_utf8") == "byte b'\\xff' at offset 14 is not UTF-8"


@pytest.mark.parametrize(("data", "detail"), [
    (b'{"id": "r1"', "Expecting ',' delimiter at column 12"),
    (b"[1, 2]", "a line must hold a JSON object, got list"),
    (b'"just a string"', "a line must hold a JSON object, got str"),
])
def test_malformed_json(data, detail):
    assert rejected(parse_line(data), "malformed_json") == detail


@pytest.mark.parametrize(("data", "missing"), [
    (line(id=None), ["id"]),
    (line(caption=7, source=["x"]), ["caption", "source"]),
    (line(image=None, created_at=20261128), ["image", "created_at"]),
    (b"{}", ["id", "caption", "image", "source", "created_at"]),
])
def test_missing_or_non_string_fields_are_named(data, missing):
    assert rejected(parse_line(data), "missing_field") == f"field(s) {missing} missing or not strings"


@pytest.mark.parametrize(("key", "why"), [
    ("../../etc/passwd", "may not traverse"), ("images/../../x.png", "may not traverse"),
    ("/abs", "is absolute"), ("C:/x.png", "is absolute"), ("", "is empty"), ("a\\b.png", "backslash"),
])
def test_image_keys_that_could_leave_the_drop_are_refused(key, why):
    result = parse_line(line(image=key))
    assert why in rejected(result, "image_key_invalid")
    assert result.record["image"] == key and result.record["id"]  # its valid id goes to quarantine with it


def test_an_escaped_lone_surrogate_is_rejected_not_passed_on():
    # Valid UTF-8 and valid JSON, but "\ud800" decodes to a str no UTF-8 writer accepts: passed on,
    # it makes examine() (content_hash) raise UnicodeEncodeError and aborts the whole prepare run.
    result = parse_line(line(caption="a red \ud800 circle"))  # json.dumps writes it as \\ud800
    assert isinstance(result, Rejected) and result.reason in ("invalid_utf8", "malformed_json"), result


# --- normalise_caption and the blocklist ---------------------------------------------------------

def test_captions_are_nfc_and_whitespace_is_collapsed():
    raw = " \t caf" + "e\u0301" + "\u00a0\u00a0au\u2003lait\n\nnoir\u3000 "
    assert normalise_caption(raw, SETTINGS) == "caf\u00e9 au lait noir"


@pytest.mark.parametrize("caption", ["", "   ", "\t\n\u00a0\u2003"])
def test_empty_captions(caption):
    rejected(normalise_caption(caption, SETTINGS), "caption_empty")


def test_caption_length_limits_name_the_limit_and_the_length():
    cfg = ImageSettings(min_caption_chars=5, max_caption_chars=20)
    assert "min_caption_chars=5 (got 3)" in rejected(normalise_caption("  a  b ", cfg), "caption_too_short")
    assert "max_caption_chars=20 (got 21)" in rejected(normalise_caption("x" * 21, cfg), "caption_too_long")
    assert normalise_caption("x" * 20, cfg) == "x" * 20 and normalise_caption("abcde", cfg) == "abcde"


@pytest.mark.parametrize(("caption", "term"), [
    ("NSFW content", "nsfw"), ("a red circle, Gore!", "gore"), ("some self-harm here", "self-harm"),
    ("an Explicit square", "explicit"), ("pornographic blue square", "pornographic"),
])
def test_blocked_terms_match_whole_words_in_any_case(caption, term):
    detail = rejected(normalise_caption(caption, SETTINGS), "blocked_term")
    assert detail == f"caption contains blocked term {term!r}"


@pytest.mark.parametrize("caption", ["the gorest square", "explicitly red", "nudes, pornography", "suicides"])
def test_a_term_inside_a_longer_word_is_not_blocked(caption):
    assert normalise_caption(caption, SETTINGS) == caption


def test_a_custom_blocklist_replaces_the_shipped_one_and_ignores_comments(tmp_path):
    path = tmp_path / "terms.txt"
    path.write_text("# my terms, one per line\nwidget\n\n   # indented comment\n  Gizmo  \n")
    blocklist = PrepareConfig(blocklist=str(path)).blocklist
    rejected(normalise_caption("a red WIDGET", SETTINGS, blocklist), "blocked_term")
    assert "'gizmo'" in rejected(normalise_caption("one gizmo", SETTINGS, blocklist), "blocked_term")
    assert normalise_caption("NSFW content", SETTINGS, blocklist) == "NSFW content"  # the shipped list is not in force
    assert safety._blocklist_pattern(str(path)).pattern == r"\b(widget|gizmo)\b"


# --- decode_image -------------------------------------------------------------------------------

PNG32 = png_bytes(render(SCENE, 32))
MID = len(PNG32) // 2
CORRUPT = PNG32[:MID] + bytes(b ^ 0xFF for b in PNG32[MID : MID + 8]) + PNG32[MID + 8 :]  # bad IDAT data


def test_missing_empty_and_oversized_images():
    rejected(decode_image(None, SETTINGS), "image_missing")
    rejected(decode_image(b"", SETTINGS), "image_empty")
    small = ImageSettings(max_image_bytes=len(PNG32) - 1)
    detail = rejected(decode_image(PNG32, small), "image_too_big_bytes")
    assert detail == f"image has {len(PNG32)} bytes, above max_image_bytes={len(PNG32) - 1}"
    assert not isinstance(decode_image(PNG32, ImageSettings(max_image_bytes=len(PNG32))), Rejected)


@pytest.mark.parametrize("data", [bytes(range(256)) * 3, PNG32[:MID], PNG32[:-30], CORRUPT])
def test_undecodable_and_truncated_images(data):
    rejected(decode_image(data, SETTINGS), "image_undecodable")


def test_an_unidentifiable_image_gets_the_same_plain_detail_every_time():
    """Pillow's own message names a buffer's memory address, which made quarantine differ run to run."""
    details = {rejected(decode_image(bytes(range(256)) * 3, SETTINGS), "image_undecodable") for _ in range(3)}
    assert details == {"768 bytes that are not a PNG/JPEG/WEBP/GIF/BMP/TIFF image"}


def test_a_png_bomb_is_refused_from_its_header():
    bomb = _png_bomb()  # 8000×8000 in ~190 KB
    assert len(bomb) < 300_000
    cfg = ImageSettings(max_side=65_536)  # only the pixel limit can refuse it
    assert rejected(decode_image(bomb, cfg), "image_too_large") == (
        "image is 8000×8000; limits are max_side=65536, max_image_pixels=16777216")
    # Proof that no pixel was decoded: with the image data cut off, the header alone still decides,
    # while under a looser limit the same bytes fail only when decoding starts.
    small_bomb = _png_bomb(2000)[:200]
    rejected(decode_image(small_bomb, ImageSettings(max_image_pixels=1_000_000)), "image_too_large")
    rejected(decode_image(small_bomb, SETTINGS), "image_undecodable")


def test_a_side_over_max_side_is_too_large_and_under_min_side_too_small():
    assert "limits are max_side=40" in rejected(decode_image(png_bytes(render(SCENE, 48)),
                                                             ImageSettings(max_side=40)), "image_too_large")
    tiny = png_bytes(Image.new("RGB", (20, 4), "white"))
    assert rejected(decode_image(tiny, SETTINGS), "image_too_small") == "image is 20×4, below min_side=8"


@pytest.mark.parametrize("mode", ["RGBA", "P", "L"])
def test_other_modes_become_rgb(mode):
    img = render(SCENE, 32).convert(mode)
    out = decode_image(png_bytes(img), SETTINGS)
    curated = Image.open(io.BytesIO(out.png))
    assert (out.orig_mode, curated.mode, curated.size) == (mode, "RGB", (32, 32))
    assert curated.tobytes() == img.convert("RGB").tobytes()  # opaque: the pixels are kept exactly


def test_transparent_pixels_are_composited_on_white():
    img = Image.new("RGBA", (32, 32), (0, 0, 0, 0))
    img.putpixel((3, 3), (10, 20, 30, 255))
    curated = Image.open(io.BytesIO(decode_image(png_bytes(img), SETTINGS).png))
    assert curated.getpixel((0, 0)) == (255, 255, 255) and curated.getpixel((3, 3)) == (10, 20, 30)


def test_other_sizes_are_resized_and_the_target_size_keeps_its_bytes():
    out = decode_image(png_bytes(render(SCENE, 48)), SETTINGS)
    assert (out.orig_width, out.orig_height, Image.open(io.BytesIO(out.png)).size) == (48, 48, (32, 32))
    assert len(out.thumb) == checks.THUMB_SIDE**2 * 3
    unchanged = png_bytes(render(SCENE, 64))
    assert decode_image(unchanged, ImageSettings(resolution=64)).png == unchanged
    assert decode_image(PNG32, SETTINGS).png == PNG32


@pytest.mark.parametrize("side", [32, 64, 128, 256, 24, 40])
def test_batched_thumbnails_are_the_bytes_of_pillows_box_resize(side):
    """The numpy reduction replaces a Pillow resize per image; near-dup verdicts depend on every byte."""
    rng = np.random.default_rng(side)
    noise = rng.integers(0, 256, (6, side, side, 3), dtype=np.uint8)  # every rounding case, often
    flat = (rng.integers(0, 3, (6, side, side, 3)) + rng.integers(0, 253, (6, 1, 1, 3))).astype(np.uint8)
    scenes = np.stack([np.asarray(render(SCENE, side)), np.asarray(render(Scene("blue", "square", "small",
                                                                                    "top left"), side))])
    for pixels in (noise, flat, scenes):
        expected = np.stack([np.asarray(Image.fromarray(p, "RGB").resize((8, 8), Image.Resampling.BOX))
                             for p in pixels])
        assert np.array_equal(checks.thumbnails(pixels), expected)


def test_rgb_bytes_are_tobytes():
    for img in (render(SCENE, 32), render(SCENE, 256), Image.new("RGB", (9, 5), (1, 2, 3))):
        img.load()
        assert checks.rgb_bytes(img) == img.tobytes()


# --- examine ------------------------------------------------------------------------------------

def test_a_good_record_becomes_a_row():
    row = examine({**GOOD, "caption": "  a large  red circle in the center "}, PNG32, CFG, SETTINGS)
    sha = hashlib.sha256(PNG32).hexdigest()
    assert row["caption"] == SCENE.caption and row["caption_chars"] == len(SCENE.caption)
    assert (row["id"], row["image"], row["width"], row["height"], row["mode"]) == ("r1", PNG32, 32, 32, "RGB")
    assert (row["image_sha256"], row["source"], row["created_at"]) == (sha, "shapes", GOOD["created_at"])
    assert row["content_hash"] == hashlib.sha256(f"{sha}\0{SCENE.caption}".encode()).hexdigest()


def test_rejections_pass_through_examine():
    rejected(examine({**GOOD, "caption": " "}, PNG32, CFG, SETTINGS), "caption_empty")
    rejected(examine(GOOD, None, CFG, SETTINGS), "image_missing")


def test_the_content_hash_follows_the_caption_and_the_image_bytes():
    base = examine(GOOD, PNG32, CFG, SETTINGS)["content_hash"]
    buf = io.BytesIO()
    render(SCENE, 32).save(buf, format="PNG", compress_level=0)  # same pixels, other bytes
    assert examine(GOOD, buf.getvalue(), CFG, SETTINGS)["content_hash"] != base
    assert examine({**GOOD, "caption": SCENE.caption + "!"}, PNG32, CFG, SETTINGS)["content_hash"] != base
    assert examine(dict(GOOD), PNG32, CFG, SETTINGS)["content_hash"] == base


def test_near_identical_records_have_similar_signatures_and_different_ones_do_not():
    original = examine(GOOD, PNG32, CFG, SETTINGS)
    noisy = Image.eval(render(SCENE, 32), lambda v: max(0, v - 3))  # as rawdrop's near duplicates
    near = examine({**GOOD, "caption": "A large red circle in the center corner."}, png_bytes(noisy), CFG, SETTINGS)
    other = Scene("blue", "triangle", "small", "top left")
    far = examine({**GOOD, "caption": other.caption}, png_bytes(render(other, 32)), CFG, SETTINGS)
    assert near["content_hash"] != original["content_hash"]
    def sig(row):
        return np.frombuffer(row["_sig"], dtype=np.uint32)

    assert CFG.near_dup_threshold <= jaccard(sig(original), sig(near)) < 1
    assert jaccard(sig(original), sig(far)) < 0.3
    bands = [np.frombuffer(r["_bands"], dtype=np.uint64) for r in (original, near, far)]
    assert np.intersect1d(bands[0], bands[1]).size > 0  # near: shares an LSH band, so it is a candidate
    assert np.intersect1d(bands[0], bands[2]).size == 0
