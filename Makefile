# Two commands do all set-up: `make run` and `make test`. Both create .venv once
# (idempotent: the stamp file is rebuilt only when pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test docs bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/retbench run specs/sample.yaml

test: $(STAMP)
	$(VENV)/bin/pytest -q

# The documentation site into site/ (the test suite builds it too: tests/pipeline/test_docs_site.py).
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) .store out .prefect site
