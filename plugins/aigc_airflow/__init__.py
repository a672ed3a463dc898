"""Airflow glue for the AIGC pipeline: operators and helpers over the ``aigc`` core.

Nothing here does a stage's work; it turns Airflow context (params, dates, connections)
into the typed arguments of the core functions.
"""
