"""``make demo-s3``: the demo DAG run against a local S3 server instead of a folder.

Starts moto's S3 server on loopback, runs ``airflow dags test`` with the lake at
``s3://aigc-lake/lake`` (tasks reach it through the ``aws_default`` connection, as in
docker-compose), prints what was published, and stops the server (its data goes with it).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from aigc.devtools.demo import run_dag_test, status
from aigc.devtools.s3server import local_s3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--date", required=True)
    ap.add_argument("--workload", required=True, help="image or text (the Makefile's WORKLOAD), or any workload's name")
    args = ap.parse_args()
    with local_s3() as s3:
        env = {**os.environ, **s3.env(), "AIGC_LAKE_URI": f"s3://{s3.bucket}/lake"}
        print(f"== the local S3 server is at {s3.endpoint_url} ==", file=sys.stderr)
        code = run_dag_test(args.date, {"preset": "demo", "workload": args.workload}, env,
                            Path(env.get("AIRFLOW_HOME", ".")) / "demo-s3.log")
        status(args.date, env, args.workload)
        return code


if __name__ == "__main__":
    raise SystemExit(main())
