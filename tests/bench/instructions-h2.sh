#!/usr/bin/env bash
# User-space instructions per proxied GET over TLS + HTTP/2 from the client, apiagg against
# nginx in the same run (issue 30): apiagg serving TLS (h2 by ALPN) and nginx with
# `listen … ssl http2` as reverse proxies to the same plain HTTP/1.1 nginx backend answering a
# 1 KiB JSON object. Each proxy runs alone under `valgrind --tool=callgrind`, twice, driven by
# `h2load -c 1 -m 1` (one TLS connection, one stream at a time): N1 then N2 requests;
# (count after N2 - count after N1) / (N2 - N1) is the cost of one request, start-up and the
# handshake excluded (the method of ../shared/bench-tools/instr_h2.sh; the HTTP/1.1 version is
# instructions.sh). Every run must answer all its requests with 200 over h2, or the script fails.
# Usage (from the repo root): tests/bench/instructions-h2.sh   (SKIP_BUILD=1 to reuse the build;
# N1, N2 to change the request counts, default 500 and 2500; KEEP_TMP=1 keeps the callgrind
# files and h2load's output for callgrind_annotate)
# Needs: cargo, nginx (with http_v2 and ssl), valgrind, h2load (Debian: nghttp2-client), openssl,
# curl, python3.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
helper="$here/proxy_load_helper.py"
source "$here/lib.sh"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
n1="${N1:-500}" n2="${N2:-2500}"
log() { printf '[instructions-h2] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
"$repo/scripts/need.sh" valgrind nginx h2load
for tool in openssl curl ss python3; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found"
done
nginx -V 2>&1 | grep -q -- --with-http_v2_module || die "this nginx has no http_v2 module"
[[ "${SKIP_BUILD:-0}" == 1 ]] || (cd "$repo" && cargo build --release -p apiagg-gateway --bins)
bench_temp instructions-h2
chmod 755 "$tmp"
read -r backend_port front_port <<<"$(python3 "$helper" free-ports 2)"
mkdir -p "$tmp/www" "$tmp/nginx" "$tmp/front" "$tmp/pki"
python3 "$helper" body "$tmp/www/object.json"

# A throwaway CA and a serving certificate for 127.0.0.1 (and localhost), used by both proxies.
pki="$tmp/pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=bench-ca \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 \
    -keyout "$pki/tls.key" -out "$pki/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' \
    >"$pki/ext.cnf"
openssl x509 -req -in "$pki/tls.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$pki/ext.cnf" -out "$pki/tls.crt" 2>/dev/null
chmod -R a+rX "$tmp"

# The backend every proxied request goes to (not measured), plain HTTP/1.1.
nginx_object_backend "$tmp" "$backend_port"

# apiagg: one remote APIService on the backend, serving TLS (HTTP/2 by ALPN).
python3 "$helper" apiagg-config "$tmp" "$front_port" "127.0.0.1:$backend_port" 1 bench.example.com
printf 'tls: {certFile: %s, keyFile: %s}\n' "$pki/tls.crt" "$pki/tls.key" >>"$tmp/apiagg.yaml"
cp "$target_dir/release/apiagg" "$tmp/apiagg"
path=/apis/bench.example.com/v1/widgets
url="https://127.0.0.1:$front_port$path"
apiagg=("$tmp/apiagg" serve --config "$tmp/apiagg.yaml" --threads 1 --probe-interval 1h
    --discovery-refresh 1h --openapi-refresh 1h)

# The anchor: nginx as a TLS + HTTP/2 reverse proxy to the same backend. nginx closes an h2
# connection after 1,000 requests by default (`keepalive_requests` since 1.19.7,
# `http2_max_requests` before), and its upstream connections likewise: all raised. TLS 1.3 is
# turned on explicitly (nginx before 1.23.4 offers only up to TLS 1.2 by default; apiagg
# negotiates 1.3 with h2load), so both sides run the same protocol.
nginx_version="$(nginx -v 2>&1 | sed -n 's|.*nginx/\([0-9.]*\).*|\1|p')"
older() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" == "$1" && "$1" != "$2" ]]; }
h2_listen="ssl http2" h2_more=""
older "$nginx_version" 1.19.7 && h2_more="http2_max_requests 100000;"
older "$nginx_version" 1.25.1 || { h2_listen="ssl"; h2_more="http2 on;"; }
cat >"$tmp/proxy.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $tmp/front/pid; error_log $tmp/front/error.log warn;
events { worker_connections 1024; }
http { access_log off; $(nginx_temps "$tmp/front") keepalive_requests 100000;
  upstream backend { server 127.0.0.1:$backend_port; keepalive 16; keepalive_requests 100000; }
  server { listen 127.0.0.1:$front_port $h2_listen; $h2_more
    ssl_certificate $pki/tls.crt; ssl_certificate_key $pki/tls.key; ssl_protocols TLSv1.2 TLSv1.3;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
nginx -t -p "$tmp/front/" -c "$tmp/proxy.conf" 2>"$tmp/front/t.log" || { cat "$tmp/front/t.log" >&2; exit 1; }
! grep -q '\[warn\]' "$tmp/front/t.log" || { log "nginx -t warns:"; cat "$tmp/front/t.log" >&2; }

# Waits, without touching the server (no connection whose cost could differ between runs), until
# it listens on the front port; then one GET over h2 (curl, verifying the certificate against the
# CA) must answer 200 with the backend's object ("retries before" counts the ones that did not).
wait_listening() {
    for _ in $(seq 900); do
        ss -Hltn "sport = :$front_port" | grep -q . && return 0
        sleep 0.1
    done
    return 1
}
check_once() { # $1 = label, $2 = log file of the server
    local got tries=0
    while :; do
        got="$(curl -sS --http2 --cacert "$pki/ca.crt" -o "$tmp/got.$1" \
            -w '%{http_code} %{http_version}' "$url" 2>>"$tmp/curl.$1.log" || true)"
        [[ "$got" == "200 2" ]] && break
        tries=$((tries + 1))
        (( tries < 120 )) || { cat "$2" >&2; log "$1: no 200 over h2 from $url (last: '$got')"; return 1; }
        sleep 0.5
    done
    cmp -s "$tmp/got.$1" "$tmp/www/object.json" || { log "$1: the answer is not the backend's object"; return 1; }
    echo "$tries"
}

count() { # $1 = label, $2 = requests, then the server command
    local label=$1 n=$2 out="$tmp/cg.$1.$2" pid early h2 ok
    shift 2
    # A fresh store for each apiagg run: its start and exit work must be the same in both runs.
    [[ "$1" == "$tmp/apiagg" ]] && set -- "$@" --data-dir "$out.data"
    valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >"$out.log" 2>&1 &
    pid=$!
    stop() { kill -INT "$pid" 2>/dev/null; sleep 0.5; kill -QUIT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }
    wait_listening || { stop; cat "$out.log" >&2; die "$label: not listening on $front_port"; }
    early="$(check_once "$label.$n" "$out.log")" || { stop; die "$label: no good answer before the run"; }
    h2="$tmp/h2load.$label.$n"
    h2load -n "$n" -c 1 -m 1 "$url" >"$h2" 2>&1 || true
    ok=1
    grep -q "^requests: $n total, $n started, $n done, $n succeeded, 0 failed, 0 errored, 0 timeout" "$h2" || ok=0
    grep -q "^status codes: $n 2xx, 0 3xx, 0 4xx, 0 5xx" "$h2" || ok=0
    grep -q "^Application protocol: h2" "$h2" || ok=0
    stop
    if (( ! ok )); then cat "$h2" >&2; die "$label: h2load did not get $n answers 200 over h2"; fi
    log "$label: $n requests, all 200 over h2 ($(sed -n 's/^TLS Protocol: //p' "$h2") $(sed -n 's/^Cipher: //p' "$h2"), $early retries before)"
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

h2_apiagg="$(per_request apiagg-h2 "${apiagg[@]}")"
h2_nginx="$(per_request nginx-h2 nginx -p "$tmp/front/" -c "$tmp/proxy.conf")"

python3 - "$h2_apiagg" "$h2_nginx" <<'PY'
import sys
a, n = (int(x) for x in sys.argv[1:])
print(f"{'work':<34} {'apiagg':>10} {'nginx':>10} {'ratio':>7}  goal")
print(f"{'proxied 1 KiB GET, TLS + h2':<34} {a:>10,} {n:>10,} {a / n:>7.2f}  <= 1.5 (issue 30)")
PY
