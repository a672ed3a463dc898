"""Configuration: a bad value is refused with a message that says how to fix it."""

import dataclasses
import re

import pytest

from aigc.config import (
    CuratedGateThresholds,
    PipelineConfig,
    PrepareConfig,
    RawDropConfig,
    TrainConfig,
    preset,
)
from aigc.workloads.image import IMAGE
from aigc.workloads.image.config import RESOLUTIONS, ImageSettings


@pytest.mark.parametrize(("cls", "field", "value", "allowed"), [
    (RawDropConfig, "n", 0, "[1, 50000000]"),
    (RawDropConfig, "n", 50_000_001, "[1, 50000000]"),
    (RawDropConfig, "dirt_rate", 1.5, "[0.0, 1.0]"),
    (RawDropConfig, "dirt_rate", -0.01, "[0.0, 1.0]"),
    (RawDropConfig, "records_per_file", 0, "[1, 10000000]"),
    (PrepareConfig, "near_dup_threshold", 0.01, "[0.05, 1.0]"),
    (PrepareConfig, "near_dup_num_perm", 8, "[16, 1024]"),
    (PrepareConfig, "shard_target_bytes", 1024, "[65536, 4294967296]"),
    (PrepareConfig, "row_group_rows", 15, "[16, 1000000]"),
    (PrepareConfig, "workers", -1, "[0, 256]"),
    (PrepareConfig, "window", 10, "[16, 1000000]"),
    (CuratedGateThresholds, "min_rows", -5, "[0, 1099511627776]"),
    (CuratedGateThresholds, "max_quarantine_ratio", 1.01, "[0.0, 1.0]"),
    (CuratedGateThresholds, "max_reason_ratio", -0.1, "[0.0, 1.0]"),
])
def test_out_of_range_values_name_the_field_the_range_and_the_value(cls, field, value, allowed):
    expected = f"{cls.__name__}.{field} must be in {allowed}, got {value!r}"
    flag = f"--{field.replace('_', '-')} on `aigc "  # and where to change it
    with pytest.raises(ValueError, match=f"^{re.escape(expected)} \\(set with .*{re.escape(flag)}.*\\)$"):
        cls(**{field: value})


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("min_caption_chars", 0, "[1, 100000]"),
    ("max_caption_chars", 100_001, "[1, 100000]"),
    ("min_side", 0, "[1, 65536]"),
    ("max_side", 70_000, "[1, 65536]"),
    ("max_image_pixels", 0, "[1, 2147483648]"),
    ("max_image_bytes", 1 << 32, "[1, 2147483648]"),
    ("near_dup_image_distance", 256.0, "[0.0, 255.0]"),
    ("max_fid", -1.0, "[0.0, 1000000000.0]"),
])
def test_the_image_workloads_own_settings_name_the_flag_and_the_form_field_that_set_them(field, value, allowed):
    expected = (f"ImageSettings.{field} must be in {allowed}, got {value!r} (set with --{field.replace('_', '-')} on "
                "the `aigc` commands that take it with --workload image, the trigger form's 'settings' field "
                f'({{"{field}": …}}), or workload.settings.{field} in a preset)')
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        ImageSettings(**{field: value})


@pytest.mark.parametrize(("cls", "field", "value"), [(ImageSettings, "max_side", 4), (ImageSettings, "min_side", 5000),
                                                     (ImageSettings, "max_caption_chars", 2)])
def test_a_min_above_its_max_names_both_fields_and_the_value_given(cls, field, value):
    # The user set only one of the pair: the message must name it and the value they gave.
    with pytest.raises(ValueError) as err:
        cls(**{field: value})
    assert f"{cls.__name__}.{field} ({value})" in str(err.value) and "must not exceed" in str(err.value)


@pytest.mark.parametrize("resolution", [0, 33, 512])
def test_resolution_must_be_one_of_the_supported_sides(resolution):
    expected = f"ImageSettings.resolution must be one of {RESOLUTIONS}, got {resolution}"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)} \\(set with --resolution "):
        ImageSettings(resolution=resolution)


def test_nan_is_refused():
    with pytest.raises(ValueError, match=r"RawDropConfig\.dirt_rate .* got nan"):
        RawDropConfig(dirt_rate=float("nan"))


def test_the_bounds_are_inclusive():
    RawDropConfig(n=1, dirt_rate=1.0, records_per_file=1)
    PrepareConfig(near_dup_num_perm=1024, workers=256)
    ImageSettings(min_caption_chars=512, max_caption_chars=512, min_side=32, max_side=32, max_image_pixels=1 << 31,
                  max_fid=0.0)
    CuratedGateThresholds(min_rows=0, max_quarantine_ratio=0.0, max_reason_ratio=1.0)


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PrepareConfig().workers = 3


# --- PipelineConfig.override ----------------------------------------------------------------------

def test_override_returns_a_new_config_and_leaves_the_old_one_alone():
    base = PipelineConfig()
    new = base.override({"raw": {"n": 500, "seed": 3}, "curated_gate": {"min_rows": 10}})
    assert (new.raw.n, new.raw.seed, new.curated_gate.min_rows) == (500, 3, 10)
    assert new.prepare == base.prepare and new.raw.dirt_rate == base.raw.dirt_rate
    assert (base.raw.n, base.raw.seed, base.curated_gate.min_rows) == (20_000, 0, 1000)
    assert base == PipelineConfig()
    assert base.override({}) == base


def test_override_validates_the_new_values():
    with pytest.raises(ValueError, match=r"PrepareConfig\.workers must be in \[0, 256\], got 999"):
        PipelineConfig().override({"prepare": {"workers": 999}})


def test_override_rejects_an_unknown_field_listing_the_known_ones():
    with pytest.raises(ValueError) as err:
        PipelineConfig().override({"raw": {"n": 5, "colour": "red", "size": 3}})
    known = sorted(f.name for f in dataclasses.fields(RawDropConfig))
    assert str(err.value) == f"unknown raw setting(s) ['colour', 'size']; known: {known}"


def test_override_rejects_an_unknown_section_listing_the_known_ones():
    with pytest.raises(ValueError) as err:
        PipelineConfig().override({"serve": {"epochs": 3}})
    message = str(err.value)
    assert "'serve'" in message
    for section in ("raw", "prepare", "curated_gate", "model", "train", "train_gate", "generate", "evaluate"):
        assert section in message, f"the message should list the known sections: {message}"


def test_to_dict_round_trips_through_override():
    cfg = preset("demo")
    assert PipelineConfig().override(cfg.to_dict()) == cfg


# --- presets -------------------------------------------------------------------------------------

def test_default_preset_is_the_default_config():
    assert preset("default") == PipelineConfig()


def test_demo_preset_is_small_and_differs_only_where_documented():
    demo, default = preset("demo"), PipelineConfig()
    assert (demo.raw.n, demo.prepare.workers, demo.curated_gate.min_rows) == (2_000, 2, 500)
    assert demo.raw.n < default.raw.n and demo.curated_gate.min_rows < default.curated_gate.min_rows
    assert demo.curated_gate.min_rows <= demo.raw.n  # a clean demo drop can pass its gate
    assert demo.generate.prompts < default.generate.prompts
    assert (demo.raw.drop, default.raw.drop) == ("synthetic", "producer")  # only a demo writes its own drop
    assert demo.override({"raw": {"n": default.raw.n, "drop": "producer"}, "prepare": {"workers": 0},
                          "curated_gate": {"min_rows": 1000},
                          "train": {"steps": 1500, "eval_every": 250, "checkpoint_every": 250},
                          "generate": {"prompts": 512, "shards": 4}}) == default


def test_smoke_preset_is_the_demo_at_check_size_with_lowered_quality_bars_only():
    smoke, demo = preset("smoke"), preset("demo")
    assert smoke.raw.n == 300 and smoke.curated_gate.min_rows <= smoke.raw.n
    assert smoke.train.steps == 40 and smoke.train.checkpoint_every <= smoke.train.steps
    assert smoke.deploy_gate == demo.deploy_gate and smoke.generate_gate == demo.generate_gate
    assert smoke.override({"raw": {"n": 2_000}, "curated_gate": {"min_rows": 500},
                           "train": {"steps": 1500, "eval_every": 500, "checkpoint_every": 500},
                           "train_gate": {"max_final_val_loss": demo.train_gate.max_final_val_loss,
                                          "max_imbalance": demo.train_gate.max_imbalance},
                           "deploy": dataclasses.asdict(demo.deploy),
                           "generate": {"prompts": 128},
                           "evaluate": dataclasses.asdict(demo.evaluate),
                           "evaluate_gate": {"min_alignment": demo.evaluate_gate.min_alignment,
                                             "max_regression": demo.evaluate_gate.max_regression}}) == demo


def test_an_unknown_preset_names_the_choices():
    expected = "unknown preset 'nope'; choose one of ['default', 'demo', 'smoke']"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        preset("nope")


@pytest.mark.parametrize("field, value, fragment", [
    ("precision", "fp8", "TrainConfig.precision must be one of"),
    ("grad_compression", "int4", "TrainConfig.grad_compression must be one of"),
    ("steps", 0, "TrainConfig.steps must be in [1,"),
    ("nnodes", "two", "TrainConfig.nnodes must be N or MIN:MAX"),
])
def test_train_config_names_the_bad_field_and_value(field, value, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        TrainConfig(**{field: value})


def test_several_nodes_meet_at_an_endpoint_or_through_the_lake():
    assert TrainConfig(nnodes="2", rdzv_endpoint="10.0.0.1:29400").nnodes == "2"
    assert TrainConfig(nnodes=3).nnodes == "3" and TrainConfig(nnodes=3).max_nodes == 3  # from the form: a number
    assert TrainConfig(nnodes="1:4").max_nodes == 4
    with pytest.raises(ValueError, match="nnodes must be N or MIN:MAX"):
        TrainConfig(nnodes="0")


def test_the_global_batch_must_split_over_ranks_and_accumulation():
    cfg = TrainConfig(batch_size=64, grad_accum=2)
    assert cfg.micro_batch(2) == 16 and cfg.micro_batch(1) == 32
    expected = "batch_size=64 does not split over 3 rank(s) × grad_accum=2; use a multiple of 6"
    with pytest.raises(ValueError, match=re.escape(expected)):
        cfg.micro_batch(3)


def test_model_resolution_and_heads_are_checked():
    with pytest.raises(ValueError, match="ImageSettings.resolution must be one of"):
        ImageSettings(resolution=48)
    with pytest.raises(ValueError, match="multiple of 4"):
        ImageSettings(text_dim=30)


def test_the_form_table_maps_a_runs_values_onto_the_config_and_knows_its_stages():
    from aigc.config import preset
    from aigc.config.form import FORM, config_changes, fields_of

    changes = config_changes({"preset": "smoke", "n_records": 64, "train_steps": 7, "synthetic_drop": False,
                              "prompts_uri": "requests/x.jsonl", "model_ref": None, "min_alignment": 0.5,
                              "settings": {"resolution": 64}})
    assert changes == {"raw": {"n": 64}, "train": {"steps": 7}, "evaluate_gate": {"min_alignment": 0.5},
                       "workload": {"settings": {"resolution": 64}}}  # switches and empty values set nothing
    cfg = preset("smoke", IMAGE).override(changes)
    assert (cfg.raw.n, cfg.train.steps, cfg.evaluate_gate.min_alignment) == (64, 7, 0.5)
    assert cfg.workload.settings == ImageSettings(resolution=64, reference_seeds=1, max_fid=100.0,
                                                 min_checker_accuracy=0.9)  # smoke's own
    assert {f.stage for f in fields_of(["train"])} == {"train"}
    assert "model_ref" not in {f.param for f in fields_of(["prepare", "train", "deploy", "generate", "evaluate"])}
    assert len({f.param for f in FORM}) == len(FORM)
    with pytest.raises(ValueError, match="unknown stage"):
        fields_of(["publish"])


def test_a_workloads_own_settings_are_typed_merged_and_checked_by_its_class():
    from aigc.stages import configure
    from aigc.workloads.text.config import TextSettings

    demo = configure("demo", "text")
    assert isinstance(demo.workload.settings, TextSettings) and demo.workload.settings.context == 4096  # its preset
    changed = demo.override({"workload": {"settings": {"context": 2048}}})
    own = changed.workload.settings
    assert (own.context, own.layers) == (2048, demo.workload.settings.layers)
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['contxt'\] of workload 'text'; known: .*'context'"):
        demo.override({"workload": {"settings": {"contxt": 2048}}})
    with pytest.raises(ValueError, match=r"TextSettings.layers must be in \[1, 64\], got 0 \(set with --layers on the "
                                         r"`aigc` commands that take it with --workload text, the trigger form's "
                                         r"'settings' field"):
        demo.override({"workload": {"settings": {"layers": 0}}})
    with pytest.raises(ValueError, match="holds no settings of workload None to change with \\['context'\\]"):
        preset("demo").override({"workload": {"settings": {"context": 2048}}})
    assert PipelineConfig().override({"workload": {"settings": {}}}).workload.settings is None


def test_the_cli_offers_the_chosen_workloads_own_flags_and_sets_its_settings_with_them():
    from aigc import cli
    from aigc.workloads import load_workload

    text = cli.build_parser(load_workload("text"))
    args = text.parse_args(["train", "--workload", "text", "--date", "2026-11-20", "--context", "2048"])
    assert cli._config(args).workload.settings.context == 2048
    image = cli.build_parser(load_workload("image"))
    with pytest.raises(SystemExit):  # the image workload has no such setting: argparse refuses the flag
        image.parse_args(["train", "--date", "2026-11-20", "--context", "2048"])
    assert cli._flags_workload(["train", "--workload", "text", "--date", "2026-11-20"]).name == "text"
    assert cli._flags_workload(["train", "--workload", "no_such_pkg:X", "--date", "2026-11-20"]) is None


def test_a_variant_may_name_its_denoising_steps_and_scheduler_and_reads_its_encodings_weights():
    from aigc.config import DeployConfig, GenerateConfig
    from aigc.config.variant_names import variant_parts
    from aigc.registry.loader import variant_key
    from aigc.workloads import load_workload

    assert variant_parts("bf16-s20") == ("bf16", 20, None)
    assert variant_parts("fp32-s8-dpm") == ("fp32", 8, "dpm") and variant_parts("int8") == ("int8", None, None)
    assert DeployConfig(variants="fp32,bf16-s20,fp32-s8-ddim").variant_list == ["fp32", "bf16-s20", "fp32-s8-ddim"]
    assert GenerateConfig(variant="bf16-s20").variant == "bf16-s20"
    for bad in ("int8-s20", "fp32-s0", "fp32-s20-plms", "fp32-20", "bf16-s20-"):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            DeployConfig(variants=f"fp32,{bad}")
    assert variant_key("models/m/v0001", "bf16-s20") == variant_key("models/m/v0001", "bf16")  # stored once
    assert variant_key("models/m/v0001", "fp32-s8-dpm") == "models/m/v0001/model.safetensors"
    # Only a workload whose model takes steps builds them; the others skip them (with a warning).
    assert load_workload("hf-diffusion").builds("bf16-s8-dpm") and not load_workload("hf-diffusion").builds("int8")
    assert not IMAGE.builds("bf16-s20") and IMAGE.builds("int8")
