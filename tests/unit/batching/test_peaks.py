"""Peak-memory meters: what they measure on CPU, and how the batcher uses a meter that slows a batch."""

import contextlib

import torch

from aigc.batching import AdaptiveBatcher, CpuPeaks, MemoryModel, PeakMeter
from tests.unit.batching.test_batching import FakeClock

MIB = 1 << 20


def measure(fn) -> float | None:
    meter = CpuPeaks()
    with meter.measuring():
        fn()
    return meter.peak()


def test_the_cpu_meter_counts_the_storages_alive_together_once_each():
    weights = torch.ones(MIB // 4)  # made before the batch: not the batch's memory

    def batch():
        a = torch.ones(MIB // 4)  # 1 MiB
        b = a + weights  # 2 MiB alive
        view = b[:10]  # a view: no new storage
        b.mul_(2)  # in place: no new storage
        del a
        c = b * view.sum()  # a and its MiB are gone: b, the sum and c alive
        return c

    assert measure(batch) == 2 * MIB + 4  # b, c and the 4-byte sum
    assert measure(lambda: [torch.ones(MIB // 4) for _ in range(3)]) == 3 * MIB
    # Each short-lived temporary is freed before the next: the peak is one, not the sum.
    assert measure(lambda: [torch.ones(MIB // 4).sum() for _ in range(3)]) == MIB + 3 * 4


def test_the_cpu_meter_grows_with_the_batch_on_a_real_model():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    with torch.inference_mode():
        peaks = {n: measure(lambda n=n: model(torch.randn(n, 64))) for n in (8, 64, 512)}
    per_item = {n: peak / n for n, peak in peaks.items()}
    # Two hidden activations of 256 floats at most (ReLU's output and its input): 1-2 KiB an item.
    assert all(1024 <= v <= 2 * 1024 + 512 for v in per_item.values()), per_item
    assert peaks[512] > 7 * peaks[64] > 49 * peaks[8], peaks


class SlowingMeter(PeakMeter):
    """Like the CPU meter: measures every fourth batch, and a measured batch takes twice as long."""

    intrusive = True

    def __init__(self, clock: FakeClock, per_item_bytes: float):
        self.clock, self.per_item_bytes, self.measured, self._items = clock, per_item_bytes, [], 0

    def due(self, batch_number: int) -> bool:
        return batch_number % 4 == 0

    @contextlib.contextmanager
    def measuring(self):
        start = self.clock.now
        yield
        self.clock.now += self.clock.now - start  # the meter's own cost: as long again
        self.measured.append(self._items)

    def peak(self) -> float:
        return self.per_item_bytes * self._items


def test_a_slowing_meter_calibrates_the_model_without_misleading_the_search():
    clock = FakeClock()
    lengths = [64] * 20_000
    sizes_run = []

    def run(batch):  # launch-bound up to 256: the best batch is 256 (as in test_batching's curve)
        n = len(batch)
        clock.now += 0.02 + 1e-4 * n * (1 + 0.5 * max(0.0, n / 256 - 1))
        sizes_run.append(n)
        meter._items = n
        return batch

    meter = SlowingMeter(clock, per_item_bytes=3_000.0)
    model = MemoryModel(width=64)
    _, report = AdaptiveBatcher(run, lengths, model, lambda: 1e12, clock=clock, peaks=meter)()
    assert 128 <= report.learned[64] <= 512, report.sizes  # a doubled batch time was not taken for the size's
    assert report.measured_peaks == len(meter.measured) == -(-report.batches // 4)
    assert model.calibrated
    assert abs(model.predict([64] * 100) - 300_000) / 300_000 < 1e-6  # the meter's truth, learned exactly
    assert report.to_dict()["memory_prediction_error"] is not None
