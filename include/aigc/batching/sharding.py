"""smart_sharding: the largest prefix of items that fits the free memory, found by halving (as in the seed)."""

from __future__ import annotations


def smart_sharding(item_bytes: list[int], free_bytes: int, margin_bytes: int = 0) -> int:
    """How many leading items fit ``free_bytes − margin_bytes``: try all, then halve until it fits.

    Halving, not an exact prefix sum, on purpose: it is what one does when only "does it fit?"
    can be asked (a trial allocation), and it lands within 2× of the best count.
    """
    room = free_bytes - margin_bytes
    n = len(item_bytes)
    while n > 0 and sum(item_bytes[:n]) > room:
        n //= 2
    return n
