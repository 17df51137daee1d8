# The README's commands:
#   make run    - the main job on the embedded default
#   make test   - the whole test suite (ruff format check and lint first)
#   make format - apply ruff's formatting and safe lint fixes
#   make lab    - JupyterLab on the notebooks, with the kit's kernel registered in ./.venv
#   make llama  - build llama.cpp for a portable CPU baseline (done by run/test; LLAMA_BASELINE=...)
#   make models - fetch and verify every registry model (run/test fetch what they use on first use)
# All create ./.venv from PyPI on first use (no conda needed; environment.yml mirrors the same
# dependencies for conda users), build llama.cpp once for a named CPU baseline (never -march=native
# unless LLAMA_BASELINE=native is asked for), make sure a Java runtime exists (ScienceWorld runs in
# a JVM) and that ALFWorld's game files are unpacked. `make test` also needs Chromium and its driver
# (Debian's chromium, chromium-driver: `make browser`) for the JupyterLab browser test, and bubblewrap
# (`make sandbox`) for the ARC grader's kernel sandbox.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# ALFWorld game files: a user's $ALFWORLD_DATA (alfworld-download's folder) wins; otherwise the
# archive shipped beside this repository in ../shared/data/alfworld is unpacked into .data/.
ALFWORLD_ARCHIVE := $(firstword $(wildcard ../shared/data/alfworld/alfworld-games-json_2.1.1.tar.xz))
ALFWORLD_DATA ?= $(CURDIR)/.data/alfworld
export ALFWORLD_DATA

# llama.cpp: built from the sources vendored in the pinned llama-cpp-python sdist, for a named CPU
# baseline (docs/embedded-default.md#portability): x86-64-v3 (AVX2/FMA/F16C/BMI2, no AVX-512/AMX) on
# x86-64; x86-64-v2 for CPUs without AVX2; native only when asked. The kit runs the build it names.
LLAMA_BASELINE ?= $(if $(filter x86_64 amd64,$(shell uname -m)),x86-64-v3,native)
LLAMA_CPP_PYTHON := 0.3.36
LLAMA_INFO := .data/llama.cpp/$(LLAMA_CPP_PYTHON)-$(LLAMA_BASELINE)/build-info.json
LLAMA_COMPILED := .data/llama.cpp/$(LLAMA_CPP_PYTHON)-$(LLAMA_BASELINE)/compile.json
export ANTIPERSIST_LLAMA_BASELINE := $(LLAMA_BASELINE)

.PHONY: run test format lab install java browser sandbox alfworld-data clean-venv llama llama-rebuild models

# llama-cpp-python is installed as its Python binding only (-DLLAMA_BUILD=OFF: pip compiles nothing);
# it loads the kit's portable library through LLAMA_CPP_LIB_PATH. --no-cache-dir keeps that
# library-less wheel out of pip's cache, where another project could pick it up.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" $(PY) -m pip install --quiet --no-cache-dir --no-deps 'llama-cpp-python==$(LLAMA_CPP_PYTHON)'
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# The compile phase needs only the standard library, pip and cmake, so the system Python runs it while
# pip fills .venv (install runs both at once); the kit's environment then checks what the library was
# compiled for and writes build-info.json.
$(LLAMA_COMPILED):
	PYTHONPATH=$(CURDIR) $(PYTHON) -m antipersist_lib.serving.llama_build compile --baseline $(LLAMA_BASELINE)

$(LLAMA_INFO): $(LLAMA_COMPILED) | $(STAMP)
	$(PY) -m antipersist_lib llama build --baseline $(LLAMA_BASELINE)
	@touch $@

llama: $(LLAMA_INFO)

llama-rebuild: $(STAMP)
	$(PY) -m antipersist_lib llama build --baseline $(LLAMA_BASELINE) --force

models: $(STAMP)
	$(PY) -m antipersist_lib models fetch --all

# the llama.cpp compile (minutes of CPU) overlaps pip's downloads, the Java install and the games' unpacking
install:
	@$(MAKE) --no-print-directory -j4 $(STAMP) $(LLAMA_COMPILED) java alfworld-data
	@$(MAKE) --no-print-directory llama

java:
	@if command -v java >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing a Java runtime for ScienceWorld (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null; \
	else \
	  echo "ScienceWorld needs a Java runtime: install one (e.g. 'sudo apt-get install default-jre-headless') and re-run"; exit 1; \
	fi

# The JupyterLab test drives Debian's Chromium through its matching chromedriver (both given by
# path, so Selenium never downloads a driver or a browser).
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Chromium and chromedriver for the JupyterLab test (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else \
	  echo "the JupyterLab test needs /usr/bin/chromium and /usr/bin/chromedriver: install them (e.g. 'sudo apt-get install chromium chromium-driver') and re-run"; exit 1; \
	fi

# The ARC study runs model-written code only inside a kernel sandbox (docs/arc-sandbox.md): bubblewrap
# (Debian's bubblewrap) with user namespaces. The tests attack it as root and as an unprivileged user.
sandbox:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing bubblewrap for the ARC sandbox (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	else \
	  echo "the ARC sandbox needs bubblewrap: install it (e.g. 'sudo apt-get install bubblewrap') and re-run"; exit 1; \
	fi

alfworld-data:
	@if [ -d "$(ALFWORLD_DATA)/json_2.1.1" ] || [ "$$(basename "$(ALFWORLD_DATA)")" = json_2.1.1 -a -d "$(ALFWORLD_DATA)" ]; then :; \
	elif [ -n "$(ALFWORLD_ARCHIVE)" ]; then \
	  echo "unpacking ALFWorld games into $(ALFWORLD_DATA)"; \
	  mkdir -p "$(ALFWORLD_DATA)" && tar -xJf "$(ALFWORLD_ARCHIVE)" -C "$(ALFWORLD_DATA)"; \
	else \
	  echo "no ALFWorld games: set ALFWORLD_DATA to the folder filled by 'alfworld-download' (it holds json_2.1.1/)"; exit 1; \
	fi

run: install
	$(PY) -m antipersist_lib main --profile params/main/smoke.yaml

# ruff (format check + lint, settings in pyproject.toml) first: it fails in seconds, the suite in minutes
test: install browser sandbox
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) -m pytest

# rewrite the tree the way `make test` checks it
format: install
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# Notebooks open with the repository root as JupyterLab's root (notebooks/ and params/ side by
# side); they find their files through antipersist_lib.paths.repo_root(), whatever the cwd.
lab: install
	$(PY) -m ipykernel install --sys-prefix --name antipersist --display-name "antipersist (.venv)"
	$(PY) -m jupyter lab --ServerApp.root_dir=$(CURDIR) --ContentsManager.preferred_dir=notebooks \
	  $(if $(filter 0,$(shell id -u)),--allow-root)

clean-venv:
	rm -rf $(VENV)
