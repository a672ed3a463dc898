"""The ``hf-causal-lm`` workload's stage 1: the text workload's drop format and rules, with each document's length
in the base model's own tokens (``tokens``), which stage 2 balances ranks by and stage 4's memory model reads."""

from __future__ import annotations

from functools import cache

import pyarrow as pa

from aigc.workloads.text.records import SCHEMA, TextRecords

HF_SCHEMA = pa.schema([*SCHEMA, pa.field("tokens", pa.int32())])
TOKENIZED_CHARS = 1 << 20
"""Characters of a document tokenized for its count: ``tokens`` is exact below this (1 MiB of text, ~250k tokens,
far past any context), a lower bound above it."""


@cache
def base_tokenizer(uri: str, demo_architecture: str):
    """The base's tokenizer, once per process (the decoding workers each load it on their first record)."""
    from aigc.workloads.hf_lm.base import load_tokenizer, local_folder

    return load_tokenizer(local_folder(uri, demo_architecture))


class HFRecords(TextRecords):
    curated_schema = HF_SCHEMA
    stats_columns = ("chars", "words", "tokens")

    def __init__(self, settings=None):
        from aigc.workloads.hf_lm.config import HFLMSettings

        super().__init__(settings or HFLMSettings())

    def examine(self, record, attachment, cfg):
        row = super().examine(record, attachment, cfg)
        if isinstance(row, dict):
            tok = base_tokenizer(self.text.base_model_uri, self.text.demo_architecture)
            row["tokens"] = len(tok(row["text"][:TOKENIZED_CHARS], add_special_tokens=False)["input_ids"])
        return row

    def content(self, row):
        return row["text"].encode()
