"""The base pipeline: a ``diffusers`` pipeline folder saved with ``save_pretrained``, found, checked and loaded without
running its code.

A base is named by ``HFDiffusionSettings.base_model_uri``: a folder on this machine, or a folder in a lake, copied
once into this machine's cache (``hf_folder.materialise``). Before ``diffusers`` sees a folder it is checked here:

* ``model_index.json`` present, naming a pipeline class ``diffusers`` ships (no ``custom_pipeline``) and components
  from ``diffusers``, ``transformers`` or one of diffusers' own pipeline packages only (a component of another
  library would be imported from the folder's own code);
* a conditional UNet (``unet``): the denoiser this workload fine-tunes;
* every component that has weights (a ``config.json``) has them in safetensors, its config naming no code of its own
  (``auto_map``); a folder with only pickles (``*.bin``) is refused, as loading a pickle runs code;
* a tokenizer component has its files.

Then ``DiffusionPipeline.from_pretrained`` loads it with ``local_files_only=True`` and ``use_safetensors=True``:
nothing is downloaded. A name that looks like a Hub id gets a message saying to download it first and pass the
folder. An empty ``base_model_uri`` means the demo base (``demo_base``): built from configs, with random weights.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from aigc.workloads.hf_folder import PICKLES, BaseModelError, checked_folder, file_hashes, fingerprint_of

# Read once, when huggingface_hub is imported: no call to the Hub, even by a path that would look for a newer file.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

if TYPE_CHECKING:
    import torch

    from aigc.lake import S3Options

LAYOUT = re.compile(r"^(model_index\.json|[\w.-]+/([\w.-]+\.json|[\w.-]+\.safetensors|merges\.txt|vocab\.txt|"
                    r"spiece\.model|tokenizer\.model|[\w.-]+\.jinja))$")
"""The files of a pipeline's ``save_pretrained`` layout that loading reads (its index, and each component's config,
weights and tokenizer files one folder down); anything else in a folder is left alone."""
LIBRARIES = ("diffusers", "transformers")
DENOISER = "unet"
TOKENIZER_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("spiece.model",), ("tokenizer.model",),
                   ("vocab.txt",))
DEMO_PREFIX = "demo:"
"""How a model card names a demo base (``demo:pixel``) in place of a location."""


def components(index: dict) -> dict[str, tuple[str | None, str | None]]:
    """``model_index.json``'s components: name → (library, class), ``(None, None)`` for one the pipeline left out."""
    return {name: (spec[0], spec[1]) for name, spec in index.items()
            if not name.startswith("_") and isinstance(spec, list) and len(spec) == 2}


def shipped_library(lib: str) -> bool:
    """Whether a component's library is one diffusers loads from what is installed: ``diffusers``, ``transformers``,
    or one of diffusers' own pipeline packages (Stable Diffusion's safety checker is ``["stable_diffusion",
    "StableDiffusionSafetyChecker"]``); any other name would be imported from the folder's own code."""
    if lib in LIBRARIES:
        return True
    if not isinstance(lib, str) or not lib.isidentifier():
        return False
    import pkgutil

    import diffusers.pipelines

    return lib in {m.name for m in pkgutil.iter_modules(diffusers.pipelines.__path__)}


def check_folder(folder: Path, where: str | None = None) -> dict:
    """The folder's ``model_index.json`` once the folder is a loadable pipeline (BaseModelError says why it is not)."""
    where = where or str(folder)
    layout = "a diffusers pipeline saved with save_pretrained (model_index.json and a folder per component)"
    if not folder.is_dir():
        raise BaseModelError(f"no base pipeline folder at {where}")
    if not (folder / "model_index.json").is_file():
        raise BaseModelError(f"{where} has no model_index.json: a base is {layout}")
    index = json.loads((folder / "model_index.json").read_text())
    pipeline = index.get("_class_name")
    if not isinstance(pipeline, str) or not pipeline.isidentifier():
        raise BaseModelError(f"{where}/model_index.json names no pipeline class (_class_name: {pipeline!r})")
    parts = components(index)
    foreign = {name: lib for name, (lib, _) in parts.items() if lib is not None and not shipped_library(lib)}
    if foreign:
        raise BaseModelError(f"{where}'s components {foreign} come from libraries other than {list(LIBRARIES)} "
                             "and diffusers' pipeline packages: loading them would import the folder's own code, "
                             "which this pipeline refuses")
    if parts.get(DENOISER, (None, None))[0] is None:
        raise BaseModelError(f"{where} ({pipeline}) has no {DENOISER!r} component: this workload fine-tunes a "
                             "conditional UNet (a transformer-based denoiser is not supported yet)")
    for name, (lib, cls) in parts.items():
        if lib is None:
            continue
        sub = folder / name
        if not sub.is_dir():
            raise BaseModelError(f"{where}/model_index.json names a component {name!r} ({cls}) with no folder "
                                 f"{name}/: save the whole pipeline with pipeline.save_pretrained(folder)")
        names = {p.name for p in sub.iterdir() if p.is_file()}
        if "Tokenizer" in (cls or ""):
            if not any(all(n in names for n in group) for group in TOKENIZER_FILES):
                raise BaseModelError(f"{where}/{name} has no tokenizer files (tokenizer.json, or vocab.json and "
                                     "merges.txt, or a sentencepiece model)")
            continue
        if "config.json" not in names:
            continue  # a scheduler's or feature extractor's own config: no weights to check
        if not any(n.endswith(".safetensors") for n in names):
            pickles = sorted(n for n in names if n.endswith(PICKLES))
            raise BaseModelError(
                f"{where}/{name} has no safetensors weights"
                + (f" (only {pickles}: pickles, which run code as they load)" if pickles else "")
                + "; save the pipeline with pipeline.save_pretrained(folder, safe_serialization=True)")
        config = json.loads((sub / "config.json").read_text())
        if config.get("auto_map"):
            raise BaseModelError(f"{where}/{name}/config.json names code of its own (auto_map: "
                                 f"{config['auto_map']}): loading it would run that code, which this pipeline refuses")
    return index


def in_layout(name: str) -> bool:
    return bool(LAYOUT.match(name))


def local_folder(uri: str, demo_architecture: str = "pixel", s3: S3Options | None = None) -> Path:
    """The checked local folder of the base ``uri`` (empty, or ``demo:ARCH`` as a model card names it: the demo base
    of that architecture); a base in a lake is read with ``s3``, else the standard AWS variables."""
    if uri.startswith(DEMO_PREFIX):
        uri, demo_architecture = "", uri.removeprefix(DEMO_PREFIX)
    if not uri:
        from aigc.workloads.hf_diffusion.demo_base import demo_folder

        return demo_folder(demo_architecture)
    return checked_folder(uri, s3, in_layout, check_folder)


def fingerprint(folder: Path) -> dict:
    """What pins a base: each layout file's sha256 by its path (``unet/config.json``), and one over them all."""
    return fingerprint_of(file_hashes(folder, in_layout, depth=2))  # the index, and a folder per component


def load_pipeline(folder: Path, dtype: torch.dtype | None = None, **components):
    """The base's pipeline (fp32 unless ``dtype``), from safetensors, checked first; progress bars off (a bar per
    call in every task log). ``components`` replace the folder's (``unet=``: a version's own, not read from it)."""
    import diffusers
    import torch
    from diffusers import DiffusionPipeline
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as hf_logging

    index = check_folder(folder)
    shipped = getattr(diffusers, index["_class_name"], None)
    if not (isinstance(shipped, type) and issubclass(shipped, DiffusionPipeline)):
        raise BaseModelError(f"{folder}'s model_index.json names {index['_class_name']!r}, which is no pipeline "
                             f"diffusers {diffusers.__version__} ships: a custom pipeline's code is not run here")
    diffusers_logging.disable_progress_bar()
    hf_logging.disable_progress_bar()  # the text encoder's, loaded by transformers
    pipe = DiffusionPipeline.from_pretrained(str(folder), local_files_only=True, use_safetensors=True,
                                             dtype=dtype or torch.float32, **components)
    if type(pipe).__name__ != index["_class_name"]:  # from_pretrained maps a few names; anything else is a surprise
        raise BaseModelError(f"{folder} loaded as {type(pipe).__name__}, not the {index['_class_name']} it names")
    pipe.set_progress_bar_config(disable=True)
    return pipe
