# One image, several roles by command: dashboard (default), scheduler, and the CLI.
# Configuration only through environment variables (README, Configuration).
FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY outbox_monitor ./outbox_monitor
COPY dashboard.py alerts.yml ./
COPY pages ./pages
RUN /opt/venv/bin/pip install -e .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 monitor
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
WORKDIR /app
ENV PATH=/opt/venv/bin:$PATH HOME=/tmp PYTHONUNBUFFERED=1
USER monitor
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"]
ENTRYPOINT ["outbox-monitor"]
CMD ["dashboard", "--address", "0.0.0.0", "--port", "8501"]
