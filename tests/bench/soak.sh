#!/usr/bin/env bash
# Soak run: apiagg under modest mixed load for minutes while its config is rewritten and one
# backend flaps; does anything fail on the healthy groups, does memory grow, what does it log?
#
# Usage (from the repo root):   tests/bench/soak.sh [minutes]      (default 10; not run in CI)
#
# Setup (all on loopback, plain HTTP):
#   delegate   sample-apiserver as the tests' kube_delegate: the kube-apiserver discovery fixtures,
#              apps/v1 deployments, OpenAPI v2 (swagger-v1.32.json) and v3 fixtures
#   healthy    two sample-apiservers: soak-a.example.com/v1 widgets, soak-b.example.com/v1beta1
#              gadgets (each APIService on its own Service)
#   flapping   a third one, flappy.example.com/v1 flaps: SIGKILLed every $FLAP_EVERY s (first at
#              half of it) and restarted on the same port $FLAP_DOWN s later
#   apiagg     release build, default flags, --log-format json (the log is parsed at the end)
# For the whole run:
#   load       soak_load.py (nice -n 5), ~$RATE req/s on $WORKERS keep-alive connections: list
#              and get of the healthy groups (5 seeded objects each), /apis/<g>/<v>, aggregated
#              and legacy /apis, /openapi/v2, /openapi/v3 and a group's v3 document, list of the
#              delegate's deployments and of the flapping group; one create and one delete per
#              second in the healthy groups; $WATCHERS watches of the healthy groups, each held
#              10-30 s and closed by the client, plus one watch of the flapping group
#   config     rewritten (write + rename) every $REWRITE_EVERY s, alternating between two
#              equivalent forms (a comment and an annotation differ): a reload without a route
#              change
#   sampling   apiagg's RSS, CPU, threads and open fds every 10 s
# Printed at the end: requests per kind (status counts, p50/p99), failures on the healthy groups
# (non-2xx, connection error, answer from the wrong backend, a healthy group missing or Stale in
# /apis or missing from OpenAPI), the RSS curve and its growth from the first minute to the last,
# apiagg_config_reloads_total, and the ERROR/WARN lines of apiagg's log grouped by message (numbers
# folded) with counts. Exit 1 when a healthy-group request failed or RSS grew more than
# $MAX_GROWTH %. Requests to the flapping group are shown but not counted as failures.
#
# Environment: CARGO_TARGET_DIR (default: <repo>/target), RATE (150), WORKERS (4), WATCHERS (3),
# REWRITE_EVERY (10), FLAP_EVERY (30), FLAP_DOWN (5), MAX_GROWTH (20), APIAGG_ARGS (extra
# `apiagg serve` arguments), APIAGG_FIXTURES (default: <repo>/../shared/fixtures), SKIP_BUILD=1,
# KEEP_TMP=1 (keep the temp dir: configs, apiagg.log, load.json, chaos.json).
# Needs: cargo, python3.

set -euo pipefail

log() { printf '[soak] %s\n' "$*" >&2; }
die() { printf '[soak] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
plh="$here/proxy_load_helper.py"
soak="$here/soak_load.py"

MINUTES="${1:-10}"
[[ "$MINUTES" =~ ^[0-9]+$ ]] && (( MINUTES >= 1 )) || die "usage: $0 [minutes] (a whole number, at least 1)"
RATE="${RATE:-150}"
WORKERS="${WORKERS:-4}"
WATCHERS="${WATCHERS:-3}"
REWRITE_EVERY="${REWRITE_EVERY:-10}"
FLAP_EVERY="${FLAP_EVERY:-30}"
FLAP_DOWN="${FLAP_DOWN:-5}"
MAX_GROWTH="${MAX_GROWTH:-20}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
fixtures="${APIAGG_FIXTURES:-$repo/../shared/fixtures}"
kube="$fixtures/kubernetes"

command -v python3 >/dev/null 2>&1 || die "'python3' not found"
[[ "${SKIP_BUILD:-0}" == 1 ]] || command -v cargo >/dev/null 2>&1 || die "'cargo' not found (or set SKIP_BUILD=1 with a release build in $target_dir)"
[[ -f "$kube/openapi-v2/swagger-v1.32.json" && -d "$kube/discovery" ]] || die "fixtures not found in $fixtures (set APIAGG_FIXTURES)"

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "building apiagg and sample-apiserver (release) in $target_dir"
    (cd "$repo" && CARGO_TARGET_DIR="$target_dir" cargo build --release -p apiagg-gateway -p apiagg-tests --bins) \
        || die "cargo build failed"
fi
for bin in apiagg sample-apiserver; do
    [[ -x "$target_dir/release/$bin" ]] || die "$target_dir/release/$bin not found (cargo build --release -p apiagg-gateway -p apiagg-tests --bins)"
done

source "$here/lib.sh"
bench_temp soak
cleanup() { # the flapping backend's current process too
    [[ -s "$tmp/flapping.pid" ]] && pids+=("$(cat "$tmp/flapping.pid")")
    bench_cleanup
}
trap cleanup EXIT

cp "$target_dir/release/apiagg" "$target_dir/release/sample-apiserver" "$tmp/"

busy="$(python3 "$plh" system-busy 1)"
(( busy <= 10 )) || log "WARNING: other processes kept the CPUs ${busy}% busy before starting: latencies and CPU will be noisy."
sample="$tmp/sample-apiserver"

read -r delegate_port a_port b_port flap_port apiagg_port <<<"$(python3 "$plh" free-ports 5)"

log "delegate (kube fixtures, apps/v1 deployments, OpenAPI) on 127.0.0.1:$delegate_port"
"$sample" --listen "127.0.0.1:$delegate_port" --fixtures "$kube/discovery" \
    --openapi-v2 "$kube/openapi-v2/swagger-v1.32.json" --openapi-v3-dir "$kube/openapi-v3" \
    --group apps --version v1 --resource deployments --kind Deployment --name delegate \
    >"$tmp/delegate.out" 2>"$tmp/delegate.log" &
pids+=("$!")
log "healthy soak-a.example.com/v1 on :$a_port, soak-b.example.com/v1beta1 on :$b_port"
"$sample" --listen "127.0.0.1:$a_port" --group soak-a.example.com --version v1 \
    --resource widgets --kind Widget >"$tmp/a.out" 2>"$tmp/a.log" &
pids+=("$!")
"$sample" --listen "127.0.0.1:$b_port" --group soak-b.example.com --version v1beta1 \
    --resource gadgets --kind Gadget >"$tmp/b.out" 2>"$tmp/b.log" &
pids+=("$!")
for port in "$delegate_port" "$a_port" "$b_port"; do
    python3 "$plh" wait-http "http://127.0.0.1:$port/healthz" 10
done
# The flapping backend is started (and killed, and restarted) by the chaos process; it is up
# before apiagg starts so that the first discovery round finds it.
flap_cmd=("$sample" --listen "127.0.0.1:$flap_port" --group flappy.example.com --version v1
    --resource flaps --kind Flap)

# Two equivalent configs: form b has a comment and an annotation more. Same routes.
write_config() { # form annotation
    cat <<EOF
# apiagg soak config, form $1
listen: 127.0.0.1:$apiagg_port
delegate: {url: "http://127.0.0.1:$delegate_port"}
services:
  - {namespace: soak, name: a, port: 443, endpoints: ["http://127.0.0.1:$a_port"]}
  - {namespace: soak, name: b, port: 443, endpoints: ["http://127.0.0.1:$b_port"]}
  - {namespace: soak, name: flappy, port: 443, endpoints: ["http://127.0.0.1:$flap_port"]}
apiServices:
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1.soak-a.example.com$2}
    spec: {group: soak-a.example.com, version: v1, groupPriorityMinimum: 1000, versionPriority: 15, insecureSkipTLSVerify: true, service: {namespace: soak, name: a, port: 443}}
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1beta1.soak-b.example.com}
    spec: {group: soak-b.example.com, version: v1beta1, groupPriorityMinimum: 1000, versionPriority: 15, insecureSkipTLSVerify: true, service: {namespace: soak, name: b, port: 443}}
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1.flappy.example.com}
    spec: {group: flappy.example.com, version: v1, groupPriorityMinimum: 1000, versionPriority: 15, insecureSkipTLSVerify: true, service: {namespace: soak, name: flappy, port: 443}}
EOF
}
write_config a "" >"$tmp/form-a.yaml"
write_config b ", annotations: {soak.example.com/form: b}" >"$tmp/form-b.yaml"
for form in a b; do
    "$tmp/apiagg" check --config "$tmp/form-$form.yaml" >"$tmp/check.log" 2>&1 \
        || die "apiagg check rejected form $form: $(cat "$tmp/check.log")"
done
cp "$tmp/form-a.yaml" "$tmp/apiagg.yaml"

seconds=$(( MINUTES * 60 ))
log "chaos: config rewritten every ${REWRITE_EVERY}s, flappy.example.com on :$flap_port killed every ${FLAP_EVERY}s for ${FLAP_DOWN}s"
# The chaos process needs apiagg's pid: it starts the flapping backend, then waits for it.
mkfifo "$tmp/apiagg.pid.fifo"
python3 "$soak" chaos --duration "$seconds" --config "$tmp/apiagg.yaml" \
    --forms "$tmp/form-a.yaml" "$tmp/form-b.yaml" --rewrite-every "$REWRITE_EVERY" \
    --flap-every "$FLAP_EVERY" --flap-down "$FLAP_DOWN" --flap-port "$flap_port" \
    --flap-log "$tmp/flapping.log" --pidfile "$tmp/flapping.pid" \
    --apiagg-pid-fifo "$tmp/apiagg.pid.fifo" --out "$tmp/chaos.json" -- "${flap_cmd[@]}" &
chaos_pid=$!
pids+=("$chaos_pid")
python3 "$plh" wait-http "http://127.0.0.1:$flap_port/healthz" 20

log "apiagg on 127.0.0.1:$apiagg_port ${APIAGG_ARGS:-}"
# shellcheck disable=SC2086 # APIAGG_ARGS is a list of words
"$tmp/apiagg" serve --config "$tmp/apiagg.yaml" --data-dir "$tmp/data" --log-format json ${APIAGG_ARGS:-} \
    >"$tmp/apiagg.out" 2>"$tmp/apiagg.log" &
apiagg_pid=$!
pids+=("$apiagg_pid")
python3 "$plh" wait-http "http://127.0.0.1:$apiagg_port/readyz" 30 \
    || die "apiagg did not become ready: $(tail -n 20 "$tmp/apiagg.log")"
echo "$apiagg_pid" >"$tmp/apiagg.pid.fifo"

log "load: ~$RATE req/s on $WORKERS connections, $WATCHERS watchers, for $MINUTES min"
nice -n 5 python3 "$soak" load --port "$apiagg_port" --duration "$seconds" --rate "$RATE" \
    --workers "$WORKERS" --watchers "$WATCHERS" \
    --healthy soak-a.example.com/v1/widgets soak-b.example.com/v1beta1/gadgets \
    --flapping flappy.example.com/v1/flaps --delegate apps/v1/deployments \
    --out "$tmp/load.json" || die "the load generator failed (KEEP_TMP=1 keeps the logs)"
wait "$chaos_pid" || die "the chaos process failed (KEEP_TMP=1 keeps the logs)"
kill -0 "$apiagg_pid" 2>/dev/null || die "apiagg exited during the run: $(tail -n 20 "$tmp/apiagg.log")"

log "$(nproc) CPUs, $(uname -r); apiagg $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
python3 "$soak" report --load "$tmp/load.json" --chaos "$tmp/chaos.json" --log "$tmp/apiagg.log" \
    --metrics "http://127.0.0.1:$apiagg_port/metrics" --max-growth "$MAX_GROWTH"
