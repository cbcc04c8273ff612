# The two commands of the README:
#   make demo   set up everything, then run the main job on the built-in default workload
#   make test   set up everything (Icarus Verilog and Verilator included), then run the whole test suite
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test setup setup-system bench clean

setup:
	@bash scripts/setup.sh

setup-system:
	@bash scripts/setup.sh --system

# The main job: the four systems (GPU roofline, NPU-only, naive NPU+PIM, NeuPIMs) on the
# built-in default workload (GPT3-7B, TP4, a warmed-up ShareGPT-like decode batch of 256).
demo: setup
	$(BIN)/archsim compare --model gpt3-7b --batch 256 --dataset sharegpt

test: setup-system
	$(BIN)/python -m pytest -n 2 -q $(PYTEST_ARGS)

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis rtl/sim_build
