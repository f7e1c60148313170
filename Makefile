PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test demo bench clean

$(BIN)/tlmir: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/tlmir

test: $(BIN)/tlmir
	$(BIN)/python -m pytest

demo: $(BIN)/tlmir
	$(BIN)/python -m tlmir.demo

bench: $(BIN)/tlmir
	$(BIN)/python bench/manual_schedules.py

clean:
	rm -rf $(VENV) build *.egg-info
