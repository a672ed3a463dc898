"""The base model: a folder in the ``save_pretrained`` layout, found, checked and loaded without running its code.

A base is named by ``HFLMSettings.base_model_uri``: a folder on this machine, or a folder in a lake (``s3://…``,
``file://…``), which is copied once into a local cache (``hf_folder.materialise``) keyed by its listing (names,
sizes, versions), so every process of a run loads the same bytes from disk. Before ``transformers`` sees a folder it is
checked here:

* ``config.json`` present and naming no code of its own (``auto_map``: that would need ``trust_remote_code``);
* weights in safetensors (``*.safetensors``): a folder with only pickles (``pytorch_model.bin``) is refused, as
  loading a pickle runs code;
* the tokenizer's files (``tokenizer.json``, or a sentencepiece ``tokenizer.model``, or ``vocab.json`` and
  ``merges.txt``).

Then ``AutoTokenizer`` and ``AutoModelForCausalLM`` load it with ``local_files_only=True``,
``trust_remote_code=False`` and ``use_safetensors=True``: nothing is downloaded. A name that looks like a Hub id
(``org/model``) and is no folder gets a message saying to download it first and pass the folder.

An empty ``base_model_uri`` means the demo base (``demo_base``): built from a config, with random weights.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from aigc.workloads.hf_folder import PICKLES, BaseModelError, checked_folder, file_hashes, fingerprint_of

# Set before transformers and huggingface_hub are imported (they read it once): no call to the Hub, even by a
# code path that would otherwise look for a newer file.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

if TYPE_CHECKING:
    import torch

    from aigc.lake import S3Options

LAYOUT = re.compile(r"^(config\.json|generation_config\.json|.+\.safetensors|model\.safetensors\.index\.json|"
                    r"tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|vocab\.json|merges\.txt|"
                    r"tokenizer\.model|added_tokens\.json|chat_template\.jinja|chat_template\.json|"
                    r"preprocessor_config\.json|processor_config\.json)$")
"""The files of the ``save_pretrained`` layout that loading reads; anything else in a folder is left alone."""
TOKENIZER_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"))
TOKENIZER_PREFIXES = ("tokenizer", "vocab", "merges", "special_tokens", "added", "chat_template")
"""The layout's files a tokenizer is loaded from."""
DEMO_PREFIX = "demo:"
"""How a model card names a demo base (``demo:llama``) in place of a location."""


def check_folder(folder: Path, where: str | None = None, *, tokenizer: bool = True) -> dict:
    """The folder's ``config.json`` once the folder is a loadable base (BaseModelError says why it is not);
    ``tokenizer``: whether it must hold a tokenizer's files (an image model's folder has none)."""
    where = where or str(folder)
    if not folder.is_dir():
        raise BaseModelError(f"no base model folder at {where}")
    names = {p.name for p in folder.iterdir() if p.is_file()}
    layout = "the save_pretrained layout (config.json, *.safetensors, the tokenizer's files)"
    if "config.json" not in names:
        raise BaseModelError(f"{where} has no config.json: a base model is a folder in {layout}")
    if not any(n.endswith(".safetensors") for n in names):
        pickles = sorted(n for n in names if n.endswith(PICKLES))
        raise BaseModelError(
            f"{where} has no safetensors weights" + (f" (only {pickles}: pickles, which run code as they load)"
                                                     if pickles else "")
            + "; save them as safetensors: model.save_pretrained(folder, safe_serialization=True)")
    if tokenizer and not any(all(n in names for n in group) for group in TOKENIZER_FILES):
        raise BaseModelError(f"{where} has no tokenizer files (tokenizer.json, tokenizer.model, or vocab.json and "
                             "merges.txt): save the tokenizer beside the model, tokenizer.save_pretrained(folder)")
    config = json.loads((folder / "config.json").read_text())
    if config.get("auto_map"):
        raise BaseModelError(f"{where}'s config.json names code of its own (auto_map: {config['auto_map']}): "
                             "loading it would run that code (trust_remote_code), which this pipeline refuses; use "
                             "a model of an architecture transformers ships")
    return config


def local_folder(uri: str, demo_architecture: str = "llama", s3: S3Options | None = None) -> Path:
    """The checked local folder of the base ``uri`` (empty: the demo base of ``demo_architecture``; ``demo:ARCH``, as a
    model card names it, the same); a base in S3 is read with ``s3`` (the lake's options in training), else the
    standard AWS variables."""
    if uri.startswith(DEMO_PREFIX):
        uri, demo_architecture = "", uri.removeprefix(DEMO_PREFIX)
    if not uri:
        from aigc.workloads.hf_lm.demo_base import demo_folder

        return demo_folder(demo_architecture)
    return checked_folder(uri, s3, in_layout, check_folder)


def in_layout(key: str) -> bool:
    """A file of the layout at a folder's top level (what a copy from a lake takes)."""
    return "/" not in key and bool(LAYOUT.match(key))


def fingerprint(folder: Path, tokenizer_only: bool = False) -> dict:
    """What pins a base: each layout file's sha256, and one over them all (the lineage a fine-tuned model records);
    ``tokenizer_only``: the tokenizer's files alone (what serving checks, without reading gigabytes of weights)."""
    files = file_hashes(folder, lambda name: bool(LAYOUT.match(name))
                        and (not tokenizer_only or name.startswith(TOKENIZER_PREFIXES)))
    return fingerprint_of(files)


def load_tokenizer(folder: Path):
    """The base's tokenizer (a fast one where the folder has ``tokenizer.json``), with a padding token: the end of
    text where the base defines none (GPT-2's)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    if tok.eos_token_id is None:
        raise BaseModelError(f"{folder}'s tokenizer has no end-of-text token (eos_token): set one in "
                             "tokenizer_config.json; generation needs it to stop")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    # Nothing here truncates by it, and stage 1 counts whole documents' tokens: without this, every long document
    # logs "longer than the specified maximum sequence length" (no sequence past the context reaches the model).
    tok.model_max_length = 1 << 40
    return tok


def load_model(folder: Path, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """The base's weights in ``AutoModelForCausalLM`` (fp32 unless ``dtype``), from safetensors, no remote code."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per load in every task log, for a few milliseconds of reading
    return AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False,
                                                use_safetensors=True, dtype=dtype or torch.float32)


def model_from_config(config: dict) -> torch.nn.Module:
    """An uninitialised model of a stored ``config.json`` (a registered version's card): its weights come next."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if config.get("auto_map"):
        raise BaseModelError(f"the model card's config names code of its own (auto_map: {config['auto_map']}): refused")
    fields = {k: v for k, v in config.items() if k != "model_type"}
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **fields),
                                            trust_remote_code=False)
