"""The review loop's task (dags/aigc_review.py): reviewers' Label Studio exports in, as labels."""

from __future__ import annotations

from airflow.sdk import get_current_context, task

from aigc_airflow.operations import task_timeout


@task(execution_timeout=task_timeout("import_labels"))
def import_labels() -> dict:
    """Every new Label Studio export in the review inbox of each model the deployment runs (its allowed workloads',
    under the run's preset), imported (``aigc review import``'s path). It writes only labels files and their
    quarantine (named by the export's hash: idempotent), no date's partition: no lease."""
    from aigc.evaluate.labelstudio import import_pending
    from aigc.stages import configure
    from aigc_airflow.params import default_preset
    from aigc_airflow.runtime import access_policy, open_task_lake, run_params

    params = run_params(get_current_context())  # first: a refused trigger reads and writes nothing
    lake, preset, found = open_task_lake(), params.get("preset") or default_preset(), {}
    for workload in access_policy().workloads:
        try:
            model = configure(preset, workload).model.name
        except Exception as e:  # noqa: BLE001 - one workload that cannot be configured must not stop the others
            found[workload] = {"refused": f"{type(e).__name__}: {e}"}
            continue
        found.setdefault(model, import_pending(lake, model))
    return found
