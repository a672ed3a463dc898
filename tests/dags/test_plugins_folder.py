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


def test_loading_the_plugin_leaves_the_view_unbuilt():
    """Every task process loads plugins: the view (FastAPI, the lake catalog) waits for its first request."""
    import subprocess

    probe = ("import sys; from airflow import plugins_manager as pm; "
             f"pm._load_plugins_from_plugin_directory(plugins_folder={str(ROOT / 'plugins')!r}, load_examples=False); "
             "print(sorted(m for m in ('fastapi', 'aigc.catalog', 'aigc_airflow.view.app') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_mounted_view_is_built_at_its_first_request_once():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from aigc_airflow.view.lazy import LazyASGIApp

    lazy = LazyASGIApp("aigc_airflow.view.app:create_app")
    server = FastAPI()
    server.mount("/aigc", lazy)
    response = TestClient(server).get("/aigc/api/runs")  # no token: the real view refuses it
    assert response.status_code == 401
    assert lazy.app() is lazy.app()
