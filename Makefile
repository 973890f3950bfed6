# The two commands of the README. Both install what is missing first (scripts/need.sh).
#   make run   the gateway on the bundled example, with the sample backend it points at
#   make test  every test of the workspace, then the instruction budget in release
# and for developers:
#   make check what CI runs (.ci/run): formatting, clippy, then make test

.PHONY: run test check

run:
	@scripts/need.sh cmake protoc
	cargo build --release -p apiagg-gateway -p apiagg-tests --bins
	@scripts/run-example.sh

test:
	@scripts/need.sh cmake prometheus protoc etcd valgrind python:kubernetes
	cargo test --workspace
	cargo build --release -p apiagg-gateway -p apiagg-tests --bins
	cargo test --release -p apiagg-tests --test instruction_budget

check:
	@scripts/need.sh cmake protoc
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(MAKE) test
