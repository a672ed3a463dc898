"""The seam between the core and its workloads, as rules a change cannot break silently (docs/architecture.md).

The core (``include/aigc`` outside ``aigc.workloads``) runs any workload through the interface in
``aigc.workload``; the workloads (``aigc.workloads.image``, ``.text``, the ``world`` both demos draw from, and a
user's) sit on top of it. Imports are read from the source, those inside functions included (they run too), type-only
ones (``if TYPE_CHECKING:``) left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "include" / "aigc"
RESOLVERS = {"aigc.stages", "aigc.cli"}
"""The only core modules that find a workload by name (through ``aigc.workloads.registry``)."""
NAMED = ("aigc.workloads.image", "aigc.workloads.text", "aigc.workloads.world")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT / "include").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def runtime_imports(path: Path, name: str) -> set[str]:
    """The aigc modules ``path`` imports when it runs (at import time or in a function)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *filter(None, [base])])
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
    resolved = set()
    for target in found:
        while target and target not in MODULES and "." in target:
            target = target.rpartition(".")[0]
        if target in MODULES and target != name:
            resolved.add(target)
    return resolved


GRAPH = {name: runtime_imports(path, name) for name, path in MODULES.items()}
CORE = {name for name in MODULES if not name.startswith("aigc.workloads")}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_anywhere_in_the_package():
    assert cycles(GRAPH) == []


def test_the_rule_finder_sees_a_circle_and_imports_inside_functions():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "aigc.workloads.image.evaluation" in GRAPH["aigc.workloads.image"]  # a hook's lazy import


def test_the_core_imports_no_workload_and_only_the_entry_points_resolve_one_by_name():
    upward = {m: sorted(t for t in GRAPH[m] if t.startswith("aigc.workloads")) for m in CORE}
    upward = {m: t for m, t in upward.items() if t}
    registry = {"aigc.workloads", "aigc.workloads.registry"}
    allowed = {m: t for m, t in upward.items() if m in RESOLVERS and set(t) <= registry}
    assert upward == allowed, "the core imports a workload: pass the workload object down from aigc.stages instead"
    assert set(allowed) == RESOLVERS  # the rule is alive: they do resolve


def test_the_core_names_no_workload_in_code():
    """No ``load_workload("image")`` fallback and no ``workload="image"`` default: a stage that lacks its workload
    fails, naming the parameter, instead of running another model's code."""
    offences = []
    for name in CORE:
        tree = ast.parse(MODULES[name].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                    "load_workload", "workload_of") and name not in RESOLVERS:
                offences.append(f"{name}:{node.lineno} resolves a workload")
            if isinstance(node, ast.arguments):
                for default in [*node.defaults, *node.kw_defaults]:
                    if isinstance(default, ast.Constant) and default.value in ("image", "text"):
                        offences.append(f"{name}:{default.lineno} defaults to the {default.value} workload")
    assert offences == []


def test_the_cores_defaults_name_no_workload_its_data_or_its_model():
    """A configuration of no workload names none, nor the image workload's dataset and model: a preset names them
    after the workload it is built for; where none is given, the deployment's default is resolved by the resolvers
    (``aigc.workloads.registry.default_workload``), not by a default in the core's configuration."""
    from aigc.config import PipelineConfig
    from aigc.workloads.image import DATASET, MODEL
    from aigc.workloads.text import TEXT

    cfg = PipelineConfig()
    named = {DATASET, MODEL, "image", "text", TEXT.name}
    assert cfg.workload.name is None
    assert {cfg.raw.source, cfg.prepare.dataset, cfg.model.name} & named == set()
    # Nor does any string in the core outside the table of built-in workloads (config/workload.py's BUILT_IN).
    literals = [f"{name}:{node.lineno} {node.value!r}" for name in CORE
                for node in ast.walk(ast.parse(MODULES[name].read_text()))
                if isinstance(node, ast.Constant) and node.value in {DATASET, MODEL}]
    assert literals == []


def test_nothing_on_the_airflow_side_imports_a_named_workload():
    """The DAGs and the plugin are workload-neutral: they reach workloads through the stages and the registry."""
    offences = []
    for path in [*(ROOT / "dags").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offences += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.startswith(NAMED)]
    assert offences == []


def test_config_imports_nothing_above_it():
    below = {"aigc.jsonlines", "aigc.lines", "aigc.lake.keys"}  # leaf helpers the settings' checks use
    above = {m: sorted(t for t in GRAPH[m] if not t.startswith("aigc.config") and t not in below)
             for m in MODULES if m.startswith("aigc.config")}
    assert {m: t for m, t in above.items() if t} == {}


def test_the_cores_configuration_holds_no_workloads_own_settings():
    """A workload brings its settings in its own class (``cfg.workload.settings``): no field of the built-in
    workloads' settings (an image's side, the CVAE's widths, the checker's bar, a context length) is a field of a
    core section, so the core's configuration knows no model."""
    import dataclasses

    from aigc.config import PipelineConfig
    from aigc.workloads.image.config import ImageSettings
    from aigc.workloads.text.config import TextSettings

    cfg = PipelineConfig()
    core = {(f.name, section.name) for section in dataclasses.fields(cfg) if section.name != "workload"
            for f in dataclasses.fields(getattr(cfg, section.name))}
    for settings in (ImageSettings, TextSettings):
        own = {f.name for f in dataclasses.fields(settings)}
        assert sorted((name, section) for name, section in core if name in own) == [], settings.__name__
