"""Finding a workload by name: built in, an installed package's entry point, or a ``module:attribute`` path.

    image                              the built-in image workload (shapes captions → 32 px images)
    text                               the built-in text workload (long logs → a decoder-only transformer)
    my_pkg                             an entry point named my_pkg in the ``aigc.workloads`` group:
                                         [project.entry-points."aigc.workloads"] my_pkg = "my_pkg.workload:WORKLOAD"
    my_pkg.workload:WORKLOAD           a Workload instance (or subclass) importable from the Python path

Torchrun workers and Airflow workers resolve the name again in their own process, so the package (or the
module's folder on PYTHONPATH) must be importable wherever the stages run.
"""

from __future__ import annotations

import importlib
import os
import re
from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from aigc.config.workload import BUILT_IN, DEFAULT_SETTING
from aigc.workload import Workload

if TYPE_CHECKING:
    from aigc.config import PipelineConfig

ENTRY_POINT_GROUP = "aigc.workloads"
DEMO = "image"
"""The workload that runs when neither the command, the trigger nor the deployment (``AIGC_DEFAULT_WORKLOAD``) names
one: the image demo, which needs nothing but this package."""
_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class UnknownWorkload(LookupError):
    """A workload name that is not built in, not an entry point and not an importable path."""


@cache  # entry points change only when a package is installed; the DAG files ask at every parse
def available() -> dict[str, str]:
    """Every workload findable by a plain name: the built-in ones and the installed entry points."""
    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return {**found, **BUILT_IN}


@cache
def load_workload(name: str) -> Workload:
    """The workload called ``name`` (see the module's docstring); UnknownWorkload says what exists."""
    if name in BUILT_IN:
        return _resolve(name, BUILT_IN[name])
    points = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if points:
        return _resolve(name, points[0].value)
    if _PATH.match(name):
        return _resolve(name, name)
    raise UnknownWorkload(f"no workload {name!r}: the known ones are {sorted(available())} (built in, or entry "
                          f"points of the {ENTRY_POINT_GROUP!r} group); a workload of your own is named by its "
                          "entry point or as 'package.module:ATTRIBUTE'")


def _resolve(name: str, target: str) -> Workload:
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UnknownWorkload(f"workload {name!r}: cannot import {module_name!r} ({e}); is its package installed, "
                              "or its folder on PYTHONPATH where the stages run?") from e
    try:
        obj = getattr(module, attribute)
    except AttributeError:
        raise UnknownWorkload(f"workload {name!r}: module {module_name!r} has no attribute {attribute!r}") from None
    if isinstance(obj, type) and issubclass(obj, Workload):
        obj = obj()
    if not isinstance(obj, Workload):
        raise UnknownWorkload(f"workload {name!r}: {target} is a {type(obj).__name__}, not an aigc.workloads."
                              "Workload (subclass it and implement its abstract methods)")
    return obj


def default_workload() -> str:
    """The name of the workload to run when none is given: the deployment's ``AIGC_DEFAULT_WORKLOAD`` (the Airflow
    glue also reads ``[aigc] default_workload``), else ``DEMO``."""
    return os.environ.get(DEFAULT_SETTING) or DEMO


def workload_of(cfg: PipelineConfig) -> Workload:
    """The workload a configuration runs (its name, else the default)."""
    return load_workload(cfg.workload.name or default_workload())
