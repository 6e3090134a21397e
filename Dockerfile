# The kcp-shard-operator image. Stage 1 installs the dependencies exactly as
# requirements-runtime.lock pins them (hashes checked; `make lock` writes it) and then
# the package's wheel alone into a virtualenv; stage 2 copies only that virtualenv onto
# the same base and runs as a non-root numeric user (the chart's runAsUser/runAsGroup),
# with no build tools and no pip cache.
#
#   docker build -t kcp-shard-operator:0.1.0 .
#   kind load docker-image kcp-shard-operator:0.1.0      # for a kind cluster
#   make image                                            # without registry access
#
# BASE_IMAGE is any Debian-like image with python3 (3.11) and its venv module:
# `make image` (hack/image.sh) builds one from Debian packages when no registry
# is reachable, and adds a wheelhouse/ of the package's wheel and the locked
# dependencies' wheels fetched on the host, so that pip in the build stage needs no
# network.
#
# The root filesystem can be read-only: the operator writes only to /tmp
# (the chart mounts an emptyDir there).
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md requirements-runtime.lock wheelhouse* ./
COPY operator ./operator
RUN python3 -m venv /opt/kcp-shard-operator \
 && if ls kcp_shard_operator-*.whl >/dev/null 2>&1; then wheels="--no-index --find-links ."; \
    else wheels=""; /opt/kcp-shard-operator/bin/pip wheel --no-deps --wheel-dir . .; fi \
 && /opt/kcp-shard-operator/bin/pip install ${wheels} --require-hashes -r requirements-runtime.lock \
 && /opt/kcp-shard-operator/bin/pip install --no-index --no-deps kcp_shard_operator-*.whl \
 && /opt/kcp-shard-operator/bin/kcp-shard-operator --help >/dev/null

FROM ${BASE_IMAGE}
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
EXPOSE 8080 9090
ENTRYPOINT ["kcp-shard-operator"]
CMD ["run", "--all-namespaces", "--standalone"]
