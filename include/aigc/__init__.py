"""AIGC pipeline core: every stage as plain typed functions, free of Airflow.

The same functions run inside Airflow tasks, torchrun workers, tests and the ``aigc`` CLI.
"""

__version__ = "0.1.0"
