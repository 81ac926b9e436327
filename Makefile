# Two entry points, each does all set-up on a fresh machine (Python, pip and gcc only).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
OUT    ?= out/radial_dam

.PHONY: demo test lint bench clean gl

# Offscreen rendering (forestpy plot, tests/test_plot.py) needs Mesa's EGL; a bare
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

test: $(VENV)/.installed gl
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) benchmarks/radial_dam.py

clean:
	rm -rf $(VENV) out .pytest_cache
