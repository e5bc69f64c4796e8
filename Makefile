# The README's two commands. Each sets up what is missing (scripts/setup.sh is idempotent), then runs.
ARGS ?=
.PHONY: setup train test
setup:
	@bash scripts/setup.sh
train: setup
	.venv/bin/python -m driver.train default $(ARGS)
test: setup
	.venv/bin/python -m pytest --durations=20 $(ARGS)
