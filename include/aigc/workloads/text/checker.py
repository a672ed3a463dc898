"""Judging generated text against the reference world's rules, without a reference model.

A log continues with lines of two kinds: ``Item k: <scene>.`` (the next number, a scene of the shapes
grammar) and ``Recall: item k is <scene>.`` (a fact the log stated, restated exactly). ``judge`` reads a
continuation after its prompt: every complete line must be one of these, item numbers must follow on,
and a recalled fact must be the one the log gave. A line cut off by the token limit (no final full stop)
is not judged.
"""

from __future__ import annotations

import re

from aigc.workloads.world import parse_caption

ITEM = re.compile(r"^Item (\d+): (.+)\.$")
RECALL = re.compile(r"^Recall: item (\d+) is (.+)\.$")


def stated_items(text: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for line in text.split("\n") if (m := ITEM.match(line))}


def judge(prompt: str, output: str) -> dict:
    """{valid, lines, bad_lines, recalls, recalls_right, first_line}: the continuation's verdict."""
    head, _, tail = prompt.rpartition("\n")
    items = stated_items(head)
    lines = (tail + output).split("\n")
    if not lines[-1].endswith("."):
        lines = lines[:-1]  # cut off by the token limit
    bad, recalls, right = 0, 0, 0
    next_item = max(items, default=0) + 1
    for line in lines:
        if m := ITEM.match(line):
            ok = parse_caption(m.group(2)) is not None and int(m.group(1)) == next_item
            if ok:
                items[next_item] = m.group(2)
                next_item += 1
        elif m := RECALL.match(line):
            recalls += 1
            ok = parse_caption(m.group(2)) is not None and items.get(int(m.group(1))) == m.group(2)
            right += ok
        else:
            ok = False
        bad += not ok
    return {"valid": bool(lines) and bad == 0, "lines": len(lines), "bad_lines": bad, "recalls": recalls,
            "recalls_right": right, "first_line": lines[0] if lines else None}


def recall_right(prompt: str, output: str) -> bool:
    """A recall probe (a prompt ending ``Recall: item k is``): the first line restates item k exactly."""
    head, _, tail = prompt.rpartition("\n")
    m = RECALL.match((tail + output).split("\n", 1)[0])
    return bool(m) and stated_items(head).get(int(m.group(1))) == m.group(2)
