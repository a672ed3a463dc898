"""The generator and its tokenizer: pure modules, deterministic per (prompt, seed)."""

import torch

from aigc.workloads.image.config import CVAEShape
from aigc.workloads.image.cvae import ConditionalVAE, latents_for_seeds
from aigc.workloads.image.tokenizer import Vocab


def test_vocab_is_built_by_frequency_and_maps_unknown_words():
    vocab = Vocab.build(["a red circle", "a blue circle", "a red square"])
    assert vocab.tokens[:4] == ["<pad>", "<unk>", "a", "circle"]
    ids = vocab.encode(["a red hexagon", "a"], max_tokens=4)
    assert ids.tolist() == [[2, vocab.index["red"], 1, 0], [2, 0, 0, 0]]
    assert Vocab.from_dict(vocab.to_dict()).tokens == vocab.tokens


def test_the_vae_reconstructs_and_generates_at_each_resolution():
    for resolution in (32, 64):
        cfg = CVAEShape(resolution=resolution, channels=8, latent_dim=4, text_dim=16)
        model = ConditionalVAE(10, cfg)
        images = torch.rand(3, 3, resolution, resolution)
        ids = torch.randint(1, 10, (3, 5))
        out = model(images, ids)
        assert out.loss.ndim == 0 and torch.isfinite(out.loss)
        generated = model.generate(ids, latents_for_seeds([1, 2, 3], cfg.latent_dim))
        assert generated.shape == (3, 3, resolution, resolution)
        assert generated.min() >= 0 and generated.max() <= 1


def test_a_seed_gives_the_same_latent_whatever_the_batch():
    alone = latents_for_seeds([7], 6)
    in_batch = latents_for_seeds([3, 7, 9], 6)
    assert torch.equal(alone[0], in_batch[1])
    assert not torch.equal(in_batch[0], in_batch[1])


def test_validation_loss_is_deterministic():
    torch.manual_seed(0)
    model = ConditionalVAE(10, CVAEShape(channels=8, latent_dim=4, text_dim=16))
    images, ids = torch.rand(4, 3, 32, 32), torch.randint(1, 10, (4, 5))
    assert model(images, ids, sample=False).loss == model(images, ids, sample=False).loss
