"""A byte-level BPE (Hugging Face ``tokenizers``) learnt from the training window and stored with the model.

Every rank learns the same merges from the same texts (the trainer is deterministic), so no rank waits
for another; the tokenizer's JSON goes into checkpoints (a resumed run must find the same one) and the
model card (what generation loads). Byte-level: any text encodes, nothing is ever unknown.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAD, EOS = "<|pad|>", "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[PAD, EOS], show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def load_tokenizer(data: str) -> Tokenizer:
    return Tokenizer.from_str(data)


def special_ids(tok: Tokenizer) -> tuple[int, int]:
    """(pad, end of text) token ids."""
    return tok.token_to_id(PAD), tok.token_to_id(EOS)
