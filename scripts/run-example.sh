#!/usr/bin/env bash
# Runs apiagg on deploy/examples/apiagg.yaml (127.0.0.1:8080) with the sample extension API
# server it registers (wardle.example.com/v1alpha1 on 127.0.0.1:9443). Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
# `make run` builds the `quick` profile; APIAGG_PROFILE=release runs the benchmarks' build.
bin="${CARGO_TARGET_DIR:-target}/${APIAGG_PROFILE:-quick}"
"$bin/sample-apiserver" --listen 127.0.0.1:9443 \
  --group wardle.example.com --version v1alpha1 --resource flunders --kind Flunder &
backend=$!
trap 'kill $backend 2>/dev/null' EXIT
"$bin/apiagg" serve --config deploy/examples/apiagg.yaml
