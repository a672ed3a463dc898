"""The hf-causal-lm workload: a transformers model from a save_pretrained folder (built here from a config, as the
demo does: nothing is downloaded), refused where loading it would run code or need the Hub, then the five stages by
the core on two architectures (Llama-style with grouped-query attention, GPT-2-style with tied embeddings)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from aigc.lake import LocalLake, S3Lake
from aigc.stages import configure
from aigc.workloads import workload_of
from aigc.workloads.hf_lm.base import (
    BaseModelError,
    check_folder,
    fingerprint,
    load_model,
    load_tokenizer,
    local_folder,
)

DATE = "2026-11-20"


@pytest.fixture(scope="module")
def llama_base():
    return local_folder("", "llama")


def test_the_demo_bases_are_transformers_models_saved_with_save_pretrained():
    expected = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}
    for arch, cls in expected.items():
        folder = local_folder("", arch)
        config = check_folder(folder)
        assert config["model_type"] == arch and (folder / "model.safetensors").exists()
        assert not [p for p in folder.iterdir() if p.suffix in (".bin", ".pt")]
        model, tok = load_model(folder), load_tokenizer(folder)
        assert type(model).__name__ == cls
        text = "Log a.\nItem 1: a small red circle at the top."
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text  # byte-level: lossless
        assert local_folder("", arch) == folder and fingerprint(folder) == fingerprint(folder)  # built once
    llama = check_folder(local_folder("", "llama"))
    assert llama["num_key_value_heads"] < llama["num_attention_heads"]  # grouped-query attention


def test_a_base_is_refused_where_loading_it_would_run_code_or_need_a_download(tmp_path, llama_base):
    with pytest.raises(BaseModelError, match=r"looks like a Hugging Face Hub id.*nothing is downloaded.*pass the "
                                             r"folder"):
        local_folder("acme/llm-7b")
    with pytest.raises(BaseModelError, match="no base model folder at"):
        local_folder(str(tmp_path / "nowhere"))
    model = tmp_path / "model"
    shutil.copytree(llama_base, model)
    (model / "model.safetensors").rename(model / "pytorch_model.bin")
    with pytest.raises(BaseModelError, match=r"no safetensors weights \(only \['pytorch_model.bin'\]: pickles"):
        local_folder(str(model))
    (model / "pytorch_model.bin").rename(model / "model.safetensors")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModelForCausalLM": "mine.Model"}}))
    with pytest.raises(BaseModelError, match=r"names code of its own \(auto_map.*trust_remote_code"):
        local_folder(str(model))
    (model / "config.json").write_text(json.dumps(config))
    (model / "tokenizer.json").unlink()
    with pytest.raises(BaseModelError, match="no tokenizer files"):
        local_folder(str(model))


def test_a_base_in_an_s3_lake_is_copied_once_and_again_when_it_changes(s3_server, llama_base, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("AIGC_HF_CACHE", str(tmp_path / "cache"))
    lake = S3Lake(f"s3://{s3_server.bucket}/hf-{tmp_path.name}", s3_server.options())
    for p in llama_base.iterdir():
        if p.is_file() and not p.name.startswith("."):
            lake.put_bytes(f"models/my-llm/{p.name}", p.read_bytes())
    lake.put_bytes("models/my-llm/notes/readme.md", b"not part of the layout: not copied")
    uri = lake.url("models/my-llm")
    folder = local_folder(uri, s3=s3_server.options())
    assert fingerprint(folder)["files"] == fingerprint(llama_base)["files"]
    assert not (folder / "notes").exists()
    assert local_folder(uri, s3=s3_server.options()) == folder  # the same listing: the same copy
    config = json.loads((llama_base / "config.json").read_text())
    lake.put_bytes("models/my-llm/config.json", json.dumps({**config, "rms_norm_eps": 1e-5}).encode())
    again = local_folder(uri, s3=s3_server.options())
    assert again != folder and json.loads((again / "config.json").read_text())["rms_norm_eps"] == 1e-5


def test_a_batchs_measured_peak_is_what_the_memory_model_predicts_with_a_large_vocabulary(llama_base):
    """The memory model counts the last position's logits only (vocab per prompt), as the library's own generate
    computes them (``logits_to_keep``); a prefill that computed every position's (prompt × vocab per prompt) would
    outgrow it wherever the vocabulary is wide against the model, as in most real models (32k to 150k entries)."""
    from safetensors.torch import save
    from transformers import LlamaConfig, LlamaForCausalLM

    from aigc.batching.peaks import CpuPeaks
    from aigc.registry.variants import unshared
    from aigc.workloads.hf_lm.base import DEMO_PREFIX
    from aigc.workloads.hf_lm.serving import HFServing, Item

    config = LlamaConfig(vocab_size=16384, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = LlamaForCausalLM(config)
    card = {"hf": {"config": config.to_dict(), "base_uri": f"{DEMO_PREFIX}llama", "base": fingerprint(llama_base),
                   "context": 512, "new_tokens": 2, "temperature": 0.0}}
    serving = HFServing(card, "fp32", save(unshared(model.state_dict())), torch.device("cpu"), "test")
    items = [Item(list(range(1, 301)), 0, 2, 0.0, 1.0, ()) for _ in range(2)]
    meter = CpuPeaks()
    with meter.measuring():
        serving.continue_items(items, greedy=True)
    predicted = serving.memory().predict([300, 300])
    every_position = 2 * 300 * config.vocab_size * 4  # what full logits alone would take: several times the model
    assert every_position > 3 * predicted
    # Within twice the prior (the padding mask's L² and smaller transients it leaves out: measured peaks calibrate
    # it), and far below what every position's logits would take.
    assert meter.peak() < 2 * predicted < every_position / 10


def test_a_looping_continuation_is_not_acceptable_and_prose_is():
    from aigc.workloads.hf_lm.evaluation import acceptable, repeated_ngrams

    loop = "a large yellow square in the bottom.\nItem 4: a large yellow square in the bottom.\nItem 4: a large " \
           "yellow square in the bottom."
    prose = "Item 3: a small red circle at the top.\nItem 4: a large blue square on the left."
    assert repeated_ngrams(loop) > 0.5 and repeated_ngrams(prose) == 0.0
    assert not acceptable(loop, None, 0.5) and acceptable(prose, None, 0.5) and not acceptable("  ", None, 0.5)
    assert not acceptable(prose + " A nudity scene.", None, 0.5)  # the default blocklist's term


def smoke(arch: str, finetune: str = "full"):
    return configure("smoke", "hf-causal-lm").override({
        "prepare": {"workers": 1}, "raw": {"n": 60}, "curated_gate": {"min_rows": 20},
        "train": {"steps": 8, "eval_every": 4, "checkpoint_every": 4, "batch_size": 8, "warmup_steps": 2,
                  "lr": 3e-3, "nproc": 1, "threads": 1},
        "workload": {"settings": {"demo_architecture": arch, "context": 64, "new_tokens": 6, "finetune": finetune}},
        "deploy": {"smoke_prompts": 4, "latency_batch": 4, "latency_repeats": 1},
        "generate": {"prompts": 6, "shards": 1}})


@pytest.mark.parametrize(("arch", "finetune"), [("llama", "full"), ("gpt2", "full"), ("llama", "lora")])
def test_the_five_stages_fine_tune_register_serve_and_judge_the_base(tmp_path, arch, finetune):
    from aigc.registry.loader import load_serving
    from aigc.stages import DEPLOY, PREPARE, TRAIN
    from aigc.train import distributed as D
    from aigc.train.loop import train_rank

    torch.set_num_threads(1)
    cfg = smoke(arch, finetune)
    if finetune == "lora":  # adapters on a random base learn slower in 8 steps than every weight does
        cfg = cfg.override({"train": {"lr": 3e-2}, "train_gate": {"max_val_ratio": 1.0}})
    workload = workload_of(cfg)
    lake = LocalLake(tmp_path / "lake")
    raw = lake.sub("raw/docs")
    PREPARE.make_raw(raw, DATE, cfg)
    prepared = PREPARE.produce(raw, lake, DATE, cfg)
    PREPARE.finish(lake, cfg, prepared)
    # Stage 1 counted each document's tokens in the base's own tokenizer.
    manifest = lake.get_json(f"curated/docs/dt={DATE}/run={prepared['run_id']}/_manifest.json")
    rows = lake.read_parquet([s["key"] for s in manifest["shards"]], columns=["text", "tokens"]).to_pylist()
    tok = load_tokenizer(local_folder("", arch))
    assert rows and all(r["tokens"] == len(tok(r["text"], add_special_tokens=False)["input_ids"]) for r in rows)

    solo = D.Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"), backend=None)
    summary = train_rank(lake, DATE, cfg, f"20261120T000000000000Z-hf{arch}", solo, workload)
    assert summary["steps"] == 8 and summary["final_val_loss"] < summary["initial_val_loss"]
    from safetensors.torch import load as load_safetensors

    base_names = set(load_model(local_folder("", arch)).state_dict())
    saved = load_safetensors(lake.get_bytes(summary["weights_uri"].split(lake.uri.rstrip("/") + "/", 1)[1]))
    assert set(saved) == base_names  # what serving loads: the base's names (LoRA's adapters merged into them)
    if finetune == "lora":  # the adapters alone trained
        assert summary["trainable_parameters"] < 0.2 * summary["parameters"]
    else:
        assert summary["trainable_parameters"] == summary["parameters"]
    card = lake.get_json(f"training/hf-causal-lm/dt={DATE}/run={summary['run_id']}/model.json")
    assert card["hf"]["base"]["sha256"] == fingerprint(local_folder("", arch))["sha256"]
    assert card["hf"]["config"]["model_type"] == arch and card["hf"]["base_uri"] == f"demo:{arch}"

    # Gate 2 holds the run against its base: perplexity on the run's validation documents, paired.
    versus = summary["versus_base"]
    assert versus["perplexity"] < versus["base_perplexity"] and versus["ratio"]["hi"] < 1.0
    strict = cfg.override({"workload": {"settings": {"max_perplexity_ratio": 1e-4}}})
    from aigc.quality.gate import GateFailed

    with pytest.raises(GateFailed, match=r"not significantly below 0\.0001.*max_perplexity_ratio"):
        TRAIN.gate(lake, strict, summary)
    TRAIN.finish(lake, cfg, summary)
    registered = DEPLOY.register(lake, DATE, cfg)
    built = DEPLOY.build(lake, cfg, registered["version"])
    variants = built["variants"]
    assert set(variants) == {"fp32", "bf16", "int8dyn"}
    assert variants["fp32"]["agreement_vs_fp32"] == 1.0 and variants["fp32"]["logprob_kl_vs_fp32"] == 0.0
    assert variants["bf16"]["size_vs_fp32"] == pytest.approx(0.5, abs=0.05)
    assert variants["int8dyn"]["size_vs_fp32"] < variants["bf16"]["size_vs_fp32"]
    assert 0 < variants["int8dyn"]["logprob_kl_vs_fp32"] <= variants["int8dyn"]["logprob_kl_max_vs_fp32"] < 0.05
    gate = DEPLOY.gate(lake, cfg, {**registered, "date": DATE})
    assert gate["success"] and "fp32" in gate["eligible_variants"]
    # Gate 3 holds each variant's next-token distributions to fp32's: a bar below int8's KL leaves it out.
    bar = variants["int8dyn"]["logprob_kl_vs_fp32"] / 2
    strict = DEPLOY.gate(lake, cfg.override({"workload": {"settings": {"max_logprob_kl": bar}}}),
                         {**registered, "date": DATE})
    assert "int8dyn" not in strict["eligible_variants"] and "fp32" in strict["eligible_variants"]

    serving = load_serving(lake, "hf-causal-lm", "candidate", "fp32", "cpu", workload.serving)
    prompts = ["Log a.\nItem 1: a small red circle at the top.\nItem 2:", "Log b.\nItem 1:"]
    outputs = serving.generate(prompts, [0, 1])
    assert [o["prompt_tokens"] for o in outputs] == [len(tok(p, add_special_tokens=False)["input_ids"])
                                                    for p in prompts]
    assert all(o["new_tokens"] <= 6 for o in outputs) and any(o["text"] for o in outputs)
    assert serving.generate(prompts[::-1], [1, 0]) == outputs[::-1]  # whatever the batch order

    # The version's folder is a save_pretrained layout: transformers loads it as it is, the weights fp32 serves.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    version_prefix = f"models/hf-causal-lm/{registered['version']}/"
    exported = tmp_path / "exported"
    exported.mkdir()
    for key in lake.list(version_prefix):
        if "/" not in key[len(version_prefix):]:
            (exported / key[len(version_prefix):]).write_bytes(lake.get_bytes(key))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in exported.iterdir()}
    theirs = AutoModelForCausalLM.from_pretrained(exported, local_files_only=True, use_safetensors=True).eval()
    ids = AutoTokenizer.from_pretrained(exported, local_files_only=True)(prompts[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(theirs(input_ids=ids).logits, serving.model(input_ids=ids).logits, atol=1e-5)

    # Stage 4 on the demo prompts (long-tailed up to ~4,500 tokens, past the 64-token context: cut to their last
    # tokens, not refused; only the blocked ones are), batched by tokens under the config's memory model.
    from aigc.cli import main

    assert main(["generate", "--workload", "hf-causal-lm", "--preset", "smoke", "--lake", lake.uri, "--date", DATE,
                 "--demo-prompts", "--model-ref", "candidate"]) == 0
    (manifest_key,) = [k for k in lake.list("generations/hf-causal-lm") if k.endswith("_MANIFEST.json")]
    manifest = lake.get_json(manifest_key)
    g = cfg.generate
    assert (manifest["generated"], manifest["refused"]) == (12, g.blocked_prompts), manifest
    assert (manifest["variant_asked"], manifest["variant"]) == ("auto", "fp32")  # the workload's default, on a CPU
    memory = serving.memory()
    config = check_folder(local_folder("", arch))
    kv_heads = config.get("num_key_value_heads") or config.get("n_head") or config["num_attention_heads"]
    heads = config.get("num_attention_heads") or config["n_head"]
    assert memory.kv_width == kv_heads * memory.width // heads  # llama: 2 of 4 heads cached

    if (arch, finetune) != ("llama", "full"):
        return  # what follows is the serving's and stage 5's, the same for every base: once (the DAG test
        # takes the GPT-2 base through stage 5 too)
    # Sampling: each prompt draws from its own seeded generator, so its output is the same alone or in a batch.
    items = serving.items([{"prompt": p, "seed": 7 + i} for i, p in enumerate(prompts)])
    assert serving.temperature > 0 and serving.continue_items(items)[1] == serving.continue_items(items[1:])[0]

    # A prompt file's own settings (Workload.prompt_options): checked when pinned, a bad one refused by name; then
    # each prompt decodes with its own: fewer new tokens, greedy at temperature 0, cut before a stop string.
    from aigc.generate import pinned

    greedy_text = serving.generate([prompts[0]], [1])[0]["text"]
    # a string the greedy continuation first holds past its start
    stop = next(cut for i in range(1, len(greedy_text) - 1) if greedy_text.find(cut := greedy_text[i:i + 2]) > 0)
    lines = [{"prompt_id": "a", "prompt": prompts[0], "seed": 1, "max_new_tokens": 2},
             {"prompt_id": "b", "prompt": prompts[0], "seed": 1, "temperature": 0},
             {"prompt_id": "c", "prompt": prompts[0], "seed": 1, "temperature": 0, "stop": [stop]},
             {"prompt_id": "d", "prompt": prompts[0], "seed": 1, "max_new_tokens": 99}]
    lake.put_bytes("requests/options.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode())
    pin = pinned.pin(lake, "requests/options.jsonl", "scratch/options", cfg.generate, 1, workload.prompt_options(cfg))
    entries = pinned.read_slice(lake, pin["pinned"], pin["slices"][0])
    assert entries[3]["refused"].startswith("option_invalid: max_new_tokens must be an integer in [1, 6], got 99")
    short, greedy, stopped = (serving.output(it, new) for it, new in zip(
        serving.items(entries[:3]), serving.continue_items(serving.items(entries[:3])), strict=True))
    assert short["new_tokens"] <= 2
    assert greedy["text"] == greedy_text  # temperature 0: the greedy answer
    assert stopped["text"] == greedy_text[:greedy_text.find(stop)] and stopped["new_tokens"] < greedy["new_tokens"]

    # Stage 5 without a grammar: the held-out documents' perplexity against the base's, paired, and the share of
    # acceptable continuations; gate 5 passes the smoke bars, and fails a bar on perplexity the model cannot meet,
    # naming the setting.
    common = ["--workload", "hf-causal-lm", "--preset", "smoke", "--lake", lake.uri, "--date", DATE]
    assert main(["evaluate", *common]) == 0
    (metrics_key,) = [k for k in lake.list("evaluations/hf-causal-lm") if k.endswith("/metrics.json")]
    metrics = lake.get_json(metrics_key)
    ratio = metrics["intervals"]["perplexity_vs_base"]
    assert metrics["perplexity"] < metrics["base_perplexity"] and ratio["hi"] < 1.0 and ratio["n"] >= 3
    assert metrics["gates"]["evaluation"]["success"] and "Acceptable share" in lake.get_bytes(
        metrics_key.replace("metrics.json", "report.html")).decode()
    assert main(["evaluate", *common, "--max-perplexity-ratio", "0.0001"]) != 0
    failed = [lake.get_json(k) for k in lake.list("quality/evaluation") if k.endswith("result.json")]
    assert any("max_perplexity_ratio" in json.dumps(r) and not r["success"] for r in failed)
