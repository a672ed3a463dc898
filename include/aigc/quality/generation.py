"""Gate 4 (generate → evaluate): one row per prompt, refused prompts recorded as refused (never generated),
and the workload's checks on the outputs (``Workload.generation_checks``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from aigc.config import PipelineConfig
from aigc.generate.run import MANIFEST, expected_prompt_ids, generation_prefix, generation_rows
from aigc.lake import Lake
from aigc.lake.keys import join, partition, run_prefix
from aigc.quality.gate import Table, run_gate
from aigc.safety import blocked_term

if TYPE_CHECKING:  # annotations only: the workload interface imports the stages' modules
    from aigc.workload import Workload

GATE = "generate"


def validate_generation(lake: Lake, plan: dict, cfg: PipelineConfig, workload: Workload) -> dict:
    """Gate 4 on a finished generation run: the core's ledger checks (every prompt answered once, refused prompts
    refused with a reason and nothing generated for them, no blocked prompt generated), then the workload's."""
    import great_expectations.expectations as gxe

    prefix = generation_prefix(plan["model"], plan["date"], plan["run_id"])
    manifest = lake.get_json(join(prefix, MANIFEST))
    rows = generation_rows(lake, manifest).to_pandas()
    outputs = [n for n, _ in workload.output_columns]
    rows = rows.assign(has_output=rows[outputs[0]].notna() if outputs else False,
                       should_refuse=[blocked_term(p, cfg.prepare.blocklist) is not None for p in rows["prompt"]])
    rows, expectations, figures = workload.generation_checks(rows, cfg)
    generated = rows[rows["status"] == "generated"]
    refused = rows[rows["status"] == "refused"]
    expected_ids = expected_prompt_ids(lake, {"prompts_pinned": manifest["prompts_pinned"],
                                              "shards": manifest["plan_shards"]})
    summary = pd.DataFrame([{
        "prompts": len(expected_ids), "rows": len(rows),
        "missing": len(expected_ids - set(rows["prompt_id"])), "unexpected": len(set(rows["prompt_id"]) - expected_ids),
        **{name: value for name, (value, _) in figures.items()},
    }])
    tables = [
        Table("outputs", rows, [
            gxe.ExpectColumnValuesToBeUnique(column="prompt_id"),
            gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["generated", "refused"]),
        ]),
        Table("generated", generated, [
            *expectations,
            gxe.ExpectColumnValuesToBeInSet(column="has_output", value_set=[True]),
            gxe.ExpectColumnValuesToBeInSet(column="should_refuse", value_set=[False]),
        ]),
        Table("refused", refused, [
            gxe.ExpectColumnValuesToBeInSet(column="has_output", value_set=[False]),  # refused means no output
            gxe.ExpectColumnValuesToNotBeNull(column="reason"),
        ]),
        Table("ledger", summary, [
            gxe.ExpectColumnPairValuesToBeEqual(column_A="prompts", column_B="rows"),
            gxe.ExpectColumnValuesToBeBetween(column="missing", max_value=0),
            gxe.ExpectColumnValuesToBeBetween(column="unexpected", max_value=0),
            *[gxe.ExpectColumnValuesToBeBetween(column=name, max_value=limit) for name, (_, limit) in figures.items()],
        ]),
    ]
    return run_gate(GATE, tables, lake, run_prefix(partition("quality", GATE, plan["date"]), plan["run_id"]))
