# Two entry points, each does all set-up on a fresh machine (Python, pip and gcc only).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
OUT    ?= out/radial_dam

.PHONY: demo test test-slow lint bench clean gl

# Offscreen rendering (forestpy plot, tests/driver/io/test_plot.py) needs Mesa's EGL; a bare
# Debian machine lacks it.  Best effort: without it the plot tests skip with a reason.
gl:
	@ldconfig -p 2>/dev/null | grep -q libEGL_mesa.so.0 || { \
	  echo "installing Mesa EGL for offscreen rendering"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends libegl1 libegl-mesa0 libgl1-mesa-dri libgbm1 libgl1 \
	    >/dev/null) || echo "could not install Mesa: the plot tests will skip"; }

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,mpi]"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/forestpy run demos/radial_dam.py --out $(OUT)

# the fast tests (a few minutes on 2 cores); the ones marked slow (whole solves and runs
# in the CUDA simulator, end-to-end convergence runs) by `make test-slow`: CI runs both
test: $(VENV)/.installed gl
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m "not slow"

# pytest's exit code 5 (no test collected: a renamed marker, a bad -k) fails like any other
test-slow: $(VENV)/.installed gl
	@$(PY) -m pytest -q -m slow; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "test-slow: no slow test was collected" >&2; exit 1; fi; \
	  exit $$rc

bench: $(VENV)/.installed
	$(PY) benchmarks/radial_dam.py

clean:
	rm -rf $(VENV) out .pytest_cache
