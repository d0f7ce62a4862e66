# The two README commands: `make demo` (run the product on a throwaway Postgres with
# realistic traffic) and `make test` (lint + the whole suite). Both set up what they need.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint install browser clean

$(BIN)/outbox-monitor: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

install: $(BIN)/outbox-monitor

# extra options: make demo ARGS='--port 8502 --rate 50'
demo: install
	$(BIN)/outbox-monitor demo $(ARGS)

# Debian's chromium for the real-browser tests (never a downloaded browser).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: install browser lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) test-artifacts .pytest_cache
