"""Loading weights without running code: safetensors only, checked against the recorded hash.

A pickle (``torch.save``'s zip archive or a bare pickle stream) can execute anything while it
loads, so it is refused by its first bytes before any parser sees it, as is a file whose
sha256 is not the one the registry recorded.
"""

from __future__ import annotations

import hashlib
import json
import struct


class UnsafeWeights(RuntimeError):
    """Weights that are not safetensors, or not the bytes the registry recorded."""


def _describe(data: bytes) -> str | None:
    """None for a well-formed safetensors file (its parser never runs code); else what the bytes are."""
    if len(data) >= 8:
        (header_len,) = struct.unpack("<Q", data[:8])
        if header_len <= len(data) - 8 and data[8:9] == b"{":
            try:
                if isinstance(json.loads(data[8:8 + header_len]), dict):
                    return None
            except ValueError:
                pass
    if data[:2] == b"PK":
        return "a zip archive (the torch.save format, which unpickles on load)"
    if data[:1] == b"\x80" or data[:1] in (b"(", b"]", b"}", b"c"):
        return "a Python pickle stream"
    return "not a safetensors file (no 8-byte length followed by a JSON header)"


def _check_hash(data: bytes, expected_sha256: str | None, where: str) -> None:
    if expected_sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected_sha256:
            raise UnsafeWeights(f"{where}: sha256 {digest[:12]}… does not match the recorded "
                                f"{expected_sha256[:12]}… (hash mismatch: the file was replaced or corrupted)")


def check_weights(data: bytes, expected_sha256: str | None, where: str) -> None:
    _check_hash(data, expected_sha256, where)
    problem = _describe(data)
    if problem:
        raise UnsafeWeights(f"{where} is {problem}; only safetensors weights are loaded (unsafe format refused)")


def check_onnx(data: bytes, expected_sha256: str | None, where: str) -> None:
    """An ONNX graph is protobuf (parsing runs no code); still, the bytes must be the recorded ones
    and must not be a pickle that someone renamed."""
    _check_hash(data, expected_sha256, where)
    if data[:2] == b"PK" or data[:1] == b"\x80":
        raise UnsafeWeights(f"{where} looks like a pickle or torch.save archive, not an ONNX graph "
                            "(unsafe format refused)")

