# One command per chore. Everything runs from the repo's virtualenv (.venv), made by `make venv`.
SHELL := /bin/bash
PY ?= .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: release host-packages image lock venv a3s-core-binding lint format typecheck test test-unit test-integration test-e2e binaries cluster-up cluster-down crds bench bench-peers demo demo-down chaos chaos-ci chaos-cluster

$(VENV_STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv .venv
	@echo "[venv] installing berth and its dev tools into .venv"
	@.venv/bin/pip install -q --upgrade pip
	@PYTHONWARNINGS=ignore::UserWarning .venv/bin/pip install -q -e '.[dev]'
	@echo "[venv] installing the optional A3S Code SDK (a3s-code, for the bridge's tests)"
	@PYTHONWARNINGS=ignore::UserWarning .venv/bin/pip install -q -e '.[a3s]' \
	  || echo "[venv] a3s-code cannot be installed here: the A3S bridge tests will skip"
	@touch $@

venv: $(VENV_STAMP)

## Berth's PyO3 binding over a3s-code-core 9.x (a3s_core_binding/), built with maturin from the
## crate registry, cached under ~/.cache/berth/a3s-core-binding/ by version and content hash,
## installed into .venv (the tests in modules named *a3s_core* use it).
a3s-core-binding: $(VENV_STAMP)
	bash hack/a3s-core-binding.sh

## Debian packages the dev cluster and the image build need (installed when missing; needs root).
host-packages:
	@bash hack/host-packages.sh

## Berth's image from the Dockerfile, loaded into the dev cluster's nodes (cached by content hash).
image: host-packages
	bash hack/image.sh load

## requirements.lock: the image's dependency set, every package pinned with its hashes (the
## Dockerfile installs it with --require-hashes). Re-run after changing pyproject.toml's
## dependencies; existing pins are kept unless LOCK_FLAGS=--upgrade.
LOCK_FLAGS ?=
lock: $(VENV_STAMP)
	.venv/bin/uv pip compile --quiet --generate-hashes --universal --python-version 3.11 \
	  --custom-compile-command 'make lock' $(LOCK_FLAGS) \
	  pyproject.toml hack/build-requirements.in -o requirements.lock

## What a release publishes, from this checkout (hack/release.sh): the image as an OCI archive,
## the Helm chart package, the wheel and sdist, SHA256SUMS, in dist/release/$(VERSION).
## VERSION defaults to (and must be) pyproject.toml's version.
release: $(VENV_STAMP) host-packages
	bash hack/release.sh $(VERSION)

lint: $(VENV_STAMP)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports
	$(PY) -m pytest -q -p no:cacheprovider tests/unit/test_code_limits.py

format: $(VENV_STAMP)
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

typecheck: $(VENV_STAMP)
	.venv/bin/mypy

binaries:
	bash hack/build-binaries.sh all

## Lint, types, then unit, integration (real control plane) and e2e tests. The cluster tests start
## the dev cluster themselves (or reuse one that is up, or use $$KUBECONFIG if
## BERTH_EXTERNAL_CLUSTER=1).
test: $(VENV_STAMP) host-packages binaries a3s-core-binding lint typecheck
	$(PY) -m pytest -q -rfE --durations=20 tests

test-unit: $(VENV_STAMP) a3s-core-binding
	$(PY) -m pytest -q tests/unit

test-integration: $(VENV_STAMP) host-packages binaries a3s-core-binding
	$(PY) -m pytest -q tests/integration

test-e2e: $(VENV_STAMP) host-packages binaries
	$(PY) -m pytest -q tests/e2e

cluster-up: $(VENV_STAMP) host-packages binaries
	bash hack/cluster-up.sh

cluster-down:
	bash hack/cluster-down.sh

crds: $(VENV_STAMP)
	$(PY) -m berth_operator.api.crdgen crds

## The crash campaign (docs/chaos.md): CHAOS_SCENARIOS seeded scenarios on CHAOS_JOBS processes,
## no Kubernetes; its report ends with "N scenarios, V violations". chaos-ci is the size `make
## test` runs (tests/integration/chaos).
CHAOS_SCENARIOS ?= 10000
CHAOS_JOBS ?= 2
chaos: $(VENV_STAMP)
	$(PY) -m tests.chaos --scenarios $(CHAOS_SCENARIOS) --jobs $(CHAOS_JOBS) --progress 100

chaos-ci: $(VENV_STAMP)
	$(PY) -m pytest -q -s tests/integration/chaos

## The campaign's cluster faults on the dev cluster's real nodes (operator leader/standby killed,
## nodes lost and drained racing evictions, pods force-deleted); 1-3 min per scenario. `make test`
## runs 3 of them (tests/e2e/test_cluster_chaos.py).
CHAOS_CLUSTER_SCENARIOS ?= 10
chaos-cluster: $(VENV_STAMP) host-packages binaries
	$(PY) -m tests.chaos.cluster --scenarios $(CHAOS_CLUSTER_SCENARIOS)

## Every benchmark once (bench/curves.py, which reruns two of them to draw bench/curves.png, is left out).
bench: $(VENV_STAMP)
	@for b in $(filter-out bench/curves.py bench/peers.py bench/peer_%.py,$(wildcard bench/*.py)); do echo "== $$b"; $(PY) $$b || exit 1; done

## Berth against bare pods, Jobs and agent-sandbox on the dev cluster, one run (bench/peers.py;
## about 25 min): ends with the PEER lines. BERTH_BENCH_PEERS_N=100 for a quick placement.
bench-peers: $(VENV_STAMP)
	bash hack/build-binaries.sh agent-sandbox
	$(PY) bench/peers.py --fresh

demo: $(VENV_STAMP) host-packages binaries
	bash hack/demo.sh

demo-down:
	bash hack/demo-down.sh
