"""The comparison every generation bench reports: a batcher against the best fixed policy in hindsight."""

from __future__ import annotations

import statistics


def versus_best_fixed(rows: list[dict], rates_of: dict, n: int, rate: str, repeats: int,
                      policies: tuple[str, ...]) -> dict:
    """The summary entry of the runs on ``n`` prompts: the fastest policy not named ``ours…`` by its median ``rate``
    (a row's field: ``tokens_per_s``, ``images_per_s``), and each of ``policies`` against it twice: the ratio of
    medians with the widest range the two ranges allow, and paired by repeat (``rates_of[n, policy]``: one rate per
    repeat, in order; the two ran in the same repeat, so a slow spell of the host slows both), its median, range and
    the repeats it was faster in."""
    fixed = [r for r in rows if r["prompts"] == n and not r["policy"].startswith("ours")]
    best = max(fixed, key=lambda r: r[rate])
    entry = {"prompts": n, "best_fixed": best["policy"], "repeats": repeats}
    for policy in policies:
        mine = next(r for r in rows if r["prompts"] == n and r["policy"] == policy)
        paired = [a / b for a, b in zip(rates_of[n, policy], rates_of[n, best["policy"]], strict=True)]
        entry[f"{policy}_vs_best_fixed"] = round(mine[rate] / best[rate], 3)
        entry[f"{policy}_vs_best_fixed_range"] = [round(mine["range"][0] / best["range"][1], 3),
                                                  round(mine["range"][1] / best["range"][0], 3)]
        entry[f"{policy}_vs_best_fixed_paired"] = {
            "median": round(statistics.median(paired), 3), "range": [round(min(paired), 3), round(max(paired), 3)],
            "faster_in": sum(x > 1 for x in paired), "repeats": len(paired)}
    return entry
