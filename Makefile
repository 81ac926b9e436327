# Two entry points, each does all set-up on a fresh machine (Python, pip and gcc only).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
OUT    ?= out/radial_dam

.PHONY: demo test lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/forestpy run demos/radial_dam.py --out $(OUT)

test: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) benchmarks/radial_dam.py

clean:
	rm -rf $(VENV) out .pytest_cache
