"""Static checks of the Compose deployment: docker-compose.yaml, Dockerfile and .env.example.

Nothing here starts containers. The wiring is checked on the parsed YAML after Compose-style
interpolation, once with the .env.example values and once with "probe" values (every variable
set to <<NAME>>), so a value hard-coded in one place cannot pass by matching the example.
"""

import functools
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from aigc.devtools.env_secrets import SECRETS, fill, problems

ROOT = Path(__file__).resolve().parents[2]
COMPOSE, ENV_EXAMPLE = ROOT / "docker-compose.yaml", ROOT / ".env.example"
AIRFLOW_HOME = "/opt/airflow"  # the official image's AIRFLOW_HOME (dags_folder, plugins_folder)
AIRFLOW_SERVICES = {"airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                    "airflow-triggerer", "airflow-worker"}
VAR = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")
SECRET_NAME = re.compile(r"(PASSWORD|SECRET|_KEY|_KEY_ID|TOKEN)$")
PROBE_VALUE = re.compile(r"<<\w+>>")


def env_example() -> dict[str, str]:
    lines = [ln.strip() for ln in ENV_EXAMPLE.read_text().splitlines()]
    return dict(ln.split("=", 1) for ln in lines if ln and not ln.startswith("#"))


@functools.cache  # one .env for the whole module, as one deployment has
def env_made_by_make_secrets() -> dict[str, str]:
    """The .env `make secrets` writes from .env.example."""
    text, _made = fill(ENV_EXAMPLE.read_text())
    return dict(ln.split("=", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))


def walk(obj, fn):
    """Apply fn to every string (keys included) of a parsed YAML document."""
    if isinstance(obj, dict):
        return {walk(k, fn): walk(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [walk(v, fn) for v in obj]
    return fn(obj) if isinstance(obj, str) else obj


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, ${VAR?err}; $$ is '$'."""
    def one(m: re.Match) -> str:
        name, op, arg = m.groups()
        val = env.get(name)
        if val is None or (op and op.startswith(":") and val == ""):
            if op and op.endswith("-"):
                return arg
            raise KeyError(f"${{{name}}} is not set ({arg or 'no default'})")
        return val

    return "$".join(VAR.sub(one, part) for part in text.split("$$"))


RAW = yaml.safe_load(COMPOSE.read_text())  # PyYAML resolves the `<<: *anchor` merges
UNESCAPED: list[str] = []  # every string of the file with the $$ escapes removed
walk(RAW, lambda s: UNESCAPED.append("".join(s.split("$$"))))
USED = {m.group(1) for s in UNESCAPED for m in VAR.finditer(s)}
PROBED = walk(RAW, lambda s: interpolate(s, {name: f"<<{name}>>" for name in USED}))


@pytest.fixture(params=["example", "probe"])
def compose(request) -> dict:
    return PROBED if request.param == "probe" else walk(RAW, lambda s: interpolate(s, env_made_by_make_secrets()))


def queues(command) -> list[str]:
    args = shlex.split(command) if isinstance(command, str) else list(command)
    flag = next((i for i, a in enumerate(args) if a in ("--queues", "-q")), None)
    return [] if flag is None else args[flag + 1].split(",")


def test_compose_config_is_valid(tmp_path):
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose not installed: apt-get install docker-compose; `make test` installs it")
    good, bad, example = tmp_path / "good.env", tmp_path / "bad.env", tmp_path / "example.env"
    good.write_text(fill(ENV_EXAMPLE.read_text())[0])
    bad.write_text(re.sub(r"(?m)^POSTGRES_PASSWORD=.*$", "", good.read_text()))
    example.write_text(ENV_EXAMPLE.read_text())

    def config(env_file: Path) -> subprocess.CompletedProcess:
        cmd = [binary, "--env-file", str(env_file), "-f", str(COMPOSE), "config", "-q"]
        # Minimal env: variables exported in the caller's shell would override the env file.
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    ok = config(good)
    assert ok.returncode == 0, ok.stderr
    missing = config(bad)  # a missing secret must stop compose, not become an empty password
    assert missing.returncode != 0 and "POSTGRES_PASSWORD" in missing.stderr
    as_shipped = config(example)  # the example's secrets are empty: it cannot be started as it is
    assert as_shipped.returncode != 0 and "make secrets" in as_shipped.stderr
    assert all(name in as_shipped.stderr for name in SECRETS), as_shipped.stderr  # the secrets-check list


def test_the_example_env_starts_nothing_until_every_secret_is_generated():
    """Every secret ships empty: interpolating the compose file with .env.example fails on each of them (compose
    stops at the first; the list is the same), and `make secrets` fills exactly those."""
    example = env_example()
    refused = set()
    for s in UNESCAPED:
        for m in VAR.finditer(s):
            try:
                interpolate(m.group(0), example)
            except KeyError as e:
                refused.add(m.group(1))
                assert "make secrets" in str(e), e
    assert refused == set(SECRETS)
    assert {n for n, v in example.items() if SECRET_NAME.search(n) and not v} == set(SECRETS)
    made = dict(env_made_by_make_secrets())
    assert not problems(made) and len({made[n] for n in SECRETS}) == len(SECRETS)  # fresh, and all different
    again, generated = fill(ENV_EXAMPLE.read_text(), "\n".join(f"{k}={v}" for k, v in made.items()))
    assert generated == [] and f"AIRFLOW_JWT_SECRET={made['AIRFLOW_JWT_SECRET']}" in again  # kept on a rerun


def test_a_published_example_secret_stops_the_deployment_before_anything_starts(compose):
    """secrets-check names every secret that is unset or an example value; the stores wait for it, and every
    Airflow service waits for the stores."""
    services = compose["services"]
    check = services["secrets-check"]
    assert check["entrypoint"] == ["python", "-m", "aigc.devtools.env_secrets", "check"]
    assert set(check["environment"]) == {*SECRETS, "AIGC_S3_ACCESS_KEY", "AIGC_VIEW_S3_ACCESS_KEY"}
    for name in ("postgres", "redis", "minio"):
        assert services[name]["depends_on"] == {"secrets-check": {"condition": "service_completed_successfully"}}
    old = {**env_made_by_make_secrets(), "AIRFLOW_JWT_SECRET": "change-me-jwt-secret",
           "AIRFLOW_FERNET_KEY": "FFwyBfiFbXIvV0SM5WyJuu7w56sajAZooTka4VVRuAE=", "POSTGRES_PASSWORD": "short"}
    found = problems(old)
    assert [f.split()[0] for f in found] == ["POSTGRES_PASSWORD", "AIRFLOW_FERNET_KEY", "AIRFLOW_JWT_SECRET"]
    made = env_made_by_make_secrets()
    same_user = {**made, "AIGC_VIEW_S3_ACCESS_KEY": made["AIGC_S3_ACCESS_KEY"]}
    assert [f.split()[0] for f in problems(same_user)] == ["AIGC_VIEW_S3_ACCESS_KEY"]


def test_make_secrets_keeps_a_users_own_settings_and_writes_a_file_only_they_can_read(tmp_path):
    import os
    import stat

    from aigc.devtools.env_secrets import main

    target = tmp_path / ".env"
    target.write_text("AIRFLOW_JWT_SECRET=a-jwt-secret-of-my-own-0123456789\nMY_PROXY=http://proxy:3128\n")
    target.chmod(0o644)
    assert main([str(ENV_EXAMPLE), str(target)]) == 0
    written = dict(ln.split("=", 1) for ln in target.read_text().splitlines() if "=" in ln and ln[0] != "#")
    assert written["AIRFLOW_JWT_SECRET"] == "a-jwt-secret-of-my-own-0123456789"
    assert written["MY_PROXY"] == "http://proxy:3128"
    assert not problems(written) and stat.S_IMODE(os.stat(target).st_mode) == 0o600


def test_minio_listens_on_loopback_and_the_view_reads_the_lake_with_a_read_only_key(compose):
    services = compose["services"]
    for port in services["minio"]["ports"]:
        assert port.startswith("127.0.0.1:"), port
    api = services["airflow-apiserver"]["environment"]
    conn = json.loads(api["AIRFLOW_CONN_AWS_DEFAULT"])
    init = services["minio-init"]
    assert (conn["login"], conn["password"]) == (init["environment"]["AIGC_VIEW_S3_ACCESS_KEY"],
                                                 init["environment"]["AIGC_VIEW_S3_SECRET_KEY"])
    assert (api["AWS_ACCESS_KEY_ID"], api["AWS_SECRET_ACCESS_KEY"]) == (conn["login"], conn["password"])
    assert conn["login"] != compose["x-airflow-common"]["environment"]["AWS_ACCESS_KEY_ID"]
    script = " ".join(init["command"])
    view = json.loads(re.search(r"cat > /tmp/aigc-view.json <<'POLICY'\s*(.*?)\s*POLICY", script, re.S).group(1))
    assert "mc admin policy create lake aigc-view /tmp/aigc-view.json" in script
    actions = {a for statement in view["Statement"] for a in statement["Action"]}
    assert actions == {"s3:GetBucketLocation", "s3:ListBucket", "s3:GetObject"}
    for name, svc in services.items():  # every other Airflow service keeps the pipeline's read-write key
        if name.startswith("airflow-") and name != "airflow-apiserver":
            assert svc["environment"]["AWS_ACCESS_KEY_ID"] != conn["login"], name


def test_s3_endpoint_is_the_minio_service(compose):
    env, services = compose["x-airflow-common"]["environment"], compose["services"]
    conn = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
    endpoint = urlsplit(conn["extra"]["endpoint_url"])
    minio = services[endpoint.hostname]
    assert "minio/minio" in minio["image"] and f"--address :{endpoint.port}" in minio["command"]
    assert env["AWS_ENDPOINT_URL"] == conn["extra"]["endpoint_url"]
    assert conn["extra"]["region_name"] == env["AWS_DEFAULT_REGION"]
    credentials, root = (conn["login"], conn["password"]), minio["environment"]
    assert credentials == (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
    pipeline_user = compose["services"]["minio-init"]["environment"]
    assert credentials == (pipeline_user["AIGC_S3_ACCESS_KEY"], pipeline_user["AIGC_S3_SECRET_KEY"])
    assert conn["login"] != root["MINIO_ROOT_USER"], "the pipeline must not use MinIO's root"
    root_names = {"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"}
    for name, svc in compose["services"].items():  # the root credentials stay with MinIO and minio-init
        assert name in ("minio", "minio-init", "secrets-check") or not root_names & set(svc.get("environment") or {}), \
            name


def test_minio_init_creates_the_lake_bucket(compose):
    env, init = compose["x-airflow-common"]["environment"], compose["services"]["minio-init"]
    created = re.findall(r"mc mb --ignore-existing \"?\w+/([^\s\"/]+)", " ".join(init["command"]))
    lake = urlsplit(env["AIGC_LAKE_URI"])
    assert lake.scheme == "s3" and created == [lake.netloc]
    assert urlsplit(env["AIRFLOW__LOGGING__REMOTE_BASE_LOG_FOLDER"]).netloc == lake.netloc


def test_minio_init_creates_a_user_that_reaches_the_lake_bucket_only(compose):
    init = compose["services"]["minio-init"]
    script = " ".join(init["command"])
    bucket = urlsplit(compose["x-airflow-common"]["environment"]["AIGC_LAKE_URI"]).netloc
    policy = json.loads(re.search(r"<<'POLICY'\s*(.*?)\s*POLICY", script, re.S).group(1))
    resources = {r for statement in policy["Statement"] for r in statement["Resource"]}
    assert resources == {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"}
    actions = {a for statement in policy["Statement"] for a in statement["Action"]}
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"} <= actions
    assert not [a for a in actions if a.endswith("*") or a.startswith("admin:")]
    assert 'mc admin user add lake "${AIGC_S3_ACCESS_KEY}" "${AIGC_S3_SECRET_KEY}"' in script.replace("$$", "$")
    assert "mc admin policy attach lake aigc-lake --user" in script


def gpu_workers(services: dict) -> list[str]:
    return sorted(name for name, svc in services.items() if "gpu" in queues(svc.get("command", "")))


def test_airflow_services_share_image_environment_and_mounts(compose):
    common, services = compose["x-airflow-common"], compose["services"]
    include_target = dockerfile_include_path()
    airflow = {name for name in services if name.startswith("airflow-")}
    assert airflow >= AIRFLOW_SERVICES
    assert common["build"]["args"]["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    for name in sorted(airflow):
        svc = services[name]
        if name in gpu_workers(services):  # the same Dockerfile, torch's CUDA build named explicitly
            assert svc["build"]["context"] == common["build"]["context"], name
            assert re.fullmatch(r"https://download\.pytorch\.org/whl/(cu\d+|<<AIGC_TORCH_CUDA>>)",
                                svc["build"]["args"]["TORCH_INDEX_URL"]), name
            assert svc["image"] != common["image"], name
        else:
            assert (svc["build"], svc["image"]) == (common["build"], common["image"]), name
        # The api-server reads the lake with the view's read-only key (checked below), the rest is shared.
        lake_key = ("AIRFLOW_CONN_AWS_DEFAULT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        shared = {k: v for k, v in common["environment"].items() if name != "airflow-apiserver" or k not in lake_key}
        assert shared.items() <= svc["environment"].items(), name
        mounts = dict(v.split(":")[:2] for v in svc["volumes"])
        assert mounts.get("./dags") == f"{AIRFLOW_HOME}/dags", name
        assert mounts.get("./plugins") == f"{AIRFLOW_HOME}/plugins", name
        assert mounts.get("./include") == include_target, name
        waits = {dep: c["condition"] for dep, c in svc["depends_on"].items()}
        assert waits["minio-init"] == "service_completed_successfully", name
        assert waits["postgres"] == waits["redis"] == "service_healthy", name
        if name != "airflow-init":
            assert waits["airflow-init"] == "service_completed_successfully", name


def test_gpu_queue_is_served_only_by_gpu_workers_one_gpu_and_one_task_each(compose):
    services = compose["services"]
    listening = {name: queues(svc.get("command", "")) for name, svc in services.items()}
    assert listening["airflow-worker"] == ["default"]
    # The DAG sends training and generation to the queue AIGC_GPU_QUEUE names, the same for every component:
    # `default` on a host without GPUs (.env.example), `gpu` on a GPU host.
    routed = {svc["environment"].get("AIGC_GPU_QUEUE") for name, svc in services.items() if name.startswith("airflow")}
    assert routed in ({"default"}, {"<<AIGC_GPU_QUEUE>>"})
    assert gpu_workers(services) == ["airflow-worker-gpu-0"]
    for i, name in enumerate(gpu_workers(services)):
        svc, args = services[name], shlex.split(services[name]["command"])
        assert svc["profiles"] == ["gpu"], name  # a host without GPUs does not start it
        assert args[args.index("--concurrency") + 1] == "1", name  # a task owns its GPU
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "device_ids": [str(i)], "capabilities": ["gpu"]}], name
        assert svc["environment"]["AIGC_REQUIRE_GPU"] == "1", name  # no GPU: fail fast, never train on the CPU
        assert svc["shm_size"] in ("16gb", "<<AIGC_GPU_SHM_SIZE>>") and svc["ulimits"]["memlock"] == -1, name


def test_no_literal_secrets():
    text = COMPOSE.read_text()
    for name, value in env_example().items():
        assert not SECRET_NAME.search(name) or not value or value not in text, f"example value of {name} hard-coded"
    for svc in [PROBED["x-airflow-common"], *PROBED["services"].values()]:
        for key, value in (svc.get("environment") or {}).items():
            assert not SECRET_NAME.search(key) or PROBE_VALUE.fullmatch(value), f"{key} not from .env"
    probed_strings: list[str] = []
    walk(PROBED, probed_strings.append)
    for s in probed_strings:  # URL credentials and JSON connection passwords
        for password in re.findall(r"://[^/:@\s]+:([^@\s]+)@|\"password\":\s*\"([^\"]*)\"", s):
            assert PROBE_VALUE.fullmatch("".join(password)), s


def dockerfile_include_path() -> str:
    """Check the Dockerfile and return where it installs the `aigc` sources (editable) from."""
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"(?m)^FROM apache/airflow:3\.3\.2-python3\.11\s*$", text)
    copied = re.search(r"(?m)^COPY\s+(?:--\S+\s+)*include/?\s+(\S+)\s*$", text)
    editable = re.search(r"pip install[^\n]*\s-e\s+(\S+)", text)
    assert copied and editable, "Dockerfile must COPY include/ and `pip install -e` the project"
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    include = f"{editable.group(1).rstrip('/')}/{package_dir['']}"
    assert copied.group(1).rstrip("/") == include
    for pkg in ("apache-airflow-providers-celery", "apache-airflow-providers-postgres", "psycopg2-binary"):
        assert re.search(rf"\s{pkg}==\d", text), f"{pkg} must be installed with an exact pin"
    # torch comes from the index the build names (CPU by default), before requirements.txt could take PyPI's.
    assert re.search(r"(?m)^ARG TORCH_INDEX_URL=https://download\.pytorch\.org/whl/cpu$", text)
    torch_step = text.index('--index-url "${TORCH_INDEX_URL}"')
    assert torch_step < text.index("-r /opt/airflow/requirements.txt")
    return include


def test_every_compose_variable_is_documented():
    assert not [s for s in UNESCAPED if re.search(r"\$\w", s)], "write ${VAR}, not $VAR"
    documented = env_example().keys()
    assert documented == USED, documented ^ USED
    for block in ENV_EXAMPLE.read_text().split("\n\n"):  # each variable's paragraph has a comment
        assert "=" not in block or any(ln.startswith("#") for ln in block.splitlines()), block


def test_gpu_tasks_get_a_pool_and_may_wait_in_the_queue_as_long_as_the_lease_allows():
    """A GPU task waiting behind another run's training must not be failed by Airflow's 10-minute queued
    timeout: the deployments set the one the date lease was sized for (aigc_airflow.operations), from its env file."""
    from aigc_airflow.operations import TASK_QUEUED_TIMEOUT

    seconds = str(int(TASK_QUEUED_TIMEOUT.total_seconds()))
    assert RAW["x-airflow-common"]["env_file"] == "deploy/airflow-celery.env"
    assert f"AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT={seconds}\n" in (ROOT / "deploy/airflow-celery.env").read_text()
    assert RAW["x-airflow-common"]["environment"]["AIGC_GPU_POOL"] == "gpu"
    assert "airflow pools set gpu" in " ".join(RAW["services"]["airflow-init"]["command"])
    assert "pools set gpu" in (ROOT / "Makefile").read_text()


def test_every_worker_command_uses_flags_airflow_celery_worker_accepts():
    """The worker commands are argv for `airflow celery worker`: a flag it does not know (--hostname for
    --celery-hostname) makes the container exit and restart in a loop, which no static check of the YAML sees."""
    import sys

    airflow = str(Path(sys.executable).with_name("airflow"))
    out = subprocess.run([airflow, "celery", "worker", "--help"], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor"})
    assert out.returncode == 0, out.stderr[-2000:]
    known = {flag for pair in re.findall(r"(?m)^\s+(?:(-\w), )?(--[\w-]+)", out.stdout) for flag in pair if flag}
    assert {"--queues", "--concurrency", "--celery-hostname"} <= known
    for name, svc in RAW["services"].items():
        args = shlex.split(svc["command"]) if isinstance(svc.get("command"), str) else []
        if args[:2] == ["celery", "worker"]:
            unknown = [a.split("=")[0] for a in args[2:] if a.startswith("-") and a.split("=")[0] not in known]
            assert not unknown, f"{name}: `airflow celery worker` does not accept {unknown}"
