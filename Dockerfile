# syntax=docker/dockerfile:1
# The kcp-shard-operator image. Stage 1 builds the package into a wheel and
# installs it with its dependencies into a virtualenv; stage 2 copies only that
# virtualenv onto the same slim Python base and runs as a non-root numeric user
# (the chart's runAsUser/runAsGroup), with no build tools and no pip cache.
#
#   docker build -t kcp-shard-operator:0.1.0 .
#   kind load docker-image kcp-shard-operator:0.1.0      # for a kind cluster
#
# The root filesystem can be read-only: the operator writes only to /tmp
# (the chart mounts an emptyDir there).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/kcp-shard-operator \
 && /opt/kcp-shard-operator/bin/pip install /wheels/kcp_shard_operator-*.whl \
 && /opt/kcp-shard-operator/bin/kcp-shard-operator --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kcp-shard-operator" \
      org.opencontainers.image.description="Runs and upgrades sharded kcp on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
# kopf names the process after its user when POD_ID is unset (docker run):
# give the numeric user a passwd entry. The chart sets POD_ID, so any other
# runAsUser works there too.
RUN groupadd --system --gid 65532 kcp-shard-operator \
 && useradd --system --uid 65532 --gid 65532 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin kcp-shard-operator
COPY --from=build /opt/kcp-shard-operator /opt/kcp-shard-operator
ENV PATH=/opt/kcp-shard-operator/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["kcp-shard-operator"]
CMD ["run", "--all-namespaces", "--standalone"]
