# outbox-monitor: one image, several roles chosen by the command —
#   dashboard (the default CMD) · scheduler · any CLI command for one-off use
#   (`docker run --rm --env-file … IMAGE status`, `… replay --id 42 --yes`, `… init-db`).
# Configuration only through environment variables (docs/reference/configuration.md); no secret
# is baked in: pass OUTBOX_MONITOR_DSN or PG*, SLACK_* at run time (compose: env_file).
# Dependencies: requirements-runtime.lock, the runtime part of requirements.lock, which
# `make install` (and so CI) installs; `make lock` compiles both from pyproject.toml with
# the same pins, so the image and CI cannot drift (tests/deploy/test_lock.py checks it).
# Proven without a Docker engine by tests/deploy/test_dockerfile.py: hadolint, and the
# exact ENTRYPOINT/CMD/HEALTHCHECK command lines run on the host in a container-like
# sandbox (own network and PID namespaces, read-only /app) against a throwaway Postgres.

# Stage 1, the dependencies: the locked virtualenv, cut of what the runtime never loads. It
# depends on the lock alone, so a change of the app's sources rebuilds none of it, and the
# final stage's copy of it stays a cached layer.
FROM python:3.11-slim AS deps
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --quiet pip==26.3
COPY requirements-runtime.lock /tmp/requirements-runtime.lock
# pip byte-compiles what it installs (at run time the root is read-only, no .pyc is
# written). Then what the runtime never loads is cut (benchmarks/venv_size.py measures each
# package before and after; benchmarks/RESULTS.md, "Image size"): the installers (nothing
# is installed at run time), pillow (Streamlit loads it only for images; no page shows
# one), the packages' own test suites, pyarrow's Flight and S3 libraries (no module the
# runtime imports links them), its C++ headers and sources, pydeck's Jupyter extension.
RUN /opt/venv/bin/pip install --quiet --require-hashes -r /tmp/requirements-runtime.lock \
 && /opt/venv/bin/pip uninstall --quiet --yes pillow setuptools pip \
 && site=/opt/venv/lib/python3.11/site-packages \
 && find "$site" -type d -name tests -prune -exec rm -rf {} + \
 && rm -rf "$site"/pyarrow/include "$site"/pyarrow/src "$site"/pyarrow/*flight* \
      "$site"/pyarrow/libarrow_s3.so* "$site"/pyarrow/_s3fs.* "$site"/pydeck/nbextension \
      /opt/venv/share/jupyter /opt/venv/etc/jupyter

# Stage 2, the app: the wheel `python -m build` makes (the same pyproject.toml and backend:
# dashboard.py, pages/ and alerts.yml mapped into it as outbox_monitor/app), installed like
# any wheel (no checkout is needed at run time) by a virtualenv at the same path, under
# /opt/app: its files alone (the package, its metadata, the `outbox-monitor` script naming
# /opt/venv/bin/python), byte-compiled. tests/deploy/test_wheel.py runs this same command
# into a fresh virtualenv outside the repository, then serves every page from it.
FROM python:3.11-slim AS app
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --quiet pip==26.3
WORKDIR /src
COPY pyproject.toml README.md dashboard.py alerts.yml ./
COPY outbox_monitor ./outbox_monitor
COPY pages ./pages
RUN /opt/venv/bin/pip wheel --quiet --no-deps --wheel-dir /tmp/dist . \
 && /opt/venv/bin/pip install --quiet --no-deps --no-warn-script-location --root /opt/app \
      /tmp/dist/outbox_monitor-*.whl

# Final stage: the slim base, the dependencies' virtualenv, then the app's files merged into
# it (a change of the sources rewrites only that small layer); no compiler, no pip.
FROM python:3.11-slim
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /tmp \
      --shell /usr/sbin/nologin monitor
COPY --from=deps /opt/venv /opt/venv
COPY --from=app /opt/app/opt/venv /opt/venv
# An empty working folder: an alerts.yml mounted here (or named by OUTBOX_MONITOR_RULES)
# replaces the shipped one.
WORKDIR /app
# HOME=/tmp: Streamlit writes ~/.streamlit; /tmp is the only writable path (compose runs
# the services with a read-only root file system and a tmpfs on /tmp).
# OUTBOX_MONITOR_METRICS_ADDRESS: the scheduler serves /metrics and /healthz on all
# interfaces of the container (port 9108), so Prometheus can scrape it.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    OUTBOX_MONITOR_METRICS_ADDRESS=0.0.0.0
USER 10001:10001
EXPOSE 8501 9108
# Role-aware: probes the dashboard's /_stcore/health or the scheduler's /healthz,
# whichever the container's command runs; one-off commands are healthy (docs/deploy.md).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD ["outbox-monitor", "healthcheck"]
# Exec form: the service is PID 1 and gets docker's SIGTERM (each one stops on it).
ENTRYPOINT ["outbox-monitor"]
CMD ["dashboard", "--address", "0.0.0.0", "--port", "8501"]
