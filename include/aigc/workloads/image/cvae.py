"""A conditional VAE for captioned images: a caption encoder, a conv encoder and a FiLM-conditioned decoder.

Why a CVAE: one forward pass per image at generation time (no sampling loop), and on 2 CPU
cores it learns colour, shape, size and position of the reference scenes within minutes.
The decoder sees the caption at every scale (FiLM), so layout does not have to squeeze
through the latent; the latent carries what captions do not say (background, jitter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from aigc.workloads.image.config import CVAEShape


class CaptionEncoder(nn.Module):
    """(B, L) token ids → (B, text_dim): embeddings + one self-attention layer + masked mean."""

    def __init__(self, vocab_size: int, cfg: CVAEShape):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.text_dim, padding_idx=0)
        self.positions = nn.Embedding(cfg.max_tokens, cfg.text_dim)
        self.mix = nn.TransformerEncoderLayer(cfg.text_dim, nhead=4, dim_feedforward=2 * cfg.text_dim,
                                              dropout=0.0, batch_first=True)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pad = ids == 0  # (B, L)
        h = self.tokens(ids) + self.positions.weight[: ids.shape[1]]
        h = self.mix(h, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return (h * keep).sum(1) / keep.sum(1).clamp_min(1.0)


class FiLMBlock(nn.Module):
    """Upsample ×2, conv, then scale and shift every channel by the condition."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.norm = nn.GroupNorm(min(8, c_out), c_out)
        self.film = nn.Linear(cond_dim, 2 * c_out)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        x = F.silu(self.conv1(x))
        gamma, beta = self.film(cond).unsqueeze(-1).unsqueeze(-1).chunk(2, dim=1)
        return F.silu(self.norm(self.conv2(x)) * (1 + gamma) + beta)


@dataclass
class VAELoss:
    loss: torch.Tensor
    """Negative ELBO per pixel (reconstruction + kl_weight · KL), averaged over the batch."""
    recon: torch.Tensor
    kl: torch.Tensor


class ConditionalVAE(nn.Module):
    """Images in [0, 1], shape (B, 3, R, R); captions as (B, L) token ids."""

    def __init__(self, vocab_size: int, cfg: CVAEShape):
        super().__init__()
        self.cfg = cfg
        c, r = cfg.channels, cfg.resolution
        self.levels = int(math.log2(r // 4))  # R → 4 by stride-2 convs, and back
        widths = [min(c * 2**i, 8 * c) for i in range(self.levels + 1)]  # widths[i] at side R / 2^i
        self.caption = CaptionEncoder(vocab_size, cfg)
        down: list[nn.Module] = [nn.Conv2d(3, widths[0], 3, padding=1), nn.SiLU()]
        for i in range(self.levels):
            down += [nn.Conv2d(widths[i], widths[i + 1], 4, stride=2, padding=1), nn.SiLU()]
        self.encoder = nn.Sequential(*down)
        flat = widths[-1] * 4 * 4
        self.posterior = nn.Linear(flat + cfg.text_dim, 2 * cfg.latent_dim)
        cond_dim = cfg.text_dim + cfg.latent_dim
        self.stem = nn.Linear(cond_dim, flat)
        self.blocks = nn.ModuleList(FiLMBlock(widths[i + 1], widths[i], cond_dim) for i in reversed(range(self.levels)))
        self.to_rgb = nn.Conv2d(widths[0], 3, 3, padding=1)
        self._top = widths[-1]

    def encode(self, images: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(images * 2 - 1).flatten(1)
        mu, logvar = self.posterior(torch.cat([h, text], dim=1)).chunk(2, dim=1)
        return mu, logvar.clamp(-10, 10)

    def decode(self, z: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        cond = torch.cat([z, text], dim=1)
        x = F.silu(self.stem(cond)).view(-1, self._top, 4, 4)
        for block in self.blocks:
            x = block(x, cond)
        return torch.sigmoid(self.to_rgb(x))

    def forward(self, images: torch.Tensor, ids: torch.Tensor, *, sample: bool = True) -> VAELoss:
        """The training objective; ``sample=False`` decodes the posterior mean (a deterministic validation loss)."""
        text = self.caption(ids)
        mu, logvar = self.encode(images, text)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp() if sample else mu
        recon = self.decode(z, text)
        pixels = images[0].numel()
        # Sums over pixels and latent dims, per image, then per pixel: the scale does not move with R.
        rec = F.mse_loss(recon.float(), images.float(), reduction="none").flatten(1).sum(1)
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).float().sum(1)
        rec, kl = rec.mean() / pixels, kl.mean() / pixels
        return VAELoss(loss=rec + self.cfg.kl_weight * kl, recon=rec, kl=kl)

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
        """(B, 3, R, R) images in [0, 1] for captions ``ids`` and prior samples ``latents`` (B, latent_dim)."""
        return self.decode(latents, self.caption(ids))


def latents_for_seeds(seeds: list[int], dim: int, temperature: float = 1.0) -> torch.Tensor:
    """One prior sample per seed, independent of batch composition: the same (prompt, seed) → the same image."""
    out = torch.empty(len(seeds), dim)
    gen = torch.Generator()
    for i, seed in enumerate(seeds):
        gen.manual_seed(int(seed))
        out[i] = torch.randn(dim, generator=gen)
    return out * temperature
