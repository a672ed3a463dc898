"""The generation graph (caption → image) as ONNX, and its INT8 form by static post-training quantization.

Why ONNX Runtime for INT8: its quantized Conv/MatMul kernels make a convolutional decoder
faster on a CPU, where torch's dynamic quantization only covers Linear layers (≈5 % here) and
weight-only INT8 saves bytes but not time. Calibration feeds real curated captions with
seeded latents, so activation ranges are those of the data the model will see.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from aigc.workloads.image.cvae import ConditionalVAE, latents_for_seeds
from aigc.workloads.image.tokenizer import Vocab

OPSET = 17


class _GenerationGraph(torch.nn.Module):
    def __init__(self, model: ConditionalVAE):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.model.generate(ids, z)


def export_onnx(model: ConditionalVAE, vocab: Vocab, prompts: list[str]) -> bytes:
    """fp32 ONNX of ``generate(ids (B, L) int64, z (B, latent) float32) → (B, 3, R, R)``, batch dynamic."""
    cfg = model.cfg
    ids = vocab.encode(prompts[:2], cfg.max_tokens)
    z = latents_for_seeds([0, 1], cfg.latent_dim)
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the fused encoder-layer kernel has no ONNX form
    try:
        with tempfile.TemporaryDirectory(prefix="aigc-onnx-") as tmp, warnings.catch_warnings():
            # The tracer warns about Python-side shape checks (GroupNorm, padding masks): constants for any batch.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            path = Path(tmp) / "generator.onnx"
            torch.onnx.export(_GenerationGraph(model.eval()), (ids, z), str(path), input_names=["ids", "z"],
                              output_names=["images"], opset_version=OPSET, dynamo=False,
                              dynamic_axes={"ids": {0: "batch"}, "z": {0: "batch"}, "images": {0: "batch"}})
            return path.read_bytes()
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def quantize_int8(onnx_fp32: bytes, vocab: Vocab, max_tokens: int, latent_dim: int,
                  captions: list[str], batch: int = 32) -> bytes:
    """Static QDQ INT8 (per-channel weights, uint8 activations) calibrated on ``captions``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Feeds(CalibrationDataReader):
        def __init__(self) -> None:
            chunks = [captions[i:i + batch] for i in range(0, len(captions), batch)]
            self._feeds = iter([{"ids": vocab.encode(c, max_tokens).numpy(),
                                 "z": latents_for_seeds(list(range(i * batch, i * batch + len(c))), latent_dim).numpy()}
                                for i, c in enumerate(chunks)])

        def get_next(self):
            return next(self._feeds, None)

    with tempfile.TemporaryDirectory(prefix="aigc-int8-") as tmp:
        src, pre, out = (os.path.join(tmp, n) for n in ("fp32.onnx", "pre.onnx", "int8.onnx"))
        Path(src).write_bytes(onnx_fp32)
        quant_pre_process(src, pre, skip_symbolic_shape=True)  # symbolic inference trips on dynamic reshapes
        quantize_static(pre, out, Feeds(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        op_types_to_quantize=["Conv", "MatMul", "Gemm"])
        return Path(out).read_bytes()


class OnnxRunner:
    """An ONNX Runtime session with the model's ``generate`` signature."""

    def __init__(self, onnx_bytes: bytes, threads: int = 0, device: torch.device | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        # No busy-waiting between runs: beside torch's own thread pool (measurements interleave
        # variants; a worker may hold both) spinning threads steal the cores the other needs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = ["CPUExecutionProvider"]
        if device is not None and device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        self.session = ort.InferenceSession(onnx_bytes, options, providers=providers)

    def generate(self, ids: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        (images,) = self.session.run(None, {"ids": ids.cpu().numpy(), "z": z.float().cpu().numpy().astype(np.float32)})
        return torch.from_numpy(images)
