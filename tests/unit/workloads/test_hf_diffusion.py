"""The hf-diffusion workload's base: a diffusers pipeline folder (built here from configs, as the demo does: nothing
is downloaded), loaded by diffusers' own ``from_pretrained``, refused where loading it would run code or need the
Hub, and copied from a lake with its component folders."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from aigc.lake import S3Lake
from aigc.workloads.hf_diffusion.base import BaseModelError, check_folder, fingerprint, load_pipeline, local_folder

CAPTION = "a small red circle at the top"
DATE = "2026-11-20"
WORKLOAD = "hf-diffusion"


@pytest.fixture(scope="module")
def pixel_base():
    return local_folder("", "pixel")


@pytest.mark.parametrize(("arch", "pipeline", "latent"), [("pixel", "IFPipeline", False),
                                                           ("latent", "StableDiffusionPipeline", True)])
def test_the_demo_bases_are_diffusers_pipelines_saved_with_save_pretrained(arch, pipeline, latent):
    folder = local_folder("", arch)
    index = check_folder(folder)
    assert index["_class_name"] == pipeline and ("vae" in index) == latent
    assert (folder / "unet" / "diffusion_pytorch_model.safetensors").exists()
    assert not [p for p in folder.rglob("*") if p.suffix in (".bin", ".pt", ".ckpt")]
    pipe = load_pipeline(folder)
    assert type(pipe).__name__ == pipeline
    # The caption grammar's words are whole tokens of the tokenizer learnt offline: none is unknown.
    ids = pipe.tokenizer(CAPTION)["input_ids"]
    assert ids[0] == pipe.tokenizer.bos_token_id and ids[-1] == pipe.tokenizer.eos_token_id
    assert pipe.tokenizer.eos_token_id not in ids[1:-1]
    assert pipe.tokenizer.decode(ids[1:-1]).strip() == CAPTION
    # The library's own call answers a batch at the configured resolution, with guidance (the batch doubled).
    kwargs = {"clean_caption": False} if pipeline == "IFPipeline" else {}
    images = pipe([CAPTION, "a large blue square on the left"], num_inference_steps=2, guidance_scale=3.0,
                  output_type="pt", generator=[torch.Generator().manual_seed(s) for s in (1, 2)], **kwargs).images
    assert tuple(images.shape) == (2, 3, 32, 32) and torch.isfinite(images).all()
    assert local_folder("", arch) == folder and fingerprint(folder) == fingerprint(folder)  # built once


def test_a_base_is_refused_where_loading_it_would_run_code_or_need_a_download(tmp_path, pixel_base):
    with pytest.raises(BaseModelError, match=r"looks like a Hugging Face Hub id.*nothing is downloaded"):
        local_folder("acme/sdxl")
    with pytest.raises(BaseModelError, match="no base pipeline folder at"):
        local_folder(str(tmp_path / "nowhere"))
    base = tmp_path / "pipe"
    shutil.copytree(pixel_base, base)
    index = json.loads((base / "model_index.json").read_text())

    def refused(match: str, changed_index: dict | None = None) -> None:
        (base / "model_index.json").write_text(json.dumps(changed_index or index))
        with pytest.raises(BaseModelError, match=match):
            local_folder(str(base))
        (base / "model_index.json").write_text(json.dumps(index))

    refused(r"components \{'unet': 'my_unets'\} come from libraries other than .*folder's own code",
            {**index, "unet": ["my_unets", "MyUNet"]})
    refused(r"names no pipeline class", {**index, "_class_name": ["pipeline", "MyPipeline"]})
    refused(r"has no 'unet' component: this workload fine-tunes a conditional UNet",
            {k: v for k, v in index.items() if k != "unet"})
    refused(r"names a component 'vae' \(AutoencoderKL\) with no folder vae/",
            {**index, "vae": ["diffusers", "AutoencoderKL"]})
    # Stable Diffusion's safety checker comes from one of diffusers' own pipeline packages: not foreign code.
    refused(r"names a component 'safety_checker' \(StableDiffusionSafetyChecker\) with no folder",
            {**index, "safety_checker": ["stable_diffusion", "StableDiffusionSafetyChecker"]})
    weights = base / "unet" / "diffusion_pytorch_model.safetensors"
    weights.rename(base / "unet" / "diffusion_pytorch_model.bin")
    refused(r"unet has no safetensors weights \(only \['diffusion_pytorch_model.bin'\]: pickles")
    (base / "unet" / "diffusion_pytorch_model.bin").rename(weights)
    config = json.loads((base / "text_encoder" / "config.json").read_text())
    (base / "text_encoder" / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "m.M"}}))
    refused(r"text_encoder/config.json names code of its own \(auto_map")
    (base / "text_encoder" / "config.json").write_text(json.dumps(config))
    (base / "tokenizer" / "tokenizer.json").unlink()
    refused(r"tokenizer has no tokenizer files")
    shutil.copy(pixel_base / "tokenizer" / "tokenizer.json", base / "tokenizer" / "tokenizer.json")
    # A pipeline class diffusers does not ship is code of the folder's author's: refused before loading.
    (base / "model_index.json").write_text(json.dumps({**index, "_class_name": "MyOwnPipeline"}))
    with pytest.raises(BaseModelError, match=r"names 'MyOwnPipeline', which is no pipeline diffusers .* ships"):
        load_pipeline(base)
    (base / "model_index.json").write_text(json.dumps(index))
    assert check_folder(base) == index  # the copy, mended, is a base again


def test_a_unet_that_takes_added_conditions_is_refused_by_name_before_training(pixel_base):
    """SDXL's UNet also reads pooled text embeddings and the image's size and crop, which fine-tuning does not feed:
    refused with the reason rather than failing inside the UNet's forward."""
    from aigc.workloads.hf_diffusion.denoising import Frozen

    pipe = load_pipeline(pixel_base)
    pipe.unet.register_to_config(addition_embed_type="text_time")
    with pytest.raises(ValueError, match=r"takes added conditions \('text_time', as IFPipeline's does\)"):
        Frozen.of(pipe)


def test_a_base_in_an_s3_lake_is_copied_with_its_component_folders(s3_server, pixel_base, tmp_path, monkeypatch):
    monkeypatch.setenv("AIGC_HF_CACHE", str(tmp_path / "cache"))
    lake = S3Lake(f"s3://{s3_server.bucket}/diffusion-{tmp_path.name}", s3_server.options())
    for p in pixel_base.rglob("*"):
        if p.is_file() and not p.name.startswith("."):
            lake.put_bytes(f"models/my-pipe/{p.relative_to(pixel_base).as_posix()}", p.read_bytes())
    lake.put_bytes("models/my-pipe/unet/notes.md", b"not part of the layout: not copied")
    uri = lake.url("models/my-pipe")
    folder = local_folder(uri, s3=s3_server.options())
    assert fingerprint(folder)["files"] == fingerprint(pixel_base)["files"]
    assert "unet/diffusion_pytorch_model.safetensors" in fingerprint(folder)["files"]
    assert not (folder / "unet" / "notes.md").exists()
    assert local_folder(uri, s3=s3_server.options()) == folder  # the same listing: the same copy
    assert type(load_pipeline(folder)).__name__ == "IFPipeline"


def shapes_batch(n: int = 8, seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    """``n`` scenes of the reference world at 32 px, in [-1, 1], and their captions."""
    import random

    import numpy as np

    from aigc.workloads import world

    rng = random.Random(seed)
    scenes = [world.random_scene(rng) for _ in range(n)]
    pixels = np.stack([np.asarray(world.render(s, 32), dtype=np.float32) for s in scenes])
    return torch.from_numpy(pixels).permute(0, 3, 1, 2) / 127.5 - 1, [s.caption for s in scenes]


# LoRA's bar is lower: adapters on the attention projections alone, of a UNet whose other weights are random, have
# less to move (measured on the demo base with IF's pooled text embedding: 0.88-0.90 of the start at lr 1e-2, by the
# host's thread count, where every weight reaches 0.16-0.21 at 1e-3).
@pytest.mark.parametrize(("arch", "finetune", "lr", "bar"), [("pixel", "full", 1e-3, 0.5),
                                                              ("pixel", "lora", 1e-2, 0.95),
                                                              ("latent", "full", 1e-3, 0.5)])
def test_fine_tuning_lowers_the_denoising_loss_on_the_same_noise(arch, finetune, lr, bar):
    from aigc.workloads.hf_diffusion.denoising import denoising_loss, trainable_unet

    pixels, captions = shapes_batch()
    unet, frozen = trainable_unet(local_folder("", arch), finetune)
    ids = frozen.tokenize(captions)
    frozen_before = {k: v.clone() for k, v in unet.state_dict().items() if "lora" not in k}

    def held_out_draw() -> float:  # the same timesteps and noise before and after training
        with torch.no_grad():
            return denoising_loss(unet, frozen, pixels, ids, torch.Generator().manual_seed(99)).item()

    before = held_out_draw()
    trainable = [p for p in unet.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr)
    draws = torch.Generator().manual_seed(0)
    for _ in range(30):
        loss = denoising_loss(unet, frozen, pixels, ids, draws, caption_dropout=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = held_out_draw()
    assert after < bar * before, (before, after)
    assert not any(p.requires_grad for p in frozen.text_encoder.parameters())
    if finetune == "lora":  # only the adapters moved: the base's own weights are as loaded
        assert 0 < sum(p.numel() for p in trainable) < sum(p.numel() for p in unet.parameters()) / 5
        assert all(torch.equal(v, unet.state_dict()[k]) for k, v in frozen_before.items())
        # What stage 2 registers: the adapters fused into the base UNet's own names, answering as the adapted UNet.
        from types import SimpleNamespace

        from aigc.workloads.hf_diffusion.training import HFDiffusionTrainingTask

        task = SimpleNamespace(settings=SimpleNamespace(finetune="lora"))
        fused = HFDiffusionTrainingTask.weights(task, unet)
        plain, _ = trainable_unet(local_folder("", arch), "full")
        assert set(fused) == set(plain.state_dict())
        plain.load_state_dict(fused)
        noisy, context = torch.randn(2, 3, 32, 32), frozen.encode_text(ids[:2])
        with torch.no_grad():
            adapted = unet(noisy, 500, encoder_hidden_states=context).sample
            assert torch.allclose(plain(noisy, 500, encoder_hidden_states=context).sample, adapted, atol=1e-4)


@pytest.mark.parametrize("arch", ["pixel", "latent"])
def test_the_five_stages_fine_tune_register_serve_and_judge_a_pipeline(tmp_path, arch):
    """Through the stage API the CLI and the DAGs call: the image workload's drop and rules; the UNet fine-tuned by
    the DDP core (one rank here; the DAG test runs torchrun), gate 2; the version registered with its variants
    (precision × steps × scheduler, the weights stored once per precision), gate 3; stage 4 by the CLI, each
    prompt's own guidance and negative prompt, cached; stage 5 by the CLI, the shapes checker judging. The pixel
    demo base (IF), and a folder of another configuration (Stable Diffusion's layout: an autoencoder, latents) given
    as the base, as a user's is, with no code of its own."""
    from safetensors.torch import load as load_safetensors

    from aigc.cli import main
    from aigc.lake import LocalLake
    from aigc.stages import DEPLOY, PREPARE, TRAIN, configure
    from aigc.train import distributed as D
    from aigc.train.loop import train_rank
    from aigc.workloads import load_workload

    torch.set_num_threads(1)
    base = local_folder("", arch)
    if arch == "latent":  # a user's folder: copied out of the cache, named by its path
        base = shutil.copytree(base, tmp_path / "my-pipeline")
    cfg = configure("smoke", WORKLOAD).override({
        "prepare": {"workers": 1}, "raw": {"n": 80}, "curated_gate": {"min_rows": 40},
        "train": {"steps": 12, "eval_every": 6, "checkpoint_every": 6, "batch_size": 8, "warmup_steps": 2,
                  "nproc": 1, "threads": 1},
        "workload": {"settings": {"base_model_uri": str(base) if arch == "latent" else ""}}})
    if arch == "latent":  # judged as a user's captions would be: the CLIP verdict, FID on CLIP's features, a classifier
        from tests.unit.workloads.test_hf_diffusion_scorers import tiny_classifier

        cfg = cfg.override({"workload": {"settings": {
            "judge_by": "clip", "clip_model_uri": "demo:clip", "unscored": "fail",
            "safety_model_uri": str(tiny_classifier(tmp_path / "classifier", {0: "safe", 1: "nsfw"}, 8.0))}},
            # bf16 here, where the UNet runs on 16 px latents (a quarter of the pixel base's positions): a CPU without
            # bf16 kernels runs it 20x slower a step than fp32.
            "deploy": {"variants": "fp32,bf16-s4-dpm"}})
    workload = load_workload(WORKLOAD)
    lake = LocalLake(tmp_path / "lake")
    raw = lake.sub("raw/shapes")
    PREPARE.make_raw(raw, DATE, cfg)
    PREPARE.finish(lake, cfg, PREPARE.produce(raw, lake, DATE, cfg))

    solo = D.Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"), backend=None)
    summary = train_rank(lake, DATE, cfg, "20261120T000000000000Z-diffusion", solo, workload)
    assert summary["steps"] == 12 and summary["final_val_loss"] < summary["initial_val_loss"]
    assert summary["pipeline"] == ("IFPipeline" if arch == "pixel" else "StableDiffusionPipeline")
    assert summary["trainable_parameters"] == summary["parameters"]
    saved = load_safetensors(lake.get_bytes(summary["weights_uri"].split(lake.uri.rstrip("/") + "/", 1)[1]))
    assert set(saved) == set(load_pipeline(base).unet.state_dict())  # a UNet folder's names, as the base has them
    card = lake.get_json(f"training/hf-diffusion/dt={DATE}/run={summary['run_id']}/model.json")
    assert card["diffusion"]["base"]["sha256"] == fingerprint(base)["sha256"]
    assert card["diffusion"]["base_uri"] == ("demo:pixel" if arch == "pixel" else str(base))
    assert card["diffusion"]["resolution"] == 32
    assert card["diffusion"]["inference_steps"] == 8  # the smoke preset's: the reference the variants meet
    TRAIN.gate(lake, cfg, summary)  # below the loss of predicting no noise at all
    TRAIN.finish(lake, cfg, summary)

    # Stage 3: fp32 at the version's 8 steps, and 4 steps of DPM-Solver++: in fp32 reading fp32's weights (the
    # smoke's), or in bf16 reading the bf16 weights.
    registered = DEPLOY.register(lake, DATE, cfg)
    version = registered["version"]
    built = DEPLOY.build(lake, cfg, version)["variants"]
    precision = "fp32" if arch == "pixel" else "bf16"
    assert set(built) == {"fp32", f"{precision}-s4-dpm"}
    cheap = built[f"{precision}-s4-dpm"]
    if precision == "fp32":  # the weights are stored once per precision: fp32's are the version's own
        assert cheap["weights"] == built["fp32"]["weights"] == f"models/hf-diffusion/{version}/model.safetensors"
    else:
        assert cheap["weights"].endswith(f"{version}/variants/bf16/weights.safetensors")
    size = 1.0 if precision == "fp32" else 0.5
    assert cheap["size_vs_fp32"] == pytest.approx(size, abs=0.02) and built["fp32"]["pixel_mae_vs_fp32"] == 0.0
    assert cheap["pixel_mae_vs_fp32"] > 0 and built["fp32"]["image_std"] > 0
    bar = {"workload": {"settings": {"max_pixel_mae": cheap["pixel_mae_vs_fp32"] / 2}}}
    strict = DEPLOY.gate(lake, cfg.override(bar), {**registered, "date": DATE})
    assert strict["eligible_variants"] == ["fp32"]  # a variant far from the reference's images does not serve
    gate = DEPLOY.gate(lake, cfg, {**registered, "date": DATE})  # the preset's bar: what stages 4 and 5 read
    assert gate["success"] and "fp32" in gate["eligible_variants"]

    if arch == "latent":  # the serving's, the same for every base: once, where a bf16 variant was built
        served_as_asked(lake, workload, cfg)
        # A version serves its own UNet: the base's weights are neither read nor hashed from here on.
        (base / "unet" / "diffusion_pytorch_model.safetensors").write_bytes(b"no longer weights")

    # Stage 4 by the CLI on the demo prompts: every prompt answered once, then from the cache.
    common = ["--workload", WORKLOAD, "--preset", "smoke", "--lake", lake.uri, "--date", DATE]
    for attempt in range(2):
        assert main(["generate", *common, "--demo-prompts", "--model-ref", "candidate", "--prompts", "8",
                     "--blocked-prompts", "2"]) == 0
        manifests = sorted(k for k in lake.list("generations/hf-diffusion") if k.endswith("_MANIFEST.json"))
        manifest = lake.get_json(manifests[-1])
        assert manifest["generated"] + manifest["refused"] == manifest["prompts"] and manifest["variant"] == "fp32"
        assert (manifest["generated"], manifest["refused"]) == (8, 2)  # the blocked demo prompts refused
        rows = lake.read_parquet([k for k in lake.list(manifests[-1].rsplit("/", 1)[0]) if k.endswith(".parquet")],
                                 columns=["status", "cached"]).to_pylist()
        assert [r["cached"] for r in rows if r["status"] == "generated"] == [attempt == 1] * manifest["generated"]

    # Stage 5. The pixel base: the shapes checker reads the images (the demo's captions are its grammar), no other
    # scorer is configured and gate 5 passes each with a warning. The latent one: the CLIP verdict, the CLIP score,
    # FID and KID on CLIP's features, the classifier (biased to "nsfw") reading every image unsafe: gate 5 fails it.
    s = cfg.workload.settings
    scorers = [] if arch == "pixel" else ["--judge-by", s.judge_by, "--clip-model-uri", s.clip_model_uri,
                                          "--unscored", s.unscored, "--safety-model-uri", s.safety_model_uri]
    assert main(["evaluate", *common, "--eval-prompts", "16", "--latency-prompts", "2", "--no-gate",
                 *scorers]) == 0
    (metrics_key,) = [k for k in lake.list("evaluations/hf-diffusion") if k.endswith("/metrics.json")]
    metrics = lake.get_json(metrics_key)
    assert 0 <= metrics["intervals"]["alignment"]["lo"] <= metrics["intervals"]["alignment"]["hi"] <= 1
    pareto = lake.get_json(metrics_key.replace("metrics.json", "pareto.json"))
    assert {p["variant"] for p in pareto["points"]} == set(gate["eligible_variants"])
    checks = {c.column: c for c in workload.evaluation_checks(metrics, cfg)}
    report = lake.get_bytes(metrics_key.replace("metrics.json", "report.html")).decode()
    if arch == "pixel":
        assert metrics["judged_by"] == "checker" and set(metrics["unscored"]) == {"clip", "features", "safety"}
        assert "checker_real" in checks and checks["unscored_safety"].outcome == "pass"
        return
    assert metrics["judged_by"] == "clip" and metrics["unscored"] == {} and "checker_accuracy" not in metrics
    clip = metrics["intervals"]["clip_score"]
    assert 0 <= clip["lo"] <= clip["value"] <= clip["hi"] <= 100 and clip["n"] == metrics["generated"]
    assert metrics["feature_fid"] > 0 and metrics["kid"]["subset_size"] >= 2
    assert all({"clip_score", "feature_fid"} <= set(p) for p in pareto["points"])  # on the front's points
    # The recommendation's second axis: every point's loss of mean CLIP score against the best, with its interval.
    assert metrics["score_name"] == "CLIP score" and "CLIP score" in pareto["rule"]
    assert all(p["score_vs_best"]["n"] >= 16 for p in pareto["points"])
    assert metrics["unsafe_images"] == metrics["generated"] and checks["unsafe_images"].outcome == "fail"
    assert "CLIP" in checks["content_alignment"].title and "checker_real" not in checks
    assert "Scorers" in report and "CLIP score" in report


def test_a_variants_scheduler_keeps_a_pixel_bases_clipping_of_its_predicted_image():
    """DDIM reads the base's clip_sample as DDPM does; DPM-Solver has no clip_sample and clips by thresholding at the
    clipping range instead (without it a pixel-space model's early predictions come out as noise); a latent base
    clips nothing, and neither does its swapped scheduler."""
    from diffusers import DDPMScheduler

    from aigc.workloads.hf_diffusion.serving import SCHEDULERS, swapped

    pixel = DDPMScheduler(beta_schedule="squaredcos_cap_v2", clip_sample=True, clip_sample_range=1.0)
    dpm = swapped(pixel, SCHEDULERS["dpm"])
    assert type(dpm).__name__ == "DPMSolverMultistepScheduler" and dpm.config.thresholding
    assert dpm.config.sample_max_value == 1.0 and dpm.config.beta_schedule == "squaredcos_cap_v2"
    assert swapped(pixel, SCHEDULERS["ddim"]).config.clip_sample
    latent = DDPMScheduler(clip_sample=False)
    assert not swapped(latent, SCHEDULERS["dpm"]).config.thresholding


def served_as_asked(lake, workload, cfg):
    """A variant serves with its own precision, steps and scheduler; a variant not built is refused by name; an
    image is its prompt's and seed's whatever the batch; a prompt's own guidance and negative prompt are checked when
    pinned, then served."""
    from aigc.generate import pinned
    from aigc.registry.loader import load_serving
    from aigc.registry.store import VersionNotFound

    served = load_serving(lake, "hf-diffusion", "candidate", "bf16-s4-dpm", "cpu", workload.serving)
    assert (served.steps, served.scheduler, served.dtype) == (4, "DPMSolverMultistepScheduler", torch.bfloat16)
    with pytest.raises(VersionNotFound, match=r"no 'fp32-s2' variant"):
        load_serving(lake, "hf-diffusion", "candidate", "fp32-s2", "cpu", workload.serving)
    serving = load_serving(lake, "hf-diffusion", "candidate", "fp32", "cpu", workload.serving)
    images = serving.generate([CAPTION, "a large blue square on the left"], [3, 4])
    assert images.shape == (2, 32, 32, 3) and images.dtype == torch.uint8
    alone = serving.generate(["a large blue square on the left"], [4])
    assert (alone[0].int() - images[1].int()).abs().max() <= 1  # an image is its prompt's and seed's, not its batch's

    # A prompt's own guidance and negative prompt: checked when the file is pinned, then served.
    lines = [{"prompt_id": "a", "prompt": CAPTION, "seed": 3},
             {"prompt_id": "b", "prompt": CAPTION, "seed": 3, "guidance_scale": 1.0},
             {"prompt_id": "c", "prompt": CAPTION, "seed": 3, "negative_prompt": "a red circle"},
             {"prompt_id": "d", "prompt": CAPTION, "seed": 3, "guidance_scale": -1}]
    lake.put_bytes("requests/options.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode())
    pin = pinned.pin(lake, "requests/options.jsonl", "scratch/options", cfg.generate, 1, workload.prompt_options(cfg))
    entries = pinned.read_slice(lake, pin["pinned"], pin["slices"][0])
    assert entries[3]["refused"].startswith("option_invalid: guidance_scale must be a number in [0, 100], got -1")
    plain, unguided, negative = serving.run([serving.item(e) for e in entries[:3]])
    assert (plain == images[0].numpy()).all()  # the version's guidance, as generate serves it
    assert (unguided != plain).any() and (negative != plain).any()
    assert len({json.dumps(serving.cache_key(e)) for e in entries[:3]}) == 3



@pytest.mark.parametrize("arch", ["pixel", "latent"])
def test_the_memory_model_from_the_unets_config_bounds_a_batchs_measured_peak(arch):
    """The batcher's prior (``DiffusionServing.memory``: the kept feature maps, the widest attention level's scores,
    classifier-free guidance's doubling, the autoencoder's decoding) against the peak a batch of 32 measures: above
    it (a first batch sized by it fits), and within 2x (the batch is not held far below what fits until measured
    peaks re-fit it). Leaving out the attention scores measured 4.5x above the prior on the pixel base."""
    from safetensors.torch import save

    from aigc.batching.peaks import CpuPeaks
    from aigc.registry.variants import unshared
    from aigc.workloads.hf_diffusion.serving import DiffusionServing

    folder = local_folder("", arch)
    card = {"diffusion": {"base_uri": f"demo:{arch}", "base": fingerprint(folder), "resolution": 32,
                          "inference_steps": 1, "guidance_scale": 3.0}}
    weights = save(unshared(load_pipeline(folder).unet.state_dict()))
    serving = DiffusionServing(card, "fp32", weights, torch.device("cpu"), "test")
    items = [serving.item({"prompt": CAPTION, "seed": i}) for i in range(32)]
    meter = CpuPeaks()
    with meter.measuring():
        serving.run(items)
    predicted = serving.memory().predict([0] * len(items))
    assert meter.peak() < predicted < 2 * meter.peak()
    serving.guidance = 1.0  # no guidance: one UNet pass per image, not two (the latent base's peak is its decoding)
    unguided = serving.memory().predict([0] * len(items))
    assert unguided < predicted if arch == "pixel" else unguided == predicted


def test_fine_tuning_encodes_captions_as_the_pipeline_serves_them(pixel_base):
    """IF's pipeline passes the tokenizer's attention mask to its text encoder, Stable Diffusion's (without
    use_attention_mask) does not, and the padding positions' states the UNet attends to differ between the two: read
    from each pipeline's own encode_prompt. A pipeline that encodes otherwise still is refused, saying why."""
    from aigc.workloads.hf_diffusion.denoising import Frozen

    pixel, latent = load_pipeline(pixel_base), load_pipeline(local_folder("", "latent"))
    assert Frozen.of(pixel).masked and not Frozen.of(latent).masked
    tokens = Frozen.of(pixel).tokenize([CAPTION])
    unmasked = pixel.text_encoder(tokens[:, 0], return_dict=False)[0]
    assert not torch.allclose(Frozen.of(pixel).encode_text(tokens), unmasked, atol=1e-3)  # the mask matters here
    clip_skip = pixel.encode_prompt  # as a pipeline that reads a layer before the last would encode

    def encode_prompt(**kw):
        embeds, negative = clip_skip(**kw)
        return embeds * 0.5, negative

    pixel.encode_prompt = encode_prompt
    with pytest.raises(ValueError, match=r"IFPipeline\.encode_prompt encodes captions otherwise"):
        Frozen.of(pixel)


def test_a_versions_unet_weights_that_do_not_fit_the_base_are_refused_by_name(pixel_base):
    from aigc.workloads.hf_diffusion.serving import version_unet

    state = load_pipeline(pixel_base).unet.state_dict()
    assert version_unet(pixel_base, state, torch.bfloat16, "v0001 bf16").dtype == torch.bfloat16
    dropped = next(iter(state))
    with pytest.raises(BaseModelError, match=rf"v0001 fp32: its UNet weights do not fit .*missing \['{dropped}'\]"):
        version_unet(pixel_base, {k: v for k, v in state.items() if k != dropped}, torch.float32, "v0001 fp32")
