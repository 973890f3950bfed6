#!/usr/bin/env bash
# User-space instructions per request, apiagg against nginx in the same run (issue 12's budget):
# a proxied 1 KiB GET (apiagg, and nginx as a reverse proxy, to the same nginx backend) and the
# aggregated `/apis` answer (apiagg, and nginx serving the same bytes). Each server runs alone
# under `valgrind --tool=callgrind`, twice: N1 then N2 requests on one keep-alive connection;
# (count after N2 - count after N1) / (N2 - N1) is the cost of one request, start-up excluded
# (the method of ../shared/bench-tools/instr_per_request.sh; repeatable to about 0.1%).
# Usage (from the repo root): tests/bench/instructions.sh   (SKIP_BUILD=1 to reuse the build;
# N1, N2 to change the request counts, default 500 and 2500; KEEP_TMP=1 keeps the callgrind
# files for callgrind_annotate)
# Needs: cargo, nginx, valgrind, python3.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
helper="$here/proxy_load_helper.py"
source "$here/lib.sh"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
n1="${N1:-500}" n2="${N2:-2500}"
"$repo/scripts/need.sh" valgrind nginx
[[ "${SKIP_BUILD:-0}" == 1 ]] || (cd "$repo" && cargo build --release -p apiagg-gateway --bins)
tmp="$(mktemp -d /tmp/instructions.XXXXXX)"
chmod 755 "$tmp"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.3
    if [[ "${KEEP_TMP:-0}" == 1 ]]; then log "callgrind files kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
log() { printf '[instructions] %s\n' "$*" >&2; }
read -r backend_port front_port <<<"$(python3 "$helper" free-ports 2)"
mkdir -p "$tmp/www" "$tmp/nginx" "$tmp/front"
python3 "$helper" body "$tmp/www/object.json"
chmod -R a+rX "$tmp"
# The backend every proxied request goes to (not measured).
nginx_object_backend "$tmp" "$backend_port"

# apiagg: one remote APIService on the backend.
python3 "$helper" apiagg-config "$tmp" "$front_port" "127.0.0.1:$backend_port" 1 bench.example.com
cp "$target_dir/release/apiagg" "$tmp/apiagg"
path=/apis/bench.example.com/v1/widgets
aggregated='application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList'

# The anchors: nginx as a reverse proxy to the same backend, and nginx serving apiagg's /apis.
front_conf() { # $1 = file; $2 = location body; $3 = more of the http block (optional)
    cat >"$1" <<CONF
daemon off; master_process off; worker_processes 1; pid $tmp/front/pid; error_log $tmp/front/error.log warn;
events { worker_connections 1024; }
http { access_log off; $(nginx_temps "$tmp/front") ${3:-}
  upstream backend { server 127.0.0.1:$backend_port; keepalive 16; }
  server { listen 127.0.0.1:$front_port; $2 } }
CONF
}
front_conf "$tmp/proxy.conf" 'location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }'
# The anchor of the audit's cost: nginx's access log as JSON, one line per request to a file
# (what a Metadata-level audit event is to apiagg).
json_log="log_format json escape=json '{\"time\":\"\$time_iso8601\",\"remote\":\"\$remote_addr\",\"user\":\"\$remote_user\",\"method\":\"\$request_method\",\"uri\":\"\$request_uri\",\"status\":\$status,\"bytes\":\$body_bytes_sent,\"agent\":\"\$http_user_agent\",\"request_id\":\"\$request_id\",\"duration\":\$request_time}';"
front_conf "$tmp/proxy-logged.conf" "location / { access_log $tmp/front/access.json json; proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; }" "$json_log"
front_conf "$tmp/apis.conf" "location = /apis { default_type application/json; alias $tmp/www/apis.json; }"

count() { # $1 = label, $2 = requests, $3 = path, $4 = Accept, then the server command
    local label=$1 n=$2 target=$3 accept=$4 out="$tmp/cg.$1.$2" pid
    shift 4
    # A fresh store for each apiagg run: its start and exit work must be the same in both runs.
    [[ "$1" == "$tmp/apiagg" ]] && set -- "$@" --data-dir "$out.data"
    valgrind --tool=callgrind --callgrind-out-file="$out" ${collect:+"--toggle-collect=$collect"} "$@" \
        >"$out.log" 2>&1 &
    pid=$!
    python3 - "$front_port" "$target" "$n" "$accept" <<'PY' || { cat "$out.log" >&2; exit 1; }
import http.client, sys, time
port, path, n, accept = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
headers = {"Accept": accept} if accept else {}
for _ in range(900):
    try:
        c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
        c.request("GET", path, headers=headers); r = c.getresponse(); r.read()
        if r.status == 200:
            break
    except OSError:
        pass
    time.sleep(0.2)
else:
    sys.exit(f"no 200 for {path} under callgrind")
for _ in range(n):
    c.request("GET", path, headers=headers); r = c.getresponse(); r.read()
    if r.status != 200:
        sys.exit(f"{r.status} for {path}")
PY
    kill -INT "$pid" 2>/dev/null; sleep 0.5; kill -QUIT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
    cat "$out"* 2>/dev/null | awk '/^summary:/{s+=$2} END{print s+0}'
}
per_request() { # $1 = label, $2 = path, $3 = Accept, then the server command
    local label=$1 target=$2 accept=$3 a b
    shift 3
    log "$label: $n1 then $n2 requests under callgrind"
    a="$(count "$label" "$n1" "$target" "$accept" "$@")"
    b="$(count "$label" "$n2" "$target" "$accept" "$@")"
    echo $(( (b - a) / (n2 - n1) ))
}
apiagg=("$tmp/apiagg" serve --config "$tmp/apiagg.yaml" --threads 1 --probe-interval 1h
    --discovery-refresh 1h --openapi-refresh 1h)

# apiagg's /apis bytes, for nginx to serve as they are.
"${apiagg[@]}" >"$tmp/apiagg.log" 2>&1 &
pid=$!
python3 - "$front_port" "$aggregated" "$tmp/www/apis.json" <<'PY'
import http.client, sys, time
port, accept, out = sys.argv[1:]
for _ in range(300):
    try:
        c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
        c.request("GET", "/readyz"); r = c.getresponse(); r.read()
        if r.status == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)
c.request("GET", "/apis", headers={"Accept": accept}); r = c.getresponse()
open(out, "wb").write(r.read())
PY
kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
chmod a+r "$tmp/www/apis.json"

# The front-door controls (issue 20): API Priority and Fairness is on by default; "bare" turns
# it off, "audited" adds a Metadata-level audit of every request to a log file.
printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n' >"$tmp/audit-policy.yaml"
# The same with one event per request, as nginx writes one line (kube-apiserver writes both
# stages unless the policy omits one).
printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n' \
    >"$tmp/audit-policy-one.yaml"
bare=("${apiagg[@]}" --enable-priority-and-fairness=false)
audited=("${apiagg[@]}" --audit-policy-file "$tmp/audit-policy.yaml" --audit-log-path "$tmp/audit.log")
audited_one=("${apiagg[@]}" --audit-policy-file "$tmp/audit-policy-one.yaml" --audit-log-path "$tmp/audit-one.log")
proxy_apiagg="$(per_request apiagg-proxy "$path" "" "${apiagg[@]}")"
proxy_bare="$(per_request apiagg-bare "$path" "" "${bare[@]}")"
proxy_audited="$(per_request apiagg-audited "$path" "" "${audited[@]}")"
proxy_audited_one="$(per_request apiagg-audited-one "$path" "" "${audited_one[@]}")"
proxy_nginx="$(per_request nginx-proxy "$path" "" nginx -p "$tmp/front/" -c "$tmp/proxy.conf")"
proxy_nginx_logged="$(per_request nginx-logged "$path" "" nginx -p "$tmp/front/" -c "$tmp/proxy-logged.conf")"
apis_apiagg="$(per_request apiagg-apis /apis "$aggregated" "${apiagg[@]}")"
apis_nginx="$(per_request nginx-apis /apis "" nginx -p "$tmp/front/" -c "$tmp/apis.conf")"

python3 - "$proxy_apiagg" "$proxy_nginx" "$apis_apiagg" "$apis_nginx" "$(wc -c <"$tmp/www/apis.json")" "$proxy_nginx_logged" "$proxy_bare" "$proxy_audited" "$proxy_audited_one" <<'PY'
import sys
pa, pn, aa, an, size, logged, bare, audited, one = (int(x) for x in sys.argv[1:])
print(f"{'work':<34} {'apiagg':>10} {'nginx':>10} {'ratio':>7}  goal")
print(f"{'proxied 1 KiB GET, keep-alive':<34} {pa:>10,} {pn:>10,} {pa / pn:>7.2f}  <= 2.0 (issue 30), stretch 1.5")
print(f"{f'/apis aggregated, {size:,} bytes':<34} {aa:>10,} {an:>10,} {aa / an:>7.2f}  <= 1.2")
print(f"{'front door: APF off (bare)':<34} {bare:>10,} {'':>10} {'':>7}")
print(f"{'front door: APF on (default)':<34} {pa:>10,} {'':>10} {pa / bare:>7.3f}  vs bare")
print(f"{'Metadata audit / JSON access log':<34} {audited - pa:>+10,} {logged - pn:>+10,} {(audited - pa) / max(logged - pn, 1):>7.2f}  added, <= 1.0 (issue 30)")
print(f"{'  one event (omitStages: [RequestReceived])':<34} {one - pa:>+10,} {logged - pn:>+10,} {(one - pa) / max(logged - pn, 1):>7.2f}  added")
PY
