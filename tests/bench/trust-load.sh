#!/usr/bin/env bash
# Authentication cost benchmark: apiagg over TLS serving the same proxied 1 KiB GET to callers
# authenticated in different ways, in one run, against apiagg without any authentication.
#
# Usage (from the repo root):   tests/bench/trust-load.sh
#
# wrk cannot present client certificates, so it talks plain HTTP to a front nginx that opens
# keep-alive TLS connections to apiagg (one upstream pool per case, so a connection made with a
# client certificate never serves another case). apiagg is alone on its core and its CPU time per
# request is the figure; the handshake is amortised over the keep-alive connection.
#   noauth        apiagg without an `authentication:` section; no client certificate (anonymous)
#   anonymous     apiagg with authentication configured; no credentials (anonymous)
#   client-cert   the caller presents a client certificate (user = CN, groups = O), identity
#                 stamped as X-Remote-* on the request to the backend
#   token-file    the caller sends a bearer token from apiagg's static token file
# Goal: client-cert costs at most 5% more CPU per request than noauth.
# INSTRUCTIONS=1 also counts apiagg's user-space instructions per request of each case under
# callgrind (exact run to run): requests N2 - N1 (2,500 - 500) on one keep-alive HTTPS connection
# from a Python client presenting the case's certificate or token (needs valgrind).
# The TokenReview cache hit is measured by criterion: cargo bench -p apiagg-gateway.
#
# CPU placement: LOAD_CPU (0) runs wrk, the front nginx and the backend nginx; PROXY_CPU (1)
# runs apiagg --threads 1. Environment: DURATION (10), WARMUP (2), CONNECTIONS (64), SKIP_BUILD=1,
# KEEP_TMP=1, CARGO_TARGET_DIR. Needs: cargo, wrk, nginx, openssl, python3, taskset.
set -euo pipefail

log() { printf '[trust-load] %s\n' "$*" >&2; }
die() { printf '[trust-load] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
helper="$here/proxy_load_helper.py"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-2}"
CONNECTIONS="${CONNECTIONS:-64}"
LOAD_CPU="${LOAD_CPU:-0}"
PROXY_CPU="${PROXY_CPU:-1}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
for tool in wrk nginx openssl python3 taskset; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (Debian: apt-get install -y wrk nginx openssl)"
done
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "building apiagg (release)"
    (cd "$repo" && CARGO_TARGET_DIR="$target_dir" cargo build --release -p apiagg-gateway --bins) || die "build failed"
fi
[[ -x "$target_dir/release/apiagg" ]] || die "$target_dir/release/apiagg not found"
clk_tck="$(getconf CLK_TCK)"
nginx_bin="$(command -v nginx)"

tmp="$(mktemp -d /tmp/trust-load.XXXXXX)"
chmod 755 "$tmp"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    sleep 0.3
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    if [[ "${KEEP_TMP:-0}" == 1 ]]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
cp "$target_dir/release/apiagg" "$tmp/apiagg"

# --- certificates (openssl): a serving CA and pair, a client CA and a caller's certificate.
pki="$tmp/pki"
mkdir -p "$pki"
ossl() { openssl "$@" >/dev/null 2>&1 || die "openssl $1 failed"; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=serving-ca \
    -keyout "$pki/serving-ca.key" -out "$pki/serving-ca.crt"
ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$pki/serving.key" -out "$pki/serving.csr"
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$pki/serving.ext"
ossl x509 -req -in "$pki/serving.csr" -CA "$pki/serving-ca.crt" -CAkey "$pki/serving-ca.key" \
    -CAcreateserial -days 2 -extfile "$pki/serving.ext" -out "$pki/serving.crt"
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=client-ca \
    -keyout "$pki/client-ca.key" -out "$pki/client-ca.crt"
ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=bench-group/CN=bench-user" \
    -keyout "$pki/client.key" -out "$pki/client.csr"
printf 'extendedKeyUsage=clientAuth\n' >"$pki/client.ext"
ossl x509 -req -in "$pki/client.csr" -CA "$pki/client-ca.crt" -CAkey "$pki/client-ca.key" \
    -CAcreateserial -days 2 -extfile "$pki/client.ext" -out "$pki/client.crt"
printf 'bench-token-0123456789,bench-token-user,uid-1,"bench-group"\n' >"$pki/tokens.csv"
chmod -R a+rX "$pki"

read -r backend_port front_port apiagg_port <<<"$(python3 "$helper" free-ports 3)"
group="bench.example.com"
path="/apis/$group/v1/namespaces/default/widgets/widget-1"

# --- backend nginx: one 1 KiB JSON file for every path.
mkdir -p "$tmp/backend/www" "$tmp/backend/tmp" "$tmp/front/tmp"
python3 "$helper" body "$tmp/backend/www/object.json"
chmod -R a+rX "$tmp/backend"
common() { printf 'pid %s/nginx.pid;\nerror_log %s/error.log warn;\nevents { worker_connections 16384; }\n' "$1" "$1"; }
temps() { printf 'access_log off; keepalive_requests 10000000; client_body_temp_path %s/b; proxy_temp_path %s/p; fastcgi_temp_path %s/f; uwsgi_temp_path %s/u; scgi_temp_path %s/s;\n' "$1" "$1" "$1" "$1" "$1"; }
cat >"$tmp/backend/nginx.conf" <<EOF
worker_processes 1;
$(common "$tmp/backend/tmp")
http { $(temps "$tmp/backend/tmp")
  server { listen 127.0.0.1:$backend_port backlog=4096; root $tmp/backend/www;
    location / { default_type application/json; try_files /object.json =404; } } }
EOF

# --- front nginx: one port (and one upstream pool) per case.
cases=(noauth anonymous client-cert token-file)
upstreams=""
servers=""
for i in "${!cases[@]}"; do
    name="${cases[$i]}"
    port=$((front_port + i))
    extra=""
    [[ "$name" == client-cert ]] && extra="proxy_ssl_certificate $pki/client.crt; proxy_ssl_certificate_key $pki/client.key;"
    [[ "$name" == token-file ]] && extra='proxy_set_header Authorization "Bearer bench-token-0123456789";'
    upstreams+="upstream u_${i} { server 127.0.0.1:$apiagg_port; keepalive 128; keepalive_requests 10000000; }
"
    servers+="server { listen 127.0.0.1:$port backlog=4096; location / { proxy_pass https://u_${i};
  proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_ssl_trusted_certificate $pki/serving-ca.crt;
  proxy_ssl_verify on; proxy_ssl_name localhost; proxy_ssl_server_name on; proxy_ssl_session_reuse on; $extra } }
"
done
cat >"$tmp/front/nginx.conf" <<EOF
worker_processes 1;
$(common "$tmp/front/tmp")
http { $(temps "$tmp/front/tmp")
$upstreams
$servers }
EOF
start_nginx() { # $1 = name
    "$nginx_bin" -t -q -p "$tmp/$1/" -c "$tmp/$1/nginx.conf" 2>"$tmp/$1/check.log" || die "nginx $1: $(cat "$tmp/$1/check.log")"
    taskset -c "$LOAD_CPU" "$nginx_bin" -p "$tmp/$1/" -c "$tmp/$1/nginx.conf" -g 'daemon off;' >/dev/null 2>&1 &
    pids+=("$!")
}
start_nginx backend
start_nginx front
python3 "$helper" wait-http "http://127.0.0.1:$backend_port$path" 10

# --- apiagg configs.
apiagg_config() { # $1 = dir, $2 = with authentication (0|1)
    mkdir -p "$1"
    {
        echo "listen: 127.0.0.1:$apiagg_port"
        echo "tls: {certFile: $pki/serving.crt, keyFile: $pki/serving.key}"
        if [[ "$2" == 1 ]]; then
            echo "authentication: {anonymous: true, clientCAFile: $pki/client-ca.crt, tokenFile: $pki/tokens.csv}"
        fi
        echo "services:"
        echo "  - {namespace: bench, name: widgets, port: 443, endpoints: [\"http://127.0.0.1:$backend_port\"]}"
        echo "apiServices:"
        echo "  - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: v1.$group}, spec: {group: $group, version: v1, groupPriorityMinimum: 1000, versionPriority: 15, service: {namespace: bench, name: widgets, port: 443}}}"
    } >"$1/apiagg.yaml"
}
start_apiagg() { # $1 = dir
    taskset -c "$PROXY_CPU" "$tmp/apiagg" serve --config "$1/apiagg.yaml" --threads 1 \
        --probe-interval 10s >"$1/apiagg.log" 2>&1 &
    apiagg_pid=$!
    pids+=("$apiagg_pid")
}

results="$tmp/results.tsv"
: >"$results"
cat >"$tmp/report.lua" <<'EOF'
done = function(summary, latency, requests)
    local e = summary.errors
    io.write(string.format("BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d status_errors=%d\n",
        summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
        e.connect + e.read + e.write + e.timeout, e.status))
end
EOF
measure() { # $1 = case, $2 = url
    local out p0 p1 requests duration_us p50_us p99_us errors status_errors
    python3 "$helper" wait-http "$2" 20 || die "$1: $2 does not answer 200"
    taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" "$2" >/dev/null
    p0="$(python3 "$helper" cpu-ticks "$apiagg_pid")"
    out="$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --timeout 5s -s "$tmp/report.lua" "$2")"
    p1="$(python3 "$helper" cpu-ticks "$apiagg_pid")"
    eval "$(grep '^BENCH ' <<<"$out" | sed 's/^BENCH //; s/ /;/g')"
    (( errors == 0 && status_errors == 0 )) || die "$1: $errors errors, $status_errors non-2xx: $out"
    python3 -c "import sys; n,r,d,a,b,hz,p50,p99=sys.argv[1:]; r,d=int(r),int(d); print(f'{n}\t{r*1e6/d:.0f}\t{(int(b)-int(a))*1e6/int(hz)/r:.2f}\t{int(p50)/1000:.2f}\t{int(p99)/1000:.2f}')" \
        "$1" "$requests" "$duration_us" "$p0" "$p1" "$clk_tck" "$p50_us" "$p99_us" | tee -a "$results" >&2
}

log "apiagg without authentication"
apiagg_config "$tmp/noauth" 0
start_apiagg "$tmp/noauth"
measure noauth "http://127.0.0.1:$front_port$path"
kill -TERM "$apiagg_pid"; wait "$apiagg_pid" 2>/dev/null || true
sleep 0.5
log "apiagg with clientCAFile and tokenFile"
apiagg_config "$tmp/auth" 1
start_apiagg "$tmp/auth"
for i in 1 2 3; do measure "${cases[$i]}" "http://127.0.0.1:$((front_port + i))$path"; done
kill -TERM "$apiagg_pid"; wait "$apiagg_pid" 2>/dev/null || true
sleep 0.5
# The baseline again, so the order of the cases does not favour either side.
log "apiagg without authentication, again"
start_apiagg "$tmp/noauth"
measure noauth-2 "http://127.0.0.1:$front_port$path"
kill -TERM "$apiagg_pid"; wait "$apiagg_pid" 2>/dev/null || true

# --- optional: instructions per request under callgrind, one keep-alive HTTPS connection.
count_instructions() { # $1 = config dir, $2 = requests, $3 = client cert (or ""), $4 = token (or "")
    local out="$tmp/cg.$RANDOM" pid
    valgrind --tool=callgrind --callgrind-out-file="$out" "$tmp/apiagg" serve --config "$1/apiagg.yaml" \
        --threads 1 --probe-interval 1h --discovery-refresh 1h --openapi-refresh 1h >"$out.log" 2>&1 &
    pid=$!
    python3 - "$apiagg_port" "$path" "$2" "$pki" "$3" "$4" <<'PY' || die "the callgrind client failed"
import http.client, ssl, sys, time
port, path, n, pki, cert, token = sys.argv[1:]
ctx = ssl.create_default_context(cafile=f"{pki}/serving-ca.crt")
if cert:
    ctx.load_cert_chain(f"{pki}/{cert}.crt", f"{pki}/{cert}.key")
headers = {"Authorization": f"Bearer {token}"} if token else {}
for _ in range(600):
    try:
        c = http.client.HTTPSConnection("localhost", int(port), context=ctx, timeout=30)
        c.request("GET", "/readyz"); r = c.getresponse(); r.read()
        if r.status == 200:
            break
    except OSError:
        pass
    time.sleep(0.2)
else:
    sys.exit("apiagg never became ready under callgrind")
for _ in range(int(n)):
    c.request("GET", path, headers=headers); r = c.getresponse(); r.read()
    if r.status != 200:
        sys.exit(f"{r.status} for {path}")
PY
    kill -INT "$pid" 2>/dev/null; sleep 0.3; kill -QUIT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    cat "$out"* 2>/dev/null | awk '/^summary:/{s+=$2} END{print s+0}'
}
if [[ "${INSTRUCTIONS:-0}" == 1 ]]; then
    command -v valgrind >/dev/null || die "valgrind not found (apt-get install -y valgrind)"
    : >"$tmp/instructions.tsv"
    for spec in "noauth noauth - -" "anonymous auth - -" "client-cert auth client -" \
        "token-file auth - bench-token-0123456789"; do
        read -r name dir cert token <<<"$spec"
        [[ "$cert" == - ]] && cert=""
        [[ "$token" == - ]] && token=""
        log "$name: counting instructions under callgrind"
        a="$(count_instructions "$tmp/$dir" 500 "$cert" "$token")"
        b="$(count_instructions "$tmp/$dir" 2500 "$cert" "$token")"
        printf '%s\t%s\n' "$name" "$(( (b - a) / 2000 ))" | tee -a "$tmp/instructions.tsv" >&2
    done
    python3 - "$tmp/instructions.tsv" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
base = int(rows[0][1])
print(f"{'case':<12} {'instructions/req':>17} {'vs noauth':>10}")
for name, n in rows:
    print(f"{name:<12} {int(n):>17} {int(n) / base:>10.3f}")
PY
fi

python3 - "$results" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = {r[0]: r for r in rows}
base = (float(by["noauth"][2]) + float(by["noauth-2"][2])) / 2
print(f"{'case':<12} {'RPS':>8} {'apiagg µs/req':>14} {'vs noauth':>10} {'p50 ms':>8} {'p99 ms':>8}")
for name, rps, us, p50, p99 in rows:
    print(f"{name:<12} {rps:>8} {us:>14} {float(us) / base:>10.3f} {p50:>8} {p99:>8}")
ratio = float(by["client-cert"][2]) / base
print(f"client-cert / noauth (mean of both runs) CPU per request: {ratio:.3f} (goal <= 1.05): {'met' if ratio <= 1.05 else 'NOT met'}")
EOF
