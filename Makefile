# tay developer entry points. Every target starts from the project virtualenv (.venv),
# which `make venv` creates from pyproject.toml with nothing installed by hand.

PYTHON_BOOT ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
CLIENT_VENV := .venv-tay-client
CLIENT_PY   := $(CLIENT_VENV)/bin/python
NATIVE_SRC  := $(wildcard csrc/*.c csrc/*.h) tay/_native/_build.py

# XDG data home, so the default is valid from any checkout (strict sync refuses /tmp).
DATA_DIR    ?= $(or $(XDG_DATA_HOME),$(HOME)/.local/share)/tay/data
DURABILITY  ?= sync
PYTEST_ARGS ?=

.PHONY: venv native client-venv run test test-deps fuzz browser-deps bench bench-peers \
	bench-deps bench-micro bench-dashboard dashboard-screenshots clean

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py $(NATIVE_SRC)
	test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) tay/_native/_build.py >/dev/null  # one fresh in-place build, whatever built before
	$(PY) -m compileall -q tay >/dev/null  # an editable install has no .pyc (a start compiles)
	$(PY) -m tay._bundle >/dev/null  # tay serve's bytecode in one checked file (tay/_bundle.py)
	$(PY) -c "import tay._native as n; print('tay native:', n.IMPLEMENTATION, n.CRC32C_IMPLEMENTATION)"
	touch $(STAMP)

# Rebuild the cffi module in place after editing csrc/ (the venv keeps the editable install).
native: venv
	$(PY) tay/_native/_build.py

# The unmodified tay-client 1.4.0 from PyPI, isolated: it is also a package named `tay`.
client-venv: $(CLIENT_PY)

$(CLIENT_PY):
	$(PYTHON_BOOT) -m venv $(CLIENT_VENV)
	$(CLIENT_PY) -m pip install --quiet 'tay-client[http-pkcs12]==1.4.0'

run: venv
	$(VENV)/bin/tay serve --data-dir "$(DATA_DIR)" --init-if-missing \
		--durability $(DURABILITY) $(if $(filter sync,$(DURABILITY)),--validated-filesystem)

# $(call debian_package,NAME,WHAT): Debian's package NAME (its command of the same name),
# installed when missing and this is root; otherwise a warning that WHAT will be skipped.
debian_package = command -v $(1) >/dev/null || { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; else echo "WARNING: $(1) is missing and this is not root: $(2) will be skipped" >&2; fi; }

# curl with HTTP/2 drives the HTTP/2 tests; Debian's curl has it (CI runs as root).
# Debian's faketime (libfaketime) moves a real server's wall clock in the wall-clock tests;
# without root they are skipped, and the run ends with a section that says so.
test-deps:
	command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }
	@$(call debian_package,faketime,the wall-clock tests)

test: venv client-venv browser-deps test-deps
	TAY_CLIENT_PYTHON=$(abspath $(CLIENT_PY)) $(PY) -m pytest -q $(PYTEST_ARGS)

# The dashboard's browser tests drive Debian's Chromium through Playwright (its own browser
# download is never used). Installed when running as root; otherwise the tests are skipped
# and the run ends with a loud "BROWSER TESTS NOT RUN" section.
browser-deps:
	@$(call debian_package,chromium,the dashboard's browser tests)

# The long fuzz run: every fuzzer of tests/fuzz with FUZZ_EXAMPLES examples (make test runs
# a short pass); what went in is printed and written to .tmp/fuzz-report.json.
FUZZ_EXAMPLES ?= 20000
fuzz: venv
	mkdir -p .tmp
	TAY_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) TAY_FUZZ_REPORT=$(abspath .tmp/fuzz-report.json) \
		$(PY) -m pytest -q -s --timeout=0 -p no:cacheprovider tests/fuzz

bench: venv client-venv
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(VENV)/bin/tay bench reference --client tay-client

# The peers need Debian's beanstalkd and redis-server (root, as on the project's machines).
# perf (linux-perf) only counts the server's system calls; a run without it says so.
bench-deps:
	command -v beanstalkd >/dev/null && command -v redis-server >/dev/null && \
		command -v perf >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq beanstalkd redis-server && \
		  { apt-get install -y -qq linux-perf || true; }; }

bench-peers: venv client-venv bench-deps
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) -m benchmarks.peers.run_peers --jobs 10000 --client tay-client

# Server time of dashboard pages with 100,000 retained jobs (docs/dashboard.md).
bench-dashboard: venv
	$(PY) -m benchmarks.dashboard_render --jobs 100000

# The screenshots in docs/dashboard.md (needs Chromium: see browser-deps).
dashboard-screenshots: venv browser-deps
	$(PY) -m tests.dashboard.screenshots docs/images

bench-micro: venv
	$(PY) -m pytest benchmarks/micro -q --benchmark-only --timeout=0

clean:
	rm -rf $(VENV) $(CLIENT_VENV) build *.egg-info tay/_native/*.so tay/_native/_tay_native.c
