"""The image workload's stage 2: images decoded shard by shard, captions as word ids, the conditional VAE."""

from __future__ import annotations

import io
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from aigc.workload import Loss, TrainingTask
from aigc.workloads.image.config import image_settings

if TYPE_CHECKING:
    import torch

    from aigc.config import PipelineConfig
    from aigc.lake import Lake
    from aigc.train.data import WindowIndex


class ImageStore:
    """Decoded images by sample index: whole shards decoded once and kept, least recently used dropped."""

    def __init__(self, lake: Lake, index: WindowIndex, resolution: int, cache_bytes: int):
        self.lake, self.index, self.resolution, self.cache_bytes = lake, index, resolution, cache_bytes
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._bytes = 0
        self.decoded_shards = 0

    def _shard(self, s: int) -> np.ndarray:
        from PIL import Image

        from aigc.train.data import CorruptShard

        if s in self._cache:
            self._cache.move_to_end(s)
            return self._cache[s]
        key = self.index.shards[s]
        try:
            table = self.index.shard(self.lake, s).read(columns=["id", "image"])
        except Exception as e:
            raise CorruptShard(f"curated shard {self.lake.url(key)} cannot be read: {type(e).__name__}: {e}") from e
        images = table.column("image").to_pylist()
        r = self.resolution
        out = np.empty((len(images), r, r, 3), dtype=np.uint8)  # (N, H, W, C)
        for i, data in enumerate(images):
            try:
                img = Image.open(io.BytesIO(data)).convert("RGB")
            except Exception as e:
                row_id = table.column("id")[i].as_py()
                raise CorruptShard(f"curated shard {self.lake.url(key)}: image of row {i} (id {row_id!r}) "
                                   f"does not decode: {type(e).__name__}: {e}") from e
            if img.size != (r, r):
                img = img.resize((r, r), Image.Resampling.BILINEAR)
            out[i] = np.asarray(img)
        self._cache[s] = out
        self._bytes += out.nbytes
        self.decoded_shards += 1
        while self._bytes > self.cache_bytes and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._bytes -= dropped.nbytes
        return out

    def images(self, samples: np.ndarray) -> torch.Tensor:
        """(B, 3, R, R) float32 in [0, 1] for sample indices, in their order."""
        import torch

        r = self.resolution
        out = np.empty((len(samples), r, r, 3), dtype=np.uint8)
        shard_of, row_of = self.index.shard_of[samples], self.index.row_of[samples]
        for s in np.unique(shard_of):
            mask = shard_of == s
            out[mask] = self._shard(int(s))[row_of[mask]]
        return torch.from_numpy(out).permute(0, 3, 1, 2).float().div_(255.0)


class ImageTrainingTask(TrainingTask):
    """Images decoded shard by shard (``ImageStore``), captions as word ids of a vocabulary built from the window."""

    def __init__(self, lake: Lake, index: WindowIndex, cfg: PipelineConfig):
        import torch

        from aigc.workloads.image.tokenizer import Vocab

        self.shape = image_settings(cfg).shape
        self.captions = index.columns["caption"]
        self._use(Vocab.build(self.captions))
        self.store = ImageStore(lake, index, self.shape.resolution, cfg.train.cache_bytes)
        self._torch = torch

    def _use(self, vocab) -> None:
        self.vocab = vocab
        self.tokens = vocab.encode(self.captions, self.shape.max_tokens)  # (N, L)
        self.data_state = vocab.tokens

    def adopt(self, card):
        import dataclasses
        import json

        from aigc.workloads.image.tokenizer import Vocab, words

        shape = json.loads(json.dumps(dataclasses.asdict(self.shape)))
        if card.get("model") != shape:
            return f"its model shape {card.get('model')} is not the configured {shape}"
        vocab = Vocab.from_dict(card["vocab"])
        new = sorted({w for c in self.captions for w in words(c)} - set(vocab.tokens))
        if new:
            return f"the window's captions have {len(new)} word(s) its vocabulary lacks ({', '.join(new[:5])})"
        self._use(vocab)
        return None

    def build_model(self):
        from aigc.workloads.image.cvae import ConditionalVAE

        return ConditionalVAE(len(self.vocab), self.shape)

    def batch(self, samples):
        return self.store.images(samples), self.tokens[self._torch.from_numpy(samples)]

    def loss(self, model, batch, *, train):
        images, ids = batch
        out = model(images, ids) if train else model(images, ids, sample=False)
        return Loss(out.loss, {"recon": out.recon, "kl": out.kl})

    def card(self):
        import dataclasses

        return {"model": dataclasses.asdict(self.shape), "vocab": self.vocab.to_dict()}

    def stats(self):
        return {"decoded_shards": self.store.decoded_shards}
