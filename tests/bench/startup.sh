#!/usr/bin/env bash
# Start-up benchmark: time from `apiagg serve` to mux completion (/readyz 200) with 200 APIServices,
# and apiagg's peak RSS once started.
#
# Usage (from the repo root):   tests/bench/startup.sh
#
# Setup:
#   delegate   sample-apiserver --fixtures <fixtures>/kubernetes/discovery (22 groups)
#   backends   one Python process (bench_helper.py serve-fake) listening on $SERVERS ports, i.e.
#              $SERVERS extension API servers, each serving its share of $APISERVICES groups. The
#              groups are copies of oauth-apiserver's two groups (oauth.openshift.io/v1, 6
#              resources; user.openshift.io/v1, 4 resources) renamed bNNN.oauth.openshift.io and
#              bNNN.user.openshift.io. Each server answers aggregated /apis (v2 and v2beta1, ETag and
#              304), legacy /apis, /apis/<g> and /apis/<g>/v1 (the oauth APIResourceLists renamed),
#              and /openapi/v2 (oauth-apiserver's swagger.json with its paths copied for each of
#              its groups; OPENAPI=0 makes it 404 as well); /openapi/v3 is 404 ("no documents").
#   apiagg     release build, default threads (one per CPU), default probe interval; one Service
#              per fake server, one APIService per group.
# apiagg is started $REPEATS times; each run measures the time from spawning it to the first 200
# from /readyz (polled every $POLL_MS ms on a new connection: the readyz checks include the
# delegate's groups registered and the first discovery round), checks that aggregated /apis then
# lists every group, and reads VmHWM (peak RSS) from /proc/<pid>/status at ready time and again
# $SETTLE s later (OpenAPI downloads and merges and a few probe rounds have run by then).
#
# Environment: CARGO_TARGET_DIR (default: <repo>/target), APISERVICES (200), SERVERS (20),
# REPEATS (5), POLL_MS (5), SETTLE (5), APIAGG_FIXTURES (default: <repo>/../shared/fixtures),
# OPENAPI (1), SKIP_BUILD=1, KEEP_TMP=1, APIAGG_ARGS (extra `apiagg serve` arguments), NO_DELEGATE=1.
# Needs: cargo, python3.

set -euo pipefail

log() { printf '[startup] %s\n' "$*" >&2; }
die() { printf '[startup] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
plh="$here/proxy_load_helper.py"
helper="$here/bench_helper.py"

APISERVICES="${APISERVICES:-200}"
SERVERS="${SERVERS:-20}"
REPEATS="${REPEATS:-5}"
POLL_MS="${POLL_MS:-5}"
SETTLE="${SETTLE:-5}"
OPENAPI="${OPENAPI:-1}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
fixtures="${APIAGG_FIXTURES:-$repo/../shared/fixtures}"

command -v python3 >/dev/null 2>&1 || die "'python3' not found"
[[ "${SKIP_BUILD:-0}" == 1 ]] || command -v cargo >/dev/null 2>&1 || die "'cargo' not found (or set SKIP_BUILD=1 with a release build in $target_dir)"
[[ -f "$fixtures/extension-apiservers/oauth-apiserver/discovery/aggregated_v2.json" ]] || die "fixtures not found in $fixtures (set APIAGG_FIXTURES)"
(( SERVERS >= 1 && SERVERS <= APISERVICES )) || die "SERVERS must be between 1 and APISERVICES"

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "building apiagg and sample-apiserver (release) in $target_dir"
    (cd "$repo" && CARGO_TARGET_DIR="$target_dir" cargo build --release -p apiagg-gateway -p apiagg-tests --bins) \
        || die "cargo build failed"
fi
for bin in apiagg sample-apiserver; do
    [[ -x "$target_dir/release/$bin" ]] || die "$target_dir/release/$bin not found (cargo build --release -p apiagg-gateway -p apiagg-tests --bins)"
done

source "$here/lib.sh"
bench_temp startup

cp "$target_dir/release/apiagg" "$target_dir/release/sample-apiserver" "$tmp/"

busy="$(python3 "$plh" system-busy 1)"
(( busy <= 10 )) || log "WARNING: other processes kept the CPUs ${busy}% busy before starting: timings will be noisy."

read -r delegate_port apiagg_port <<<"$(python3 "$plh" free-ports 2)"

delegate_url=-
if [[ "${NO_DELEGATE:-0}" != 1 ]]; then
    log "delegate sample-apiserver (kubernetes discovery fixtures) on 127.0.0.1:$delegate_port"
    "$tmp/sample-apiserver" --listen "127.0.0.1:$delegate_port" --fixtures "$fixtures/kubernetes/discovery" \
        >"$tmp/delegate.out" 2>"$tmp/delegate.log" &
    pids+=("$!")
    python3 "$plh" wait-http "http://127.0.0.1:$delegate_port/healthz" 10 \
        || die "delegate did not start: $(tail -n 5 "$tmp/delegate.log")"
    delegate_url="http://127.0.0.1:$delegate_port"
fi

log "fake extension API servers: $APISERVICES groups over $SERVERS ports (one Python process), OpenAPI v2 $( ((OPENAPI)) && echo served || echo 404)"
python3 "$helper" serve-fake "$fixtures" "$tmp/ports" "$APISERVICES" "$SERVERS" "$OPENAPI" 2>"$tmp/fake.log" &
pids+=("$!")
for _ in $(seq 300); do [[ -f "$tmp/ports" ]] && break; sleep 0.1; done
[[ -f "$tmp/ports" ]] || die "fake servers did not start: $(tail -n 5 "$tmp/fake.log")"
read -r -a ports <"$tmp/ports"
first_group="b000.oauth.openshift.io"
python3 "$plh" wait-http "http://127.0.0.1:${ports[0]}/apis/$first_group/v1" 10

python3 "$helper" startup-config "$tmp" "$apiagg_port" "$delegate_url" "$APISERVICES" "${ports[@]}"
"$tmp/apiagg" check --config "$tmp/apiagg.yaml" >"$tmp/check.log" 2>&1 \
    || die "apiagg check rejected the config: $(cat "$tmp/check.log")"
log "apiagg: $APISERVICES APIServices, $SERVERS Services, delegate ${delegate_url}; $REPEATS runs, /readyz polled every ${POLL_MS} ms ${APIAGG_ARGS:-}"

# shellcheck disable=SC2086 # APIAGG_ARGS is a list of words
python3 "$helper" startup "$tmp/apiagg" "$tmp/apiagg.yaml" "$apiagg_port" "$REPEATS" "$POLL_MS" \
    "$SETTLE" "$tmp/startup.tsv" ${APIAGG_ARGS:-} || die "start-up measurement failed (KEEP_TMP=1 keeps the logs)"

log "$APISERVICES APIServices over $SERVERS backend Services (+ delegate: ${delegate_url}), OPENAPI=$OPENAPI; $(nproc) CPUs, $(uname -r)"
python3 "$helper" report-startup "$tmp/startup.tsv" 1.0
