"""The image workload's MinHash tokens: what a caption–image pair is made of, for near-duplicate detection.

A pair's tokens are its caption's words and word bigrams, its background colour, and, for each cell of a
16×16 grid that the subject covers, the cell's place and how far its colour stands from the background.
Two renders of the same caption on the same background differ in the cells along the subject's edge (a shape
moved by a pixel or scaled by a tenth changes them), so they share few tokens; a re-encoded or slightly
noisy copy moves almost none.

The background colour is quantised twice, at bins offset by half a bin, and a cell's coverage three times, offset
by a third: a value near one bin's edge flips one of its tokens, never all, so noise costs a copy a little
similarity instead of a whole token, and the image outweighs a touched-up caption.
The signature of a union is the element-wise minimum of its parts' signatures, so the caption's part and the
background's are cached (they repeat) and each cell token's signature is computed once per process.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from aigc.prepare import minhash

GRID = 16
"""Cells per side of the grid the subject's tokens come from (every supported resolution divides by it)."""
SUBJECT_MARGIN = 48
"""Grey levels a cell must stand from the background (in its most different channel) to be part of the subject."""
_BINS = 8  # a cell's coverage (its contrast over the subject's full contrast, 0–1) in eighths
_OFFSETS = 3  # quantisations of the coverage, their bins offset by a third of a bin each
_BACKGROUND_BIN = 16
_LEVELS = _BINS + 2
_CORNERS = [0, GRID - 1, GRID * (GRID - 1), GRID * GRID - 1]


def grid(pixels: np.ndarray) -> np.ndarray:
    """(n, side, side, RGB) uint8 → (n, GRID·GRID, RGB) int16: each cell the (floored) mean of its block."""
    n, side = pixels.shape[0], pixels.shape[1]
    if side % GRID:
        raise ValueError(f"image side {side} is not a multiple of the near-duplicate grid ({GRID})")
    block = side // GRID
    sums = pixels.reshape(n, GRID, block, GRID, block, 3).sum(axis=(2, 4), dtype=np.uint32)
    return (sums // (block * block)).astype(np.int16).reshape(n, GRID * GRID, 3)


def signatures(captions: list[str], cells: np.ndarray, num_perm: int) -> np.ndarray:
    """(rows, num_perm) uint32: the MinHash of each caption's and its ``grid`` cells' tokens (``tokens``)."""
    background, contrast = _background_and_contrast(cells)
    table = _cell_signatures(num_perm)
    out = np.empty((len(captions), num_perm), dtype=np.uint32)
    for i, caption in enumerate(captions):
        part = np.minimum(_caption_signature(caption, num_perm),
                          _background_signature(tuple(background[i].tolist()), num_perm))
        covered = np.flatnonzero(contrast[i] > SUBJECT_MARGIN)
        if len(covered):
            peak = int(contrast[i].max())
            ids = np.concatenate([(k * GRID * GRID + covered) * _LEVELS + _level(contrast[i, covered], peak, k)
                                  for k in range(_OFFSETS)])
            part = np.minimum(part, table[ids].min(axis=0))
        out[i] = part
    return out


def tokens(caption: str, cells: np.ndarray) -> set[str]:
    """The tokens ``signatures`` hashes, as strings (the definition; tests compare the two)."""
    background, contrast = _background_and_contrast(cells[None])
    out = set(caption_tokens(caption)) | set(_background_tokens(tuple(background[0].tolist())))
    peak = int(contrast[0].max())
    for cell in np.flatnonzero(contrast[0] > SUBJECT_MARGIN).tolist():
        out |= {_cell_token(k * GRID * GRID + cell, int(_level(contrast[0, cell], peak, k))) for k in range(_OFFSETS)}
    return out


def _level(contrast, peak: int, offset: int):
    """floor(coverage · _BINS + (offset + ½) / _OFFSETS), in integers, where coverage is the contrast over 90 %
    of the subject's peak, at most 1. Coverage, not raw contrast: a copy whose every grey level moved a little
    (a re-encode, a colour profile) moves all contrasts together, so a whole subject's tokens would flip at
    once; relative to the subject's own peak they stay put. The subject's inside (within 10 % of the peak, its
    cells a level or two apart) is coverage 1, mid-bin at every offset."""
    full = max(1, 9 * peak // 10)
    return (2 * _OFFSETS * _BINS * np.minimum(contrast, full) + (2 * offset + 1) * full) // (2 * _OFFSETS * full)


def caption_tokens(caption: str) -> frozenset[str]:
    words = re.findall(r"[a-z0-9]+", caption.lower())
    return frozenset({f"w:{w}" for w in words} | {f"b:{a}_{b}" for a, b in zip(words, words[1:], strict=False)})


def _background_and_contrast(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the background (the mean of the middle two of the four corner cells, per channel: a subject in
    one corner does not move it) and each cell's contrast with it (its most different channel), both int16."""
    corners = np.sort(cells[:, _CORNERS], axis=1)  # (rows, 4, RGB)
    background = (corners[:, 1] + corners[:, 2]) // 2  # (rows, RGB)
    contrast = np.abs(cells - background[:, None]).max(axis=2)  # (rows, cells)
    return background, contrast


def _background_tokens(background: tuple[int, int, int]) -> tuple[str, str]:
    half = _BACKGROUND_BIN // 2
    return (f"g:{'_'.join(str(c // _BACKGROUND_BIN) for c in background)}",
            f"h:{'_'.join(str((c + half) // _BACKGROUND_BIN) for c in background)}")


def _cell_token(slot: int, level: int) -> str:
    return f"c{slot}:{level}"  # slot: the cell, plus GRID² times the quantisation's offset


@lru_cache(maxsize=1 << 14)
def _caption_signature(caption: str, num_perm: int) -> np.ndarray:
    sig = minhash.signature(caption_tokens(caption), num_perm)
    sig.flags.writeable = False  # shared by every call with this caption
    return sig


@lru_cache(maxsize=1 << 10)
def _background_signature(background: tuple[int, int, int], num_perm: int) -> np.ndarray:
    sig = minhash.signature(set(_background_tokens(background)), num_perm)
    sig.flags.writeable = False
    return sig


@lru_cache(maxsize=8)
def _cell_signatures(num_perm: int) -> np.ndarray:
    """(offsets·GRID²·levels, num_perm): the MinHash of each cell token alone, indexed as ``signatures`` does."""
    return minhash.token_signatures([_cell_token(slot, level) for slot in range(_OFFSETS * GRID * GRID)
                                     for level in range(_LEVELS)], num_perm)
