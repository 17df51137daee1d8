# The README's two commands:
#   make run    - the main job on the embedded default
#   make test   - the whole test suite
# Both create ./.venv from PyPI on first use (no conda needed; environment.yml mirrors the same
# dependencies for conda users).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test install clean-venv

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m antipersist_lib demo --out outputs/demo

test: $(STAMP)
	$(PY) -m pytest

clean-venv:
	rm -rf $(VENV)
