"""The Celery workers' configuration: Airflow's own, plus the task preload.

``[celery] celery_config_options = aigc_airflow.celery_config.CELERY_CONFIG`` (docker-compose and the distributed
test deployment set it: ``aigc_airflow.operations.CELERY_TASK_PRELOAD``). The configuration is Airflow's default,
the same object, so Airflow treats it as unset. Importing this module also connects a ``worker_init`` handler:
``airflow celery worker``'s main process runs it before it forks its pool, so the pool processes, each of which
forks a process for every task it runs, inherit what ``aigc_airflow.preload`` imported (PyTorch, Great
Expectations, the stages) instead of each task importing them again. Elsewhere (the CeleryExecutor in the
scheduler imports this module too) the handler never runs.
"""

from __future__ import annotations

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
from celery.signals import worker_init

CELERY_CONFIG = DEFAULT_CELERY_CONFIG


@worker_init.connect
def preload_task_imports(**_kwargs) -> None:
    import aigc_airflow.preload  # noqa: F401 - imported for being in sys.modules when the pool forks
