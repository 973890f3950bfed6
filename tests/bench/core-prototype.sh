#!/usr/bin/env bash
# Issue 23, step 1: user-space instructions per proxied 1 KiB GET for the pingora-core prototype
# (gateway/examples/core_proxy.rs), against nginx as a reverse proxy and apiagg's current
# pingora-proxy path with API Priority and Fairness off ("bare"), in one run. The method is
# instructions.sh's: an nginx backend serves a 1 KiB JSON; each front runs alone under
# `valgrind --tool=callgrind`, twice: N1 then N2 requests on one keep-alive connection;
# (count after N2 - count after N1) / (N2 - N1) is the cost of one request, start-up excluded.
# The prototype runs twice: with pingora's upstream pool, and with `own-pool` (a plain list of
# idle connections, no idle watching) to show what pingora's pool costs per request.
# Usage (from the repo root): tests/bench/core-prototype.sh   (SKIP_BUILD=1 to reuse the build;
# N1, N2 to change the request counts, default 500 and 2500; KEEP_TMP=1 keeps the callgrind files)
# Needs: cargo, nginx, valgrind, python3.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
helper="$here/proxy_load_helper.py"
source "$here/lib.sh"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
n1="${N1:-500}" n2="${N2:-2500}"
"$repo/scripts/need.sh" valgrind nginx
[[ "${SKIP_BUILD:-0}" == 1 ]] || (cd "$repo" && cargo build --release -p apiagg-gateway --examples --bins)
tmp="$(mktemp -d /tmp/core-prototype.XXXXXX)"
chmod 755 "$tmp"
pids=()
log() { printf '[core-prototype] %s\n' "$*" >&2; }
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.3
    if [[ "${KEEP_TMP:-0}" == 1 ]]; then log "callgrind files kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
read -r backend_port front_port <<<"$(python3 "$helper" free-ports 2)"
mkdir -p "$tmp/www" "$tmp/nginx" "$tmp/front"
python3 "$helper" body "$tmp/www/object.json"
chmod -R a+rX "$tmp"
# The backend every proxied request goes to (not measured).
nginx_object_backend "$tmp" "$backend_port"

# apiagg: one remote APIService on the backend, API Priority and Fairness off.
python3 "$helper" apiagg-config "$tmp" "$front_port" "127.0.0.1:$backend_port" 1 bench.example.com
cp "$target_dir/release/apiagg" "$tmp/apiagg"
cp "$target_dir/release/examples/core_proxy" "$tmp/core_proxy"
path=/apis/bench.example.com/v1/widgets

# nginx as a reverse proxy to the same backend.
cat >"$tmp/proxy.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $tmp/front/pid; error_log $tmp/front/error.log warn;
events { worker_connections 1024; }
http { access_log off; $(nginx_temps "$tmp/front")
  upstream backend { server 127.0.0.1:$backend_port; keepalive 16; }
  server { listen 127.0.0.1:$front_port;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF

count() { # $1 = label, $2 = requests, then the server command
    local label=$1 n=$2 out="$tmp/cg.$1.$2" pid
    shift 2
    # A fresh store for each apiagg run: its start and exit work must be the same in both runs.
    [[ "$1" == "$tmp/apiagg" ]] && set -- "$@" --data-dir "$out.data"
    valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >"$out.log" 2>&1 &
    pid=$!
    python3 - "$front_port" "$path" "$n" "$tmp/www/object.json" <<'PY' || { cat "$out.log" >&2; exit 1; }
import http.client, sys, time
port, path, n, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), open(sys.argv[4], "rb").read()
for _ in range(900):
    try:
        c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
        c.request("GET", path); r = c.getresponse(); body = r.read()
        if r.status == 200:
            break
    except OSError:
        pass
    time.sleep(0.2)
else:
    sys.exit(f"no 200 for {path} under callgrind")
if body != want:
    sys.exit(f"unexpected body for {path}: {body[:200]!r}")
for _ in range(n):
    c.request("GET", path); r = c.getresponse(); r.read()
    if r.status != 200:
        sys.exit(f"{r.status} for {path}")
PY
    kill -INT "$pid" 2>/dev/null; sleep 0.5; kill -QUIT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
    cat "$out"* 2>/dev/null | awk '/^summary:/{s+=$2} END{print s+0}'
}
per_request() { # $1 = label, then the server command
    local label=$1 a b
    shift
    log "$label: $n1 then $n2 requests under callgrind"
    a="$(count "$label" "$n1" "$@")"
    b="$(count "$label" "$n2" "$@")"
    echo $(( (b - a) / (n2 - n1) ))
}
bare=("$tmp/apiagg" serve --config "$tmp/apiagg.yaml" --threads 1 --probe-interval 1h
    --discovery-refresh 1h --openapi-refresh 1h --enable-priority-and-fairness=false)
nginx_proxy="$(per_request nginx-proxy nginx -p "$tmp/front/" -c "$tmp/proxy.conf")"
apiagg_bare="$(per_request apiagg-bare "${bare[@]}")"
prototype="$(per_request core-prototype "$tmp/core_proxy" "127.0.0.1:$front_port" "127.0.0.1:$backend_port")"
own_pool="$(per_request core-prototype-own-pool "$tmp/core_proxy" "127.0.0.1:$front_port" "127.0.0.1:$backend_port" own-pool)"

python3 - "$nginx_proxy" "$apiagg_bare" "$prototype" "$own_pool" <<'PY'
import sys
nginx, bare, proto, own = (int(x) for x in sys.argv[1:])
print(f"{'proxied 1 KiB GET, keep-alive':<40} {'instructions':>12} {'/ nginx':>8}")
print(f"{'nginx reverse proxy':<40} {nginx:>12,} {1:>8.2f}")
print(f"{'apiagg bare (pingora-proxy, APF off)':<40} {bare:>12,} {bare / nginx:>8.2f}")
print(f"{'pingora-core prototype (core_proxy)':<40} {proto:>12,} {proto / nginx:>8.2f}")
print(f"{'prototype, own pool (no idle watch)':<40} {own:>12,} {own / nginx:>8.2f}")
print(f"prototype / apiagg bare: {proto / bare:.2f}; pingora's pool: {proto - own:,} per GET")
for label, v in (("prototype", proto), ("prototype, own pool", own)):
    print(f"issue 23 gate, {label} <= 55,000: {'met' if v <= 55000 else 'MISSED'}")
PY
