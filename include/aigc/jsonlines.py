"""One JSON line from outside the pipeline (a drop's record, a prompt, a reviewer's label, a producer's marker),
parsed within bounds, so one poisoned line is one refused record and never a failed stage.

Python's parser has limits of its own that raise instead of refusing: a line nested a few thousand levels deep
overflows its recursion (``RecursionError``) and an integer of more than 4,300 digits is refused by ``int``
(``ValueError``); a retry meets the same line and fails the same way. Here every bound is a setting, and each
refusal says which it broke, by how much, and where it is set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aigc.lines import DEFAULT_MAX_LINE_BYTES, LongLine, line_size

TOO_LARGE, MALFORMED, INVALID_UTF8 = "record_too_large", "malformed_json", "invalid_utf8"


RANGES = {"max_line_bytes": (16, 1 << 30), "max_json_depth": (1, 512),  # Python's own parser stops near 1,000
          "max_json_int_digits": (1, 4300),  # and int() at 4,300 digits
          "max_json_values": (1, 1 << 31)}


def check_limits(obj: object) -> None:
    """The four bounds of ``obj`` (a ``JsonLimits``, or a config class with fields of the same names) in range."""
    from aigc.config._checks import _check_range

    for name, (lo, hi) in RANGES.items():
        _check_range(obj, name, lo, hi)


@dataclass(frozen=True)
class JsonLimits:
    """Bounds on one JSON line. ``section``: the configuration section whose fields of the same names set them (the
    messages say where to raise one); empty where they are fixed."""

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_json_depth: int = 64
    max_json_int_digits: int = 100
    max_json_values: int = 100_000
    section: str = ""

    def __post_init__(self) -> None:
        check_limits(self)

    @classmethod
    def of(cls, cfg: object, section: str) -> JsonLimits:
        """The bounds a config class sets with fields of the same names (``PrepareConfig``, ``GenerateConfig``)."""
        return cls(**{name: getattr(cfg, name) for name in RANGES}, section=section)

    def hint(self, name: str) -> str:
        if not self.section:
            return ""
        from aigc.config.form import how_to_set

        return f"; raise it with {how_to_set(self.section, name)}"


class Refused(ValueError):
    """A line that is not a record within the bounds: ``reason`` is the quarantine's slug, the message says why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


class _IntTooLong(Exception):
    def __init__(self, digits: str) -> None:
        self.digits = digits


def parse_json_line(data: bytes, limits: JsonLimits) -> Any:
    """The JSON value of one line (bytes, a ``LongLine`` for one its reader cut), or ``Refused``."""
    size = line_size(data)
    if isinstance(data, LongLine) or size > limits.max_line_bytes:
        raise Refused(TOO_LARGE, f"line of {size:,} bytes is longer than max_line_bytes={limits.max_line_bytes:,} "
                                 f"(its first {min(size, LongLine.HEAD):,} bytes are kept)"
                                 f"{limits.hint('max_line_bytes')}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refused(INVALID_UTF8, f"byte {data[e.start:e.start + 1]!r} at offset {e.start} is not UTF-8") from None
    digits = limits.max_json_int_digits

    def parse_int(literal: str) -> int:
        if len(literal.lstrip("-")) > digits:
            raise _IntTooLong(literal)
        return int(literal)

    try:
        value = json.loads(text, parse_int=parse_int)
    except json.JSONDecodeError as e:
        raise Refused(MALFORMED, f"{e.msg} at column {e.colno}") from None
    except _IntTooLong as e:
        raise Refused(MALFORMED, f"an integer of {len(e.digits.lstrip('-')):,} digits is longer than "
                                 f"max_json_int_digits={digits}{limits.hint('max_json_int_digits')}") from None
    except RecursionError:
        raise Refused(MALFORMED, f"nested deeper than Python's parser reads (max_json_depth="
                                 f"{limits.max_json_depth})") from None
    _check_shape(value, limits)
    return value


def _check_shape(value: Any, limits: JsonLimits) -> None:
    """Depth and number of values, walked without recursion."""
    values, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        values += 1
        if depth > limits.max_json_depth:
            raise Refused(MALFORMED, f"nested deeper than max_json_depth={limits.max_json_depth}"
                                     f"{limits.hint('max_json_depth')}")
        if values > limits.max_json_values:
            raise Refused(TOO_LARGE, f"holds more than max_json_values={limits.max_json_values:,} values (object "
                                     f"members, array items and scalars){limits.hint('max_json_values')}")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def read_json_object(data: bytes, limits: JsonLimits) -> dict:
    """``parse_json_line`` for a line that must hold a JSON object."""
    value = parse_json_line(data, limits)
    if not isinstance(value, dict):
        raise Refused(MALFORMED, f"a line must hold a JSON object, got {type(value).__name__}")
    return value
