"""What a trigger may ask for (aigc.config.access): roots, workloads and resource bounds the operator set."""

from __future__ import annotations

import os

import pytest

from aigc.config.access import DEFAULT_BOUNDS, AccessPolicy, Refused, check_event, check_request, normalise_uri


def policy(tmp_path, **settings) -> AccessPolicy:
    return AccessPolicy.deployment(str(tmp_path / "lake"), {k: str(v) for k, v in settings.items()}.get)


def test_a_raw_uri_must_lie_under_the_lake_or_a_root_the_operator_listed(tmp_path):
    allowed = policy(tmp_path, AIGC_ALLOWED_ROOTS=f"s3://drops/raw, {tmp_path / 'producers'}")
    for ok in ("s3://drops/raw", "s3://drops/raw/shapes", "s3://drops/raw/shapes/", str(tmp_path / "producers/a"),
               f"file://{tmp_path}/lake/raw/shapes", str(tmp_path / "lake")):
        assert check_request({"raw_uri": ok}, allowed)["raw_uri"] == ok
    for outside in ("s3://drops/rawx", "s3://drops", "s3://other/raw", "/etc", str(tmp_path / "producersx"),
                    str(tmp_path / "lake/../elsewhere"), "s3://drops/raw/../../secret"):
        with pytest.raises(Refused) as e:
            check_request({"raw_uri": outside}, allowed)
        assert repr(outside) in str(e.value) and "raw_uri" in str(e.value)
    with pytest.raises(Refused, match="AIGC_ALLOWED_ROOTS"):
        check_request({"raw_uri": "s3://other/raw"}, allowed)


def test_a_link_inside_an_allowed_root_does_not_lead_out_of_it(tmp_path):
    (tmp_path / "lake").mkdir()
    (tmp_path / "secret").mkdir()
    os.symlink(tmp_path / "secret", tmp_path / "lake" / "door")
    with pytest.raises(Refused, match="outside the roots"):
        check_request({"raw_uri": str(tmp_path / "lake" / "door")}, policy(tmp_path))


def test_relative_folders_and_other_schemes_are_refused_and_lake_keys_may_not_climb(tmp_path):
    p = policy(tmp_path)
    for bad in ("raw/shapes", "http://example.com/raw", "s3://"):
        with pytest.raises(Refused):
            check_request({"raw_uri": bad}, p)
    assert check_request({"prompts_uri": "prompts/shapes/dt=2026-11-01/prompts.jsonl"}, p)
    with pytest.raises(Refused, match=r"'\.\.'"):
        check_request({"prompts_uri": "prompts/../models/x"}, p)


def test_a_workload_must_be_built_in_the_default_or_listed(tmp_path):
    p = policy(tmp_path, AIGC_DEFAULT_WORKLOAD="mine")
    assert p.workloads == ("image", "text", "hf-causal-lm", "hf-diffusion", "mine")
    check_request({"workload": "text"}, p)
    with pytest.raises(Refused, match="AIGC_ALLOWED_WORKLOADS") as e:
        check_request({"workload": "evil.module:W"}, p)
    assert "'evil.module:W'" in str(e.value)
    listed = policy(tmp_path, AIGC_ALLOWED_WORKLOADS="text, pkg.mod:W", AIGC_DEFAULT_WORKLOAD="text")
    assert listed.workloads == ("text", "pkg.mod:W")  # the list replaces the built-in ones
    check_request({"workload": "pkg.mod:W"}, listed)
    with pytest.raises(Refused):
        check_request({"workload": "image"}, listed)
    # With no default named, the list is all there is (the form proposes its first: aigc_airflow.params).
    assert policy(tmp_path, AIGC_ALLOWED_WORKLOADS="text").workloads == ("text",)


def test_resource_fields_are_bounded_by_the_deployment_and_the_message_names_the_setting(tmp_path):
    p = policy(tmp_path, AIGC_MAX_NNODES=2)
    check_request({"nnodes": 2, "prepare_parts": DEFAULT_BOUNDS["prepare_parts"]}, p)
    with pytest.raises(Refused, match="AIGC_MAX_NNODES") as e:
        check_request({"nnodes": 3}, p)
    assert "'nnodes' = 3" in str(e.value)
    for param, value in (("prepare_parts", 4096), ("nproc", 64), ("eval_prompts", 1_000_000)):
        with pytest.raises(Refused, match=f"AIGC_MAX_{param.upper()}"):
            check_request({param: value}, p)
    # A bound above the form's own maximum does not lift it.
    with pytest.raises(Refused, match="form's own maximum"):
        check_request({"nnodes": 65}, policy(tmp_path, AIGC_MAX_NNODES=1000))
    with pytest.raises(ValueError, match="AIGC_MAX_NPROC"):
        policy(tmp_path, AIGC_MAX_NPROC="many")


def test_types_enums_and_presets_are_checked_as_the_form_checks_them(tmp_path):
    p = policy(tmp_path)
    for bad in ({"nnodes": "2"}, {"nnodes": True}, {"nnodes": 1.5}, {"precision": "fp8"}, {"preset": "huge"},
                {"min_alignment": "high"}, {"nnodes": 0}):
        with pytest.raises(Refused):
            check_request(bad, p)
    assert check_request({"min_alignment": 1, "nnodes": None, "unknown_key": [1]}, p)["unknown_key"] == [1]


def test_an_asset_events_params_keys_and_uris_are_checked_like_a_forms(tmp_path):
    p = policy(tmp_path)
    good = {"date": "2026-11-01", "run_id": "20261101T000000Z-abc", "chain": True, "params": {"preset": "demo"},
            "prompts_key": "prompts/shapes/dt=2026-11-01/prompts.jsonl", "run_uri": str(tmp_path / "lake/x")}
    assert check_event(good, p, from_pipeline=True) == good
    for bad in ({"params": {"workload": "evil:W"}}, {"params": {"raw_uri": "s3://x/y"}}, {"params": "demo"},
                {"prompts_key": "models/shapes-cvae/aliases.json"}, {"prompts_key": "prompts/../x"},
                {"date": "yesterday"}, {"run_id": "../x"}, {"run_uri": "s3://elsewhere/x"}):
        with pytest.raises(Refused):
            check_event({**good, **bad}, p, from_pipeline=True)


def test_the_operators_policy_at_the_cli_allows_any_root_and_workload_but_still_checks_shapes():
    op = AccessPolicy.operator()
    check_request({"raw_uri": "s3://anywhere/raw", "workload": "pkg.mod:W", "nnodes": 64}, op)
    with pytest.raises(Refused):
        check_request({"workload": "not a name"}, op)
    with pytest.raises(Refused):
        check_request({"prompts_uri": "prompts/../../x"}, op)


def test_a_malformed_root_setting_stops_the_deployment_rather_than_opening_it(tmp_path):
    with pytest.raises(ValueError, match="AIGC_ALLOWED_ROOTS"):
        policy(tmp_path, AIGC_ALLOWED_ROOTS="relative/raw")
    assert normalise_uri("s3://b/p/") == "s3://b/p"


def test_the_package_requires_a_torch_whose_weights_only_loader_is_safe():
    """CVE-2025-32434: before 2.6, torch.load(weights_only=True) could still run code from a crafted file; an
    install from the package metadata alone (not requirements.txt's pin) must not get such a torch."""
    import re
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    (torch,) = [d for d in meta["project"]["dependencies"] if re.match(r"torch\b", d)]
    low = re.fullmatch(r"torch>=(\d+)\.(\d+)(?:\.\d+)?", torch)
    assert low and (int(low[1]), int(low[2])) >= (2, 6), torch


def test_values_airflow_accepts_are_read_as_it_reads_them_and_odd_ones_are_refused_not_crashed_on(tmp_path):
    p = policy(tmp_path)
    assert check_request({"nnodes": 2.0, "raw_uri": "", "prompts_uri": ""}, p) == \
        {"nnodes": 2, "raw_uri": None, "prompts_uri": None}  # JSON's 2.0; an emptied field means the preset's
    for bad in ({"min_alignment": float("nan")}, {"max_regression": float("inf")}, {"raw_uri": "/tmp/a\x00b"},
                {"nnodes": 2.5}):
        with pytest.raises(Refused):
            check_request(bad, p)
    with pytest.raises(Refused):
        check_event({"date": "2026-11-01", "run_uri": "/tmp/a\x00b"}, p, from_pipeline=True)


def test_a_prompt_file_comes_from_the_lake_only_in_either_of_its_url_forms(tmp_path):
    p = policy(tmp_path, AIGC_ALLOWED_ROOTS=str(tmp_path / "producers"))
    for ok in (f"file://{tmp_path}/lake/prompts/x.jsonl", f"{tmp_path}/lake/prompts/x.jsonl", "prompts/x.jsonl"):
        check_request({"prompts_uri": ok}, p)
    with pytest.raises(Refused, match="the lake"):  # a raw drop may come from there, a prompt file may not
        check_request({"prompts_uri": str(tmp_path / "producers" / "x.jsonl")}, p)


def test_a_forms_workload_settings_are_a_small_object_of_named_scalars():
    policy = AccessPolicy.operator()
    assert check_request({"settings": {"context": 2048, "note": "x"}}, policy)["settings"] == {"context": 2048,
                                                                                               "note": "x"}
    assert check_request({"settings": None}, policy)["settings"] is None  # the preset's
    for bad in ("2048", [2048], {"context": [1, 2]}, {"not a name": 1}, {"x": "y" * 1001},
                {f"s{i}": i for i in range(65)}):
        with pytest.raises(Refused, match="'settings' = .* is refused: a JSON object of at most 64"):
            check_request({"settings": bad}, policy)
    from aigc.config.form import config_changes

    assert config_changes({"settings": {"context": 2048}, "train_steps": 7}) == {
        "workload": {"settings": {"context": 2048}}, "train": {"steps": 7}}


def test_a_workload_setting_that_names_a_location_must_lie_under_an_allowed_root(tmp_path):
    """A base model's folder from the form (the hf-causal-lm workload's ``base_model_uri``) is read by the run: it
    is held to the roots a raw drop is, and a Hub id (no folder, no root) is refused before anything loads."""
    allowed = policy(tmp_path, AIGC_ALLOWED_ROOTS="s3://models/shared")
    for ok in ("s3://models/shared/my-llm", str(tmp_path / "lake" / "bases" / "m"), ""):
        assert check_request({"settings": {"base_model_uri": ok}}, allowed)["settings"]["base_model_uri"] == ok
    for outside in ("s3://models/private", "/home/someone/llm", str(tmp_path / "lake" / ".." / "m")):
        with pytest.raises(Refused, match=r"'settings\.base_model_uri' = .* outside the roots.*AIGC_ALLOWED_ROOTS"):
            check_request({"settings": {"base_model_uri": outside, "context": 64}}, allowed)
    with pytest.raises(Refused, match=r"'settings\.base_model_uri' = 'meta-llama/Llama-3.2-1B' .* absolute path"):
        check_request({"settings": {"base_model_uri": "meta-llama/Llama-3.2-1B"}}, allowed)  # a Hub id: no folder
    for scorer in ("clip_model_uri", "feature_model_uri", "safety_model_uri"):  # hf-diffusion's judges: the same
        with pytest.raises(Refused, match=rf"'settings\.{scorer}' = .* outside the roots"):
            check_request({"settings": {scorer: "/home/someone/clip"}}, allowed)
