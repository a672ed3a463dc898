"""``make demo-s3``: the demo DAG run against a local S3 server instead of a folder.

Starts moto's S3 server on loopback, runs ``airflow dags test`` with the lake at
``s3://aigc-lake/lake`` (tasks reach it through the ``aws_default`` connection, as in
docker-compose), prints what was published, and stops the server (its data goes with it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from aigc.devtools.s3server import local_s3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--date", required=True)
    args = ap.parse_args()
    bin_dir = Path(sys.executable).parent
    with local_s3() as s3:
        env = {**os.environ, **s3.env(), "AIGC_LAKE_URI": f"s3://{s3.bucket}/lake"}
        print(f"== aigc_pipeline for {args.date} on {env['AIGC_LAKE_URI']} at {s3.endpoint_url} ==", file=sys.stderr)
        log = Path(env.get("AIRFLOW_HOME", ".")) / "demo-s3.log"
        with log.open("w") as f:
            run = subprocess.run([str(bin_dir / "airflow"), "dags", "test", "aigc_pipeline", args.date,
                                  "-c", json.dumps({"preset": "demo"})], env=env, stdout=f, stderr=subprocess.STDOUT)
        print(f"task log: {log}", file=sys.stderr)
        if run.returncode != 0:
            print(log.read_text()[-4000:], file=sys.stderr)
            return run.returncode
        return subprocess.run([str(bin_dir / "aigc"), "status", "--date", args.date], env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main())
