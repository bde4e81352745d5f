# Two commands do all the setup on a fresh machine:
#   make run   creates .venv, installs memsift, indexes the bundled example workspace, runs two searches
#   make test  the same install, then the test suite
#   make clean removes what they made: .venv and ./.memsift-home (index, model cache, Prefect's files)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLE := examples/workspace
# One home for every target and for the CLI afterwards (`make run` prints the line that sets it); Prefect's
# files (a temporary server's database, its settings) live inside it, so `make clean` removes them too.
export MEMSIFT_HOME ?= $(CURDIR)/.memsift-home
export PREFECT_HOME ?= $(MEMSIFT_HOME)/prefect
# A fresh PREFECT_HOME makes the first temporary Prefect server create its database: on a busy machine that
# takes longer than Prefect's default 20 s wait.
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120

.PHONY: install run test bench eval lock clean

$(BIN)/memsift: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==0.13.8
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -r requirements.lock -e '.[test]'
	@# the editable install leaves memsift's own modules uncompiled, and with PYTHONDONTWRITEBYTECODE set every
	@# process compiled them again: 0.2 s of each `memsift search` (0.96 -> 0.82 s on examples/workspace)
	$(BIN)/python -m compileall -q core api flows
	touch $@

install: $(BIN)/memsift

run: install
	$(BIN)/memsift --workspace $(EXAMPLE) index
	$(BIN)/memsift --workspace $(EXAMPLE) search "why did the deploy fail with ERR_SSL_PROTOCOL"
	$(BIN)/memsift --workspace $(EXAMPLE) search "what does Dana drink in the morning"
	@echo
	@echo "memsift is in $(BIN). To use it on this index from this shell:"
	@echo "  . $(BIN)/activate && export MEMSIFT_HOME=$(MEMSIFT_HOME)"

# The suite in 2 processes, a test file each at a time (its module fixtures built once): most tests wait on
# the subprocesses they start, so 2 processes take ~2/3 of the time of one on 2 cores (683 s against 960 s).
# Files in the order tests/conftest.py gives them, the longest first (LONGEST_FIRST), not xdist's.
test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

eval: install
	$(BIN)/memsift eval ../shared/bench/locomo-dev/queries.jsonl

bench: install
	$(BIN)/python bench/speed.py

lock:
	$(BIN)/uv pip compile pyproject.toml --extra test -o requirements.lock --python-version 3.11

clean:
	rm -rf $(VENV) .memsift-home .pytest_cache .ruff_cache memsift.egg-info
