"""Finding a workload by name, and the configuration that names it."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from aigc.config import PipelineConfig, WorkloadConfig, preset
from aigc.stages import configure
from aigc.workloads import UnknownWorkload, Workload, available, load_workload, workload_of
from aigc.workloads.image import IMAGE


class Echo(Workload):
    name = "echo"
    stages = frozenset({"train"})

    def config_overrides(self, preset):
        return {"model": {"name": f"echo-{preset}"}, "prepare": {"dataset": "echoes"}}

    def sample_costs(self, columns, cfg):
        return np.ones(len(columns["x"]))

    def training_task(self, lake, index, cfg):
        raise NotImplementedError


@pytest.fixture
def user_module(monkeypatch):
    module = types.ModuleType("user_workloads")
    module.Echo, module.ECHO, module.NOT_ONE = Echo, Echo(), object()
    monkeypatch.setitem(sys.modules, "user_workloads", module)
    load_workload.cache_clear()
    yield module
    load_workload.cache_clear()


def test_the_image_workload_is_built_in_and_the_default():
    assert load_workload("image") is IMAGE and workload_of(PipelineConfig()) is IMAGE
    assert "image" in available() and IMAGE.stages == {"prepare", "train", "deploy", "generate", "evaluate"}
    assert configure("demo", "image") == configure("demo") == preset("demo", IMAGE)  # the default, with its settings


def test_a_workload_by_module_path_as_a_class_or_an_instance(user_module):
    assert isinstance(load_workload("user_workloads:Echo"), Echo)
    assert load_workload("user_workloads:ECHO") is user_module.ECHO


def test_a_workloads_preset_changes_come_before_the_users(user_module):
    cfg = configure("demo", "user_workloads:Echo")
    assert cfg.workload.name == "user_workloads:Echo" and cfg.model.name == "echo-demo"
    assert cfg.prepare.dataset == "echoes" and cfg.train == preset("demo").train
    assert cfg.override({"model": {"name": "mine"}}).model.name == "mine"
    assert cfg.raw.source == "echo"  # what it does not name is named after it, never after another workload


def test_a_workload_that_names_nothing_gets_its_own_names_not_the_image_workloads(user_module):
    """Otherwise it would register versions in shapes-cvae's registry and move that model's production alias."""

    class Quiet(Echo):
        name = "Quiet.Model"

        def config_overrides(self, preset):
            return {}

    user_module.QUIET = Quiet()
    cfg = configure("default", "user_workloads:QUIET")
    assert (cfg.raw.source, cfg.prepare.dataset, cfg.model.name) == ("quiet-model",) * 3
    image = configure("default", "image")
    assert (image.raw.source, image.prepare.dataset, image.model.name) == ("shapes", "shapes", "shapes-cvae")


@pytest.mark.parametrize(("name", "message"), [
    ("nope", r"no workload 'nope': the known ones are \[.*'image'.*\].*'package.module:ATTRIBUTE'"),
    ("user_workloads:NOT_ONE", r"user_workloads:NOT_ONE is a object, not an aigc.workloads.Workload"),
    ("user_workloads:Missing", r"module 'user_workloads' has no attribute 'Missing'"),
    ("no_such_package.mod:W", r"cannot import 'no_such_package.mod' .*PYTHONPATH"),
])
def test_a_name_that_finds_no_workload_says_what_exists(user_module, name, message):
    with pytest.raises(UnknownWorkload, match=message):
        load_workload(name)


def test_a_stage_without_hooks_refuses_the_workload_by_name(user_module):
    echo = load_workload("user_workloads:Echo")
    echo.require("train")
    with pytest.raises(NotImplementedError, match=r"workload 'echo' provides stage\(s\) \['train'\], not 'generate'"):
        echo.require("generate")


@pytest.mark.parametrize("bad", ["", "two words", "pkg.mod:", ":ATTR", "pkg:mod:ATTR", "a;b"])
def test_the_config_refuses_a_malformed_name_and_says_where_to_set_it(bad):
    with pytest.raises(ValueError, match=r"WorkloadConfig.name must be .* \(set with --workload on any `aigc`"):
        WorkloadConfig(name=bad)


def test_the_forms_pattern_is_the_configs():
    import re

    from aigc.config.workload import NAME_PATTERN

    for good in ("image", "tiny-sum", "my_pkg.workloads:TEXT"):
        assert re.match(NAME_PATTERN, good) and WorkloadConfig(good).name == good
