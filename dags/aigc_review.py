"""aigc_review: reviewers' Label Studio exports become labels as they arrive, not only when an evaluation runs.

    import_labels
Every 15 minutes, every Label Studio JSON export dropped in ``review/<model>/inbox/`` (of each model the
deployment's allowed workloads run) and not imported yet is read into labels (``aigc review import`` does the same
by hand; every evaluation also does it first): tasks this project did not export, malformed, conflicting or
duplicate labels are quarantined with their reason. The labels then count in the next evaluation (checker–human
agreement, gate 5) and, with ``train.review_feedback``, in the next training window.
"""

from __future__ import annotations

from airflow.sdk import dag

from aigc_airflow.review_tasks import import_labels
from aigc_airflow.stage_tasks import dag_args


@dag(dag_id="aigc_review", schedule="*/15 * * * *", max_active_runs=1, doc_md=__doc__,
     description="Import reviewers' Label Studio exports from the lake's review inbox.", **dag_args())
def aigc_review():
    import_labels()


aigc_review()
