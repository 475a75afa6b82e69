# specpilot — every target does its own set-up (virtualenv, control-plane binaries).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: help venv binaries tools test test-unit test-kernel test-cluster lint lint-delivery crd docs-reference docs manifests chart-readme cluster-up cluster-down cluster-reset demo bench clean

help:
	@echo "make demo         run a pilot on the local cluster with mock vLLM pods (REHEARSAL=1: and its peak rehearsal; WORKLOAD=1: on a Deployment the team runs)"
	@echo "                  (SCENARIO=schedule: a climb adopted below a load, then the pilot that follows it with a schedule)"
	@echo "make test         lint-free unit, component and cluster tests (sets everything up)"
	@echo "make lint         ruff, mypy, import layering, size limits; helm lint, shellcheck, actionlint"
	@echo "make docs         the documentation site into site/ (mkdocs build --strict)"
	@echo "make cluster-up   start the local control plane + node agent (idempotent)"
	@echo "make cluster-down stop what cluster-up started"

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -U pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

binaries:
	@e2e/local/build.sh >/dev/null

# helm and actionlint, built from the Go module proxy into ~/.cache/specpilot/tools (once).
tools:
	@e2e/tools.sh helm >/dev/null
	@e2e/tools.sh actionlint >/dev/null

# The cluster tier in one pytest and the unit and component tiers in another beside it: most of the
# cluster tier's time is its pilots' clocks, not the CPU. The other tiers' output follows the cluster
# tier's. JUNIT=PREFIX writes
# PREFIX-cluster.xml and PREFIX-rest.xml. One tier with no test selected (say, -m long) is no failure;
# both is (.ci/run also counts the tests both ran).
test: venv binaries tools
	@rest_log=$$(mktemp); \
	$(PY) -m pytest tests/unit tests/component $(PYTEST_ARGS) $(if $(JUNIT),--junitxml=$(JUNIT)-rest.xml) \
	  >"$$rest_log" 2>&1 & rest=$$!; \
	$(PY) -m pytest tests/cluster $(PYTEST_ARGS) $(if $(JUNIT),--junitxml=$(JUNIT)-cluster.xml); cluster=$$?; \
	wait $$rest; rest=$$?; \
	echo "== tests/unit and tests/component"; cat "$$rest_log"; rm -f "$$rest_log"; \
	for status in $$cluster $$rest; do [ "$$status" = 0 ] || [ "$$status" = 5 ] || exit "$$status"; done; \
	[ "$$cluster$$rest" != 55 ] || { echo "no test selected in any tier"; exit 5; }

test-unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The unit tier again under a second OpenBLAS kernel: OpenBLAS picks its kernels by CPU at run time, so an
# assertion that holds only on this machine's floating point fails here, not on a user's machine. The
# second kernel is one this CPU runs that its own pick is not: SkylakeX where it has AVX-512, Sandybridge
# where it has AVX2 (it picks Haswell or Zen), Nehalem otherwise.
test-kernel: venv
	@kernel=Nehalem; \
	if grep -qw avx512f /proc/cpuinfo; then kernel=SkylakeX; elif grep -qw avx2 /proc/cpuinfo; then kernel=Sandybridge; fi; \
	echo "== tests/unit under OPENBLAS_CORETYPE=$$kernel"; \
	OPENBLAS_CORETYPE=$$kernel $(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

test-cluster: venv binaries
	$(PY) -m pytest tests/cluster $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check operator tests bench e2e tools
	$(VENV)/bin/ruff format --check operator tests bench e2e tools
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) tools/sizes.py >/dev/null
	@$(MAKE) --no-print-directory lint-delivery

# The chart in both RBAC modes, the e2e scripts and the kind workflow.
lint-delivery: venv tools
	$$(e2e/tools.sh helm) lint --strict charts/specpilot
	$$(e2e/tools.sh helm) lint --strict charts/specpilot --set 'watchNamespaces={team-a,team-b}' --set replicaCount=2
	$$(e2e/tools.sh helm) lint --strict charts/specpilot --set clusterWide=true
	$$(e2e/tools.sh helm) template specpilot charts/specpilot --namespace specpilot-system --include-crds >/dev/null
	$(VENV)/bin/shellcheck e2e/*.sh e2e/local/*.sh e2e/kind/*.sh
	$$(e2e/tools.sh actionlint) -shellcheck $(VENV)/bin/shellcheck .github/workflows/*.yaml

crd: venv
	$(VENV)/bin/specpilot crd > crds/specpilot.io_speculationpilots.yaml
	cp crds/specpilot.io_speculationpilots.yaml charts/specpilot/files/crds/
	@$(MAKE) --no-print-directory docs-reference

# docs/reference/: the decision rules from analysis/decision/rules.py's RULES, the API from the CRD (a test holds them equal).
docs-reference: venv
	$(PY) tools/docs_reference.py

$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(VENV)/bin/pip install -q -e '.[docs]'
	touch $@

# The documentation site; --strict fails on a broken link or a page outside mkdocs.yml's nav.
docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The kustomize base: the chart's default render, without Helm's own labels (a test holds them equal).
manifests: venv tools
	$(PY) e2e/kustomize_base.py

# The chart's README, from values.yaml's comments (a test holds them equal).
chart-readme: venv tools
	$(PY) e2e/chart_readme.py

cluster-up: venv
	@e2e/local/cluster.sh up

cluster-down:
	@e2e/local/cluster.sh down

cluster-reset:
	@e2e/local/cluster.sh reset

demo: venv
	@SPECPILOT_DEMO_REHEARSAL=$(REHEARSAL) SPECPILOT_DEMO_WORKLOAD=$(WORKLOAD) SPECPILOT_DEMO_SCENARIO=$(SCENARIO) e2e/local/demo.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
