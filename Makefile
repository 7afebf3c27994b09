# Two commands do all set-up: `make run` and `make test`. Both create .venv once; each stamp is
# rebuilt only when pyproject.toml changes. `make run` installs what the sample needs (the ONNX
# extra: `auto` embeds MiniLM on ONNX Runtime), `make test` every extra and the test tools.
PYTHON ?= python3
VENV := .venv
# The package asks for a torch range; here the CPU build that lies on this machine's disk is
# installed first, so the range keeps it (a bare torch would pull a multi-GB CUDA build). On a GPU
# host: make TORCH=torch run.
TORCH ?= torch==2.13.0
# pytest-xdist workers: one per core of this 2-core machine. --dist loadfile keeps a test file on
# one worker, so a module's fixture (a whole benchmark run, often) is built once, not once per worker.
# --no-loadscope-reorder: files go out in collection order, the slowest first (tests/conftest.py).
WORKERS ?= 2
XDIST := -n $(WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: run test test-fast docs wheel clean cluster-demo

# Everything installs with uv, which took 17 s for torch and 32 s for the test set here where pip
# took 94 s and 2 min 26 s: a third of the suite's 8-minute budget. uv does not read pip's
# configuration, so the folders of wheels that pip is told about (PIP_FIND_LINKS: this machine's
# torch CPU wheel) are passed on; uv then keeps that torch, as the package's range allows.
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
# --compile-bytecode: uv, unlike pip, writes no .pyc at install, and this machine sets
# PYTHONDONTWRITEBYTECODE=1, so without it every process compiled its imports from source again:
# 3 of a cached run's 7.5 CPU seconds here (benchmarks/bench_bytecode.py).
UV := $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(VENV)/bin/python $(foreach d,$(FIND_LINKS),--find-links $(d))
# The checkout's own modules are installed editable, so they are compiled apart, before each run of
# the suite or the sample (compileall rewrites only what changed; a stale .pyc is never used).
COMPILE := $(VENV)/bin/python -m compileall -q -j 0 tasks flows support retbench tests >/dev/null

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet uv
	$(UV) '$(TORCH)'
	touch $@

$(VENV)/.installed-run: pyproject.toml $(VENV)/.created
	$(UV) -e '.[onnx]'
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.created
	$(UV) -e '.[all,docs,dev]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(COMPILE)
	$(VENV)/bin/retbench run specs/sample.yaml

# The whole suite, as CI runs it; pytest prints its time on the last line.
test: $(VENV)/.installed-test
	$(COMPILE)
	$(VENV)/bin/pytest -q $(XDIST)

# The unit layer only, for the edit loop.
test-fast: $(VENV)/.installed-test
	$(COMPILE)
	$(VENV)/bin/pytest -q $(XDIST) tests/unit

# A Dask scheduler, two workers and a bucket (moto's S3 server, or RETBENCH_DEMO_STORE with keys in the
# environment) on this machine; the sample run plainly and on the cluster, their tables compared,
# everything stopped after (examples/cluster_demo.sh; on real hosts: docs/guide/scale.md).
cluster-demo: $(VENV)/.installed-test
	examples/cluster_demo.sh

# The documentation site into site/ (the test suite builds it too: tests/pipeline/test_docs_site.py).
docs: $(VENV)/.installed-test
	$(VENV)/bin/mkdocs build --strict

# A wheel in dist/ (.ci/check-wheel installs one into a clean venv outside the repository).
wheel: $(VENV)/.installed-test
	$(VENV)/bin/python -m build --wheel --outdir dist .

clean:
	rm -rf $(VENV) .venv-infinity .store out .prefect site dist build
