# The image of every Airflow service in docker-compose.yaml (api-server, scheduler, dag-processor,
# triggerer, celery workers, init), in two builds that differ only in torch's:
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu    (the default: every service but the GPU workers;
#                                                            ~200 MB of torch instead of ~3 GB of CUDA wheels)
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128  (the GPU workers: CUDA 12.8; pick the cuXYZ your
#                                                            driver supports, `nvidia-smi` shows its CUDA version)
# Named explicitly, never by accident: PyPI's default torch is a CUDA build whose CUDA may be newer than the
# host's driver, and then torch.cuda.is_available() is quietly False.
FROM apache/airflow:3.3.2-python3.11
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

# Runtime deps first so that editing include/ does not invalidate this (large) layer.
# apache-airflow is repeated with the base image's version so pip can never up- or
# downgrade Airflow while resolving the other pins. The celery/postgres providers are not
# in requirements.txt because only this CeleryExecutor + Postgres deployment needs them.
COPY --chown=airflow:0 requirements.txt /opt/airflow/requirements.txt
# torch first, from the build's index (its version is requirements.txt's pin), so that the next step finds
# torch==… already satisfied and never fetches PyPI's build.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" \
        "$(grep -E '^torch==' /opt/airflow/requirements.txt)"
RUN pip install --no-cache-dir \
        "apache-airflow==${AIRFLOW_VERSION}" \
        -r /opt/airflow/requirements.txt \
        apache-airflow-providers-celery==3.26.0 \
        apache-airflow-providers-postgres==7.1.1 \
        psycopg2-binary==2.9.13

# Editable install rooted at AIRFLOW_HOME: the package lives in /opt/airflow/include,
# which is exactly where docker-compose.yaml bind-mounts ./include, so the mounted
# source is what every container imports (the .pth points at the mount, not a copy).
# README.md is copied because pyproject.toml names it as the project readme.
COPY --chown=airflow:0 pyproject.toml README.md /opt/airflow/
COPY --chown=airflow:0 include/ /opt/airflow/include/
RUN pip install --no-cache-dir --no-deps -e /opt/airflow

# Holds the simple auth manager's passwords file (a named volume in compose). Created
# here so the volume is initialised with this owner/mode; group 0 must be able to write
# because compose runs the containers as ${AIRFLOW_UID}:0.
RUN mkdir -p /opt/airflow/auth && chmod 0775 /opt/airflow/auth
