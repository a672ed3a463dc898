"""Decoding long prompts: batched output equals one-by-one output, and the seed's out-of-memory story.

The memory is a simulated device (``BudgetedMemory``) whose truth is what each batch really allocates (every
tensor storage, counted as it is created and freed), not the batcher's model of it: an allocation past the
capacity raises ``torch.OutOfMemoryError`` there and then, as a GPU's allocator does."""

from __future__ import annotations

import pytest
import torch

from aigc.batching import AdaptiveBatcher, ReportedPeaks
from aigc.batching.faults import BudgetedMemory
from aigc.workloads.text.generate import DecoderMemory, generate_ids
from aigc.workloads.text.model import TextLM

VOCAB, PAD, EOS = 512, 0, 1
NEW = 4


@pytest.fixture(scope="module")
def model() -> TextLM:
    torch.manual_seed(0)
    return TextLM(VOCAB, layers=2, width=64, heads=4).eval()


def prompts(n: int, length: int | list[int], seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = length if isinstance(length, list) else [length] * n
    return [torch.randint(2, VOCAB, (k,), generator=g).tolist() for k in lengths]


def test_a_prompt_decodes_the_same_alone_or_padded_in_a_batch(model):
    torch.set_num_threads(1)
    batch = prompts(5, [3, 40, 17, 64, 9])
    together = generate_ids(model, batch, 12, PAD, EOS)
    alone = [generate_ids(model, [p], 12, PAD, EOS)[0] for p in batch]
    assert together == alone and all(len(out) == 12 for out in alone)


def test_4096_token_prompts_all_complete_under_a_budget_a_fixed_batch_of_32_exceeds(model):
    torch.set_num_threads(2)
    long = prompts(32, 4096)
    memory = DecoderMemory(layers=2, width=64, heads=4, vocab=VOCAB, new_tokens=NEW)
    one = BudgetedMemory(float("inf"))
    with one.batch():
        expected_first = generate_ids(model, long[:1], NEW, PAD, EOS)
    capacity = 5 * one.peak  # room for about five of these prompts at once
    assert memory.predict([4096] * 32) > capacity  # the seed's fixed batch of 32 cannot fit

    # A fixed batch of 32 with retries on: every attempt runs out of memory.
    device = BudgetedMemory(capacity)
    for _ in range(3):
        with pytest.raises(torch.OutOfMemoryError), device.batch():
            generate_ids(model, long, NEW, PAD, EOS)
    assert device.violations == 3 and device.batches == 0

    # A fixed batch of 32 split in two after each OOM (a careful user's retry): it completes, thrashing first.
    device, done, violations = BudgetedMemory(capacity), 0, 0
    size = 32
    while done < len(long):
        try:
            with device.batch():
                generate_ids(model, long[done:done + size], NEW, PAD, EOS)
            done += size
        except torch.OutOfMemoryError:
            violations += 1
            size //= 2
    assert violations >= 3 and size in (4, 2)

    # The memory-aware batcher: every prompt answered once, in order, and not one allocation over the budget.
    device = BudgetedMemory(capacity)

    def run(batch: list[int]) -> list[list[int]]:
        with device.batch():
            return generate_ids(model, [long[i] for i in batch], NEW, PAD, EOS)

    batcher = AdaptiveBatcher(run, [4096] * len(long), memory, lambda: capacity,
                              peaks=ReportedPeaks(lambda: device.peak), sleep=lambda s: None)
    outputs, report = batcher()
    assert device.violations == 0 and report.ooms == 0 and len(outputs) == 32 and device.batches == report.batches
    assert outputs[0] == expected_first[0] and all(len(out) == NEW for out in outputs)
    assert device.highest <= capacity and max(report.sizes) >= 3  # it used the room it had
    assert report.measured_peaks == report.batches and report.prediction_error < 0.1  # calibrated on true peaks
