#!/usr/bin/env bash
# Usage: scripts/need.sh COMMAND... [python:MODULE...]
# Installs, with apt-get, the Debian package of every COMMAND that is not on the PATH, and with
# pip every Python MODULE that does not import. As root it installs; otherwise through sudo when
# there is one; else it says what to install and fails.
set -euo pipefail
commands=()
for arg in "$@"; do
  case "$arg" in
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
)
missing=()
for cmd in "$@"; do
  if ! command -v "$cmd" >/dev/null 2>&1; then
    missing+=("${package[$cmd]:?no package known for $cmd}")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
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
