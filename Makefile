# Two commands do all the setup on a fresh machine:
#   make run   creates .venv, installs memsift, indexes the bundled example workspace, runs a search
#   make test  the same install, then the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLE := examples/workspace
export MEMSIFT_HOME ?= $(CURDIR)/.memsift-home

.PHONY: install run test bench eval lock clean

$(BIN)/memsift: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==0.13.8
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -r requirements.lock -e '.[test]'
	touch $@

install: $(BIN)/memsift

run: install
	$(BIN)/memsift --workspace $(EXAMPLE) index
	$(BIN)/memsift --workspace $(EXAMPLE) search "why did the deploy fail with ERR_SSL_PROTOCOL"
	$(BIN)/memsift --workspace $(EXAMPLE) search "what does Dana drink in the morning"

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

eval: install
	$(BIN)/memsift eval ../shared/bench/locomo-dev/queries.jsonl

bench: install
	$(BIN)/python bench/speed.py

lock:
	$(BIN)/uv pip compile pyproject.toml --extra test -o requirements.lock --python-version 3.11

clean:
	rm -rf $(VENV) .memsift-home .pytest_cache
