# syntax=docker/dockerfile:1
# One image for the three Berth programs: berth-operator (default command), berth-session (session
# pods) and berth-worker (LaneWorker pods); the operator sets the command of the pods it creates.
#
# Runs as the numeric non-root user 10001 with a read-only root filesystem: bytecode is compiled at
# build time, HOME and TMPDIR point at /tmp, and everything a program writes goes to /tmp (an
# emptyDir in the chart) or to a mounted volume (the shared store/workspace PVC, the termination
# log). Paths are taken from env (BERTH_STORE_DIR, BERTH_WORKSPACE, ...), never hard-coded.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: wheel of berth and its dependencies into a venv ------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Dependencies first, in their own layer: a change to Berth's source rebuilds only the layers
# below (seconds), not the dependency install (a minute). They come from requirements.lock (`make
# lock`: every package, setuptools and wheel too, pinned with its hashes), and pip refuses anything
# unpinned or whose hash differs: the image has exactly the tested dependency set.
COPY pyproject.toml README.md requirements.lock ./
RUN python -m venv /opt/berth \
 && /opt/berth/bin/pip install --require-hashes --no-deps -r requirements.lock
COPY operator/ operator/
COPY session_runtime/ session_runtime/
COPY berth_contract/ berth_contract/
COPY berth_telemetry/ berth_telemetry/
COPY plugin/kubectl_berth/ plugin/kubectl_berth/
RUN /opt/berth/bin/pip install --no-deps --no-build-isolation . \
 && /opt/berth/bin/python -m compileall -q -j 0 /opt/berth/lib \
 && /opt/berth/bin/python -c "import berth_operator.main, session_runtime.server, session_runtime.worker, berth_contract, berth_telemetry.tracing, kubectl_berth.cli" \
 && test -x /opt/berth/bin/berth-operator \
 && test -x /opt/berth/bin/berth-session \
 && test -x /opt/berth/bin/berth-worker \
 && test -x /opt/berth/bin/kubectl-berth

# --- runtime: slim base, tools the agent's bash/edit lane needs, no compilers --------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG BERTH_UID=10001
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid ${BERTH_UID} berth \
 && useradd --system --uid ${BERTH_UID} --gid ${BERTH_UID} --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin berth
COPY --from=build --chown=0:0 /opt/berth /opt/berth
ENV PATH=/opt/berth/bin:$PATH \
    HOME=/tmp \
    TMPDIR=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# OCI annotations (the image-spec's pre-defined keys); hack/release.sh sets version, revision and
# created for a release build.
ARG VERSION=""
ARG REVISION=""
ARG CREATED=""
ARG SOURCE=""
LABEL org.opencontainers.image.title="berth" \
      org.opencontainers.image.description="Berth: operator, session runtime and lane worker" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}"
WORKDIR /tmp
VOLUME ["/tmp"]
USER 10001:10001
# Session pods and the operator serve HTTP on 8080/8081; workers export metrics on 9090.
EXPOSE 8080 8081 9090
CMD ["berth-operator"]
