"""What a hand-typed measurement looks like in prose, so that the docs test can refuse one.

Measured figures live in ``bench/results/*.json`` and reach the README and ``docs/`` only inside the blocks that
``bench/summary.py`` writes (between its markers, checked against the results files). Anywhere else a speed-up, a
throughput, an approximate reading, a measured percentage, a run's date or a commit it was measured on is a figure
someone typed: it goes stale the day the code changes. Settings and limits (``64 MiB``, ``≤ 5 %``, ``30 min at
most``) are not figures and pass; code spans and fenced blocks are not read."""

from __future__ import annotations

import re

# Each: a kind of figure a person types after a measurement, as it appears in this project's prose.
PATTERNS = {
    "speed-up": re.compile(r"(?<![≤≥<>=]\s)(?<![≤≥<>=\d.,])\d(?:[\d,.]*\d)?\s?[×x](?!\s?[\d\w(])"),
    "throughput": re.compile(r"\d[\d,.]*\s?(?:samples|rows|items|images|tokens|prompts|records|steps|pairs)/s\b"),
    "approximate reading": re.compile(r"(?:≈|~)\s?\d|\b(?:about|around|roughly|nearly|took|measured at)\s\d"),
    "measured percentage": re.compile(r"(?<![≤≥<>=]\s)\b\d+\.\d+\s?%|\d[\d.]*\s?[–-]\s?\d[\d.]*\s?%"),
    "speed comparison": re.compile(r"\d[\d.]*\s?(?:%|×|x)?\s(?:faster|slower)\b"),
    "run date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "table of measurements": re.compile(r"^\s*\|.*(?:\d\.\d|\d,\d{3}|\d \d{3}|\[\d)"),
    "commit": re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}\b"),
}
GENERATED = re.compile(r"<!-- generated: [\w-]+ -->.*?<!-- end of generated -->", re.S)  # bench/summary.py
CODE_SPAN = re.compile(r"``.*?``|`[^`\n]*`")


def prose_lines(text: str):
    """(line number, text) of the lines a reader reads as prose: fenced blocks, generated blocks, HTML comments and
    code spans left out."""
    text = GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if not fence:
            yield number, CODE_SPAN.sub("", line)


def stray_figures(text: str) -> list[tuple[int, str, str]]:
    """(line, kind, what matched) for every hand-typed figure outside the generated blocks."""
    return [(number, kind, m.group(0)) for number, line in prose_lines(text)
            for kind, pattern in PATTERNS.items() for m in pattern.finditer(line)]
