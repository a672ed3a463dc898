"""Airflow's plugin loader sees only the plugin entry point, never the package beside it."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_only_the_entry_point_is_loaded_as_a_top_level_module():
    """Every .py under plugins/ is exec'd as a module named after its file: a view/html.py
    once replaced the standard library's ``html`` in the dag-processor, which then crashed."""
    from airflow._shared.module_loading import find_path_from_directory

    seen = sorted(Path(p).relative_to(ROOT / "plugins").as_posix()
                  for p in find_path_from_directory(str(ROOT / "plugins"), ".airflowignore", "glob"))
    assert seen == ["aigc_plugin.py"]


def test_airflow_loads_the_aigc_plugin_without_errors_or_shadowed_modules():
    import html

    from airflow import plugins_manager

    plugins, errors = plugins_manager._load_plugins_from_plugin_directory(
        plugins_folder=str(ROOT / "plugins"), load_examples=False)
    assert errors == {} and [p.name for p in plugins] == ["aigc"]
    assert sys.modules["html"] is html and hasattr(html, "escape")
