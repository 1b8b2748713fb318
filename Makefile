# The commands the README tells people to run. `make demo` and `make test` set up everything
# they need on a fresh machine (a venv in .venv with envbuild and its test tools).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEMO   := .demo

.PHONY: demo test test-thorough test-all fuzz lint docs docs-reference check-lock bench clean image image-h200-twin bootstrap test-images docs-snippets

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,docs]'
	touch $@

## demo: provision the embedded default (cpu) profile into ./.demo, then smoke + distributed step. Its locked
## files come from any source that serves their sha256: the PyTorch CPU index, or pip's configured mirror.
demo: $(BIN)/.installed
	$(BIN)/envbuild provision --profile cpu --root $(DEMO)/data --home $(DEMO)/home
	$(BIN)/envbuild smoke --profile cpu --root $(DEMO)/data
	$(BIN)/envbuild dist-step --profile cpu --root $(DEMO)/data --nproc 2

# The tests run on every core and one worker more (pytest-xdist; `make test JOBS=4` to choose): many
# tests wait on a child (a hung rank, a stalled download, a deadline) and the extra worker fills
# that time. A test file stays on one worker (--dist loadfile: its module fixtures are built once).
# Each test has 10 minutes (pyproject.toml).
JOBS   ?= $(shell $(PYTHON) -c 'import os; print((os.cpu_count() or 1) + 1)')
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider -n $(JOBS) --dist loadfile

.PHONY: check
## check: the quick loop (about 2 CPU-minutes: 1 to 2 minutes on 2 idle cores, 4 on a busy machine): the tests
## that need no network and run no real installer, i.e. not slow, network or image; `make test` runs the rest too
check: $(BIN)/.installed
	$(PYTEST) -q -m "not slow and not network and not image"

## test: what CI runs (no GPU): ruff (lint at 100 columns, and the format) and mypy strict over the code and the tests (mypy's cache in
## .mypy_cache: a few seconds warm), the test suite and the lock gate. Of the tests that need PyPI
## it runs those that install real packages from pip's sources (pip_sources: the torch CPU venv,
## Poetry, a build backend). The long end-to-end runs whose ground it covers (the h200-cu132 stack on
## its twin among them) are make test-thorough's: tests/support/thorough.py lists them.
test: $(BIN)/.installed
	$(BIN)/ruff check envbuild tests bench
	$(BIN)/ruff format --check envbuild tests bench docs/hooks
	$(BIN)/mypy
	$(PYTEST) -m "not image and not thorough and (not network or pip_sources or seed_twin)"
	$(BIN)/envbuild check-lock --offline

## fuzz: the input fuzzing (damaged specs, locks, receipts) and the round trips of every rendered file
## through its real reader, and the uv sync parity property (200 generated projects locked by uv), with many
## more examples than `make test` runs (about 20 minutes on 2 cores)
fuzz: $(BIN)/.installed
	ENVBUILD_FUZZ_EXAMPLES=500 ENVBUILD_PROPERTY_EXAMPLES=5000 $(PYTEST) tests/test_fuzz.py tests/test_render_roundtrip.py tests/test_fromlock_sync.py

## docs: serve the documentation site on http://127.0.0.1:8000, rebuilt on every change (make test builds it strictly)
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

## docs-reference: rewrite the reference pages generated from the code (docs/reference/cli.md, stack-spec.md,
## exit-codes.md, check-lock.md, json.md) and the stage table of docs/architecture.md (from docs/hooks/stages.py);
## tests/test_docs.py fails when a committed one is stale
docs-reference: $(BIN)/.installed
	$(BIN)/python docs/hooks/reference.py --write

## test-images: the real image build and the fresh-host (Ubuntu 22.04, Python 3.10) operator path
test-images: $(BIN)/.installed
	$(BIN)/python -m pytest -m image -p no:cacheprovider

## test-thorough: the long end-to-end runs whose ground make test already covers (marker thorough: the pages
## that install, the Dockerfile's layers run outside an image, the gloo step on 5 to 7 processes; about 3 minutes)
test-thorough: $(BIN)/.installed
	$(PYTEST) -m "thorough"

## test-all: every test: also those that read real PyPI metadata (network) and the image builds (image)
test-all: $(BIN)/.installed
	$(PYTEST)

## image: build the cpu profile's image with buildah from a local Debian base (root; see docker/build-image.sh)
image: $(BIN)/.installed
	docker/build-image.sh cpu

## image-h200-twin: the h200-cu132 Dockerfile built with buildah against the stack twin, up to the torch
## step, then its guard shown on the prebuilt-cuda layer (root; timings in build/image/h200-twin.json)
image-h200-twin: $(BIN)/.installed
	$(BIN)/python -m pytest tests/test_image_build.py -m image -k h200 -s -p no:cacheprovider

## bootstrap: the one-archive installer for a fresh host with only python3 (dist/envbuild-bootstrap-*.tar.gz);
## BOOTSTRAP_PYTHON=3.12 for a host Python other than 3.10
bootstrap: $(BIN)/.installed
	$(BIN)/python bootstrap/build.py -o dist $(if $(BOOTSTRAP_PYTHON),--python-version $(BOOTSTRAP_PYTHON))

lint: $(BIN)/.installed
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/ruff check envbuild tests bench
	$(BIN)/mypy

bench: $(BIN)/.installed
	$(BIN)/python bench/bench_provision.py

clean:
	rm -rf $(DEMO) .cache/tests build dist site *.egg-info "$${ENVBUILD_TEST_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/envbuild-tests}"

## docs-snippets: run the commands of the README's tour, the tutorials and the how-tos as written and write
## each command's output into the page (make test runs the same commands and fails when an output shown
## there is stale; the installing pages are make test-thorough's). Each page runs in private folders
## beside the /tmp ones it names (tests/support/tour.py), so nothing of a reader's is touched.
DOCS_PAGES := README.md $(wildcard docs/tutorials/*.md) $(wildcard docs/how-to/*.md) docs/fleet.md
docs-snippets: $(BIN)/.installed
	$(BIN)/python tests/support/tour.py --write $(DOCS_PAGES)
