#!/usr/bin/env bash
# Usage: tests/kube/build.sh OUT_DIR
# Builds the real Kubernetes servers of this module (go.mod, go.sum) into OUT_DIR: kube-apiserver,
# sample-apiserver and etcd, each from its Go module, with the version stamps of an upstream
# build (`kube-apiserver --version` and `/version` say the release, as kubectl expects); the
# standalone kube-aggregator (the benchmarks' other aggregator) from cmd/kube-aggregator, which
# builds it from k8s.io/kube-aggregator's packages because upstream's main does not start; and
# kube-client, the client-go program of cmd/kube-client (an informer, discovery, a RESTMapper).
# Called by `scripts/need.sh kube`, which caches OUT_DIR by the hash of go.mod, go.sum, this
# file and cmd/.
# GOTOOLCHAIN=local: a module needing a newer Go fails here instead of fetching another toolchain.
set -euo pipefail
out=$1
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"
version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
major=${version#v}
minor=${major#*.}
minor=${minor%%.*}
major=${major%%.*}
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  stamp+=" -X $pkg.gitTreeState=clean"
done
mkdir -p "$out"
# kube-apiserver first: the other two reuse most of what it compiles.
for binary in \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  sample-apiserver=k8s.io/sample-apiserver \
  etcd=go.etcd.io/etcd/server/v3 \
  kube-aggregator=./cmd/kube-aggregator \
  kube-client=./cmd/kube-client; do
  name=${binary%%=*}
  start=$(date +%s)
  module=$(go list -f '{{.Module.Path}}' "${binary#*=}")
  # The programs of this module: name the module each is built on.
  if [ "$module" = "$(go list -m)" ]; then
    module=k8s.io/client-go
    [ "$name" = kube-aggregator ] && module=k8s.io/kube-aggregator
  fi
  echo "building $name ($(go list -m -f '{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' "$module"))" >&2
  nice -n 10 go build -ldflags "-s -w$stamp" -o "$out/$name" "${binary#*=}"
  echo "built $name in $(($(date +%s) - start)) s" >&2
done
