# The two commands of the README. Both install what is missing first (scripts/need.sh).
#   make run   the gateway on the bundled example, with the sample backend it points at
#   make test  every test of the workspace, then the instruction budget in release
# and for developers:
#   make check what CI runs (.ci/run): make lint (formatting, clippy), then make test
#   make bench the benchmark scripts of tests/bench, short (BENCH="instructions" picks some)
#   make fuzz  every fuzz target for FUZZ_SECONDS each (default 30; needs cargo-fuzz)
#   make fuzz-build  compiles every fuzz target (no instrumentation, stable; part of make lint)

FUZZ_SECONDS ?= 30

.PHONY: run test lint check bench fuzz fuzz-build

# `run` builds the `quick` profile (release without fat LTO: minutes, not a quarter of an hour);
# the benchmarks, the instruction budget and the container image build `release`.
run:
	@scripts/need.sh cmake protoc
	cargo build --profile quick -p apiagg-gateway -p apiagg-tests --bins
	@scripts/run-example.sh

test:
	@scripts/need.sh cmake prometheus protoc etcd valgrind openssl python:kubernetes npm:tests/oidc kube
	cargo test --workspace
	cargo build --release -p apiagg-gateway -p apiagg-tests --bins
	@# One callgrind run at a time: what a run does besides serving grows with its wall time.
	cargo test --release -p apiagg-tests --test instruction_budget -- --test-threads=1

lint:
	@scripts/need.sh cmake protoc g++
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	@# No module of the request path imports one that imports it back.
	python3 scripts/module_cycles.py gateway/src/request >/dev/null || python3 scripts/module_cycles.py gateway/src/request
	@$(MAKE) --no-print-directory fuzz-build

check: lint test

bench:
	@scripts/need.sh cmake protoc valgrind nginx
	@scripts/bench.sh

fuzz:
	@tests/bench/fuzz.sh $(FUZZ_SECONDS)

# The fuzz crate is outside the workspace: nothing else compiles or formats it. A check on
# stable compiles every target (libfuzzer-sys without instrumentation), so a change that breaks
# one fails CI.
fuzz-build:
	cargo fmt --manifest-path fuzz/Cargo.toml -- --check
	cargo check --manifest-path fuzz/Cargo.toml --bins
