# The two commands of the README. Both install what is missing first (scripts/need.sh).
#   make run   the gateway on the bundled example, with the sample backend it points at
#   make test  every test of the workspace (what CI runs)

.PHONY: run test

run:
	@scripts/need.sh cmake protoc
	cargo build --release -p apiagg-gateway -p apiagg-tests --bins
	@scripts/run-example.sh

test:
	@scripts/need.sh cmake prometheus protoc etcd python:kubernetes
	cargo test --workspace
