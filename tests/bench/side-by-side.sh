#!/usr/bin/env bash
# Side by side (issue 45): the same work through apiagg, kube-apiserver 1.37's aggregator, the
# standalone kube-aggregator and nginx (the floor), in one run, against one backend: the real
# k8s.io/sample-apiserver (built by `scripts/need.sh kube`) registered by the APIService
# v1alpha1.wardle.example.com in every aggregator, one flunder of about 1 KiB read by a caller
# `bench` whom the cluster's RBAC allows to read flunders (a ClusterRole and its binding).
#
# Set-up (all on loopback, a PKI made here with openssl): etcd; kube-apiserver with client
# certificates, a static token file, the front-proxy CA, `--authorization-mode=Node,RBAC`, API
# Priority and Fairness (its defaults); sample-apiserver (authentication and authorization
# delegated to kube-apiserver, trusting X-Remote-* from the front-proxy CA); apiagg (release) in
# front with kube-apiserver as its delegate, the same client CA and token file, `--authorization-
# config` with one RBAC authorizer over the cluster's objects, flow control from the cluster;
# the standalone kube-aggregator (tests/kube/cmd/kube-aggregator: upstream's server packages with
# the OpenAPI v3 config its own main omits, without which it does not start; its APIServices under
# its own etcd prefix, authentication and authorization delegated to kube-apiserver by TokenReview
# and SubjectAccessReview, as it is deployed; the Service read from kube-apiserver); nginx with
# TLS and HTTP/2, verifying client certificates, X-Remote-User from the CN, no authorization (the
# floor). Both kube aggregators reach sample-apiserver through the ExternalName Service
# wardle/api (localhost, the backend's port), without --enable-aggregator-routing.
#
# Rows (each front in turn; the front measured is pinned to CPU 1, everything else to CPU 0;
# side_by_side_rows.sh, side_by_side_many.sh and side_by_side_more.sh hold them):
#   instructions per proxied GET under callgrind, TLS + HTTP/1.1 and TLS + HTTP/2 (curl, one
#     connection, client certificate): the server runs under `valgrind --tool=callgrind
#     --instr-atstart=no`; once ready, instrumentation on, then on one fresh connection N1 and on
#     another N2 requests, each window between `callgrind_control -z` and `-d`; per request =
#     (count(N2) - count(N1)) / (N2 - N1) - what the process does idle over the extra time
#     (measured the same way with no requests; Go servers run controllers and GC meanwhile);
#   CPU µs per request and p50/p99 at a fixed rate (h2load --rps, bearer token of the token file,
#     HTTP/1.1 and HTTP/2): the front's CPU time (schedstat of its threads) over the run / requests;
#   RSS per idle watch: N_H2 watches as HTTP/2 streams over 50 connections and N_H1 as HTTP/1.1
#     connections (TLS, client certificate);
#   aggregated /apis and /openapi/v3/apis/wardle.example.com/v1alpha1 answers per second (h2load,
#     4 connections, 10 streams each, as fast as the front answers);
#   backend death (SIGKILL of sample-apiserver) to Available=False and to the first 503 at each
#     aggregator, and from its return to Available=True and the first 200;
#   many (apiagg and kube-apiserver; side_by_side_many.sh): 200 fake TLS backends, one group and
#     Service each; time from registering 50, then 200, APIServices to an /openapi/v2 holding every
#     group's definitions, and the peak RSS growth over it; cold start with the 200 stored, from
#     spawn to /readyz 200 and to the first 200 of a GET of the last group.
#   side_by_side_more.sh: GETs lost and the worst wait when one endpoint of two goes silent (no
#     FIN, no RST) under 10 GETs/s (apiagg, kube-apiserver with --enable-aggregator-routing), and
#     the CPU µs a Metadata audit to a JSON log file adds per GET (nginx: a JSON access log line).
#
# Usage (from the repo root): tests/bench/side-by-side.sh [OUT_DIR]   (default: a temporary one)
#   QUICK=1     smaller counts (a few minutes): N1/N2 20/80, watches 1,000 + 500, 5 s load runs
#   SKIP_BUILD=1, KEEP_TMP=1, FRONTS="apiagg kube agg nginx" (the fronts measured),
#   ROWS="instr load watch rps outage many silent audit" (the rows run), RATE (requests per
#   second, default 300), MANY_SETTLE (s between a front's start and a `many` measurement,
#   default 5), MANY_POLL (s between two /openapi/v2 answers in the `many` rows, default 0.5);
#   SILENT_SECS (20 with QUICK, else 60), SILENT_TIMEOUT (30), AUDIT_SECS (2 x the load runs'),
#   AUDIT_ROUNDS (2) for the rows of side_by_side_more.sh
#   DOC_PNG=path: also copy the chart there (docs/images/side-by-side.png); GO_CALLGRIND=1 also
#   runs kube-apiserver and kube-aggregator under callgrind (callgrind 3.19 aborts in them here)
# Writes OUT_DIR/side-by-side.json, .md and .png.
# Needs: cargo, go 1.26 (first run), nginx, valgrind, h2load, curl, openssl, ip, python3 (h2,
# matplotlib).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
helper="$here/side_by_side_helper.py"
source "$here/lib.sh"
log() { printf '[side-by-side] %s\n' "$*" >&2; }
die() { printf '[side-by-side] error: %s\n' "$*" >&2; exit 1; }
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
quick="${QUICK:-0}"
if [[ "$quick" == 1 ]]; then
    n1=${N1:-20} n2=${N2:-80} n_h2=${N_H2:-1000} n_h1=${N_H1:-500} secs=${SECS:-5}
else
    n1=${N1:-50} n2=${N2:-250} n_h2=${N_H2:-5000} n_h1=${N_H1:-2000} secs=${SECS:-15}
fi
rate=${RATE:-300}
fronts=(${FRONTS:-apiagg kube agg nginx})
rows=" ${ROWS:-instr load watch rps outage many silent audit} "
out_dir="${1:-}"

"$repo/scripts/need.sh" nginx valgrind h2load curl openssl python:h2 python:matplotlib
kube_bin="$("$repo/scripts/need.sh" kube-bin)"
build_release_bins
bench_temp side-by-side
raise_open_files
chmod 755 "$tmp"
[[ -n "$out_dir" ]] || out_dir="$tmp/out"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
cd "$tmp"

# ---------------------------------------------------------------------------------------- PKI
ca() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj "/CN=$1" \
        -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign,cRLSign,digitalSignature \
        -keyout "$1.key" -out "$1.crt" 2>/dev/null
}
leaf() { # CA NAME EKU SUBJECT [SANs]
    local ca=$1 name=$2 eku=$3 subj=$4 san=${5:-}
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$subj" \
        -keyout "$name.key" -out "$name.csr" 2>/dev/null
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$eku"
        [[ -z "$san" ]] || echo "subjectAltName=$san"
    } >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days 30 \
        -extfile "$name.ext" -out "$name.crt" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
}
log "PKI"
ca client-ca; ca front-proxy-ca; ca serving-ca
local_san="DNS:localhost,IP:127.0.0.1"
leaf serving-ca serving serverAuth,clientAuth "/CN=localhost" "$local_san"
leaf serving-ca sample serverAuth "/CN=api.wardle.svc" "DNS:api.wardle.svc,$local_san"
leaf front-proxy-ca front-proxy-client clientAuth "/CN=front-proxy-client"
leaf front-proxy-ca apiagg-proxy clientAuth "/CN=apiagg-front-proxy"
leaf client-ca admin clientAuth "/O=system:masters/CN=admin"
leaf client-ca bench clientAuth "/CN=bench"
openssl genrsa -out service-account.key 2048 2>/dev/null
openssl rsa -in service-account.key -pubout -out service-account.pub 2>/dev/null
echo 'benchtoken,bench,bench-uid,' >tokens.csv
token=benchtoken
kubeconfig() { # NAME SERVER CERT
    cat >"$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: "$2", certificate-authority: $tmp/serving-ca.crt}}]
users: [{name: u, user: {client-certificate: $tmp/$3.crt, client-key: $tmp/$3.key}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
EOF
}

read -r etcd_port peer_port kube_port sample_port apiagg_port agg_port nginx_port \
    <<<"$(python3 "$helper" free-ports 7)"
declare -A url=([apiagg]="https://127.0.0.1:$apiagg_port" [kube]="https://127.0.0.1:$kube_port"
    [agg]="https://127.0.0.1:$agg_port" [nginx]="https://127.0.0.1:$nginx_port")
declare -A pid=()
kubeconfig admin "${url[kube]}" admin
object=/apis/wardle.example.com/v1alpha1/namespaces/default/flunders/bench
name=v1alpha1.wardle.example.com

# curl as the admin (or another identity) against a front.
kc() { # METHOD URL [BODY]
    curl -sS --cacert serving-ca.crt --cert admin.crt --key admin.key -X "$1" \
        -H 'Content-Type: application/json' ${3:+--data-binary "$3"} -o "$tmp/kc.out" \
        -w '%{http_code}' "$2"
}
wait_code() { # URL CODE SECONDS [WHAT]
    local deadline=$((SECONDS + $3)) got
    while ((SECONDS < deadline)); do
        got="$(kc GET "$1" 2>/dev/null || true)"
        [[ "$got" == "$2" ]] && return 0
        sleep 0.3
    done
    die "${4:-$1} did not answer $2 within $3 s (last: $got $(head -c 300 "$tmp/kc.out" 2>/dev/null))"
}
pin_rest() { # everything of ours on CPU 0
    local p
    for p in "${pid[@]}"; do taskset -a -p -c 0 "$p" >/dev/null 2>&1 || true; done
}

# ------------------------------------------------------------------------- the control plane
start_etcd() {
    setpriv --pdeathsig KILL -- "$kube_bin/etcd" --name default --data-dir "$tmp/etcd-data" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "default=http://127.0.0.1:$peer_port" --unsafe-no-fsync >etcd.log 2>&1 &
    pid[etcd]=$!; pids+=($!)
}
requestheader=(--requestheader-client-ca-file front-proxy-ca.crt --requestheader-username-headers X-Remote-User
    --requestheader-uid-headers X-Remote-Uid --requestheader-group-headers X-Remote-Group
    --requestheader-extra-headers-prefix X-Remote-Extra-)
kube_cmd=("$kube_bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" --bind-address 127.0.0.1
    --secure-port "$kube_port" --advertise-address 127.0.0.1 --endpoint-reconciler-type none
    --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC
    --tls-cert-file serving.crt --tls-private-key-file serving.key --client-ca-file client-ca.crt
    --token-auth-file tokens.csv
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file service-account.pub
    --service-account-signing-key-file service-account.key
    --proxy-client-cert-file front-proxy-client.crt --proxy-client-key-file front-proxy-client.key
    --requestheader-allowed-names front-proxy-client "${requestheader[@]}" --cert-dir kube-certs)
start_kube() { # [wrapper...]
    setpriv --pdeathsig KILL -- "$@" "${kube_cmd[@]}" >kube-apiserver.log 2>&1 &
    pid[kube]=$!; pids+=($!)
}
sample_cmd=("$kube_bin/sample-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" --bind-address 127.0.0.1
    --secure-port "$sample_port" --tls-cert-file sample.crt --tls-private-key-file sample.key
    --kubeconfig admin.kubeconfig --authentication-kubeconfig admin.kubeconfig
    --authorization-kubeconfig admin.kubeconfig
    --requestheader-allowed-names front-proxy-client,apiagg-front-proxy "${requestheader[@]}")
start_sample() {
    printf '%q ' taskset -c 0 "${sample_cmd[@]}" >sample.cmd
    echo ">>$tmp/sample-apiserver.log 2>&1" >>sample.cmd
    taskset -c 0 "${sample_cmd[@]}" >>sample-apiserver.log 2>&1 &
    pid[sample]=$!; pids+=($!)
}
log "etcd, kube-apiserver $("$kube_bin/kube-apiserver" --version 2>/dev/null | awk '{print $2}')"
start_etcd
start_kube
wait_code "${url[kube]}/readyz" 200 120 kube-apiserver
log "RBAC for bench, the Service and APIService of sample-apiserver, its flunder"
kc POST "${url[kube]}/apis/rbac.authorization.k8s.io/v1/clusterroles" \
    '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"flunder-reader"},"rules":[{"apiGroups":["wardle.example.com"],"resources":["flunders"],"verbs":["get","list","watch"]}]}' >/dev/null
kc POST "${url[kube]}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings" \
    '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"bench-reads-flunders"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"flunder-reader"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"bench"}]}' >/dev/null
kc POST "${url[kube]}/api/v1/namespaces" '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"wardle"}}' >/dev/null
kc POST "${url[kube]}/api/v1/namespaces/wardle/services" \
    "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"api\",\"namespace\":\"wardle\"},\"spec\":{\"type\":\"ExternalName\",\"externalName\":\"localhost\",\"ports\":[{\"port\":$sample_port,\"targetPort\":$sample_port}]}}" >/dev/null
apiservice="$(python3 "$helper" apiservice wardle.example.com v1alpha1 "$sample_port" serving-ca.crt)"
code="$(kc POST "${url[kube]}/apis/apiregistration.k8s.io/v1/apiservices" "$apiservice")"
[[ "$code" == 201 ]] || die "APIService at kube-apiserver: $code $(cat kc.out)"
start_sample
wait_code "${url[kube]}/apis/wardle.example.com/v1alpha1" 200 120 "sample-apiserver through kube-apiserver"
pad="$(printf 'x%.0s' $(seq 150))"
code="$(kc POST "${url[kube]}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders" \
    "{\"apiVersion\":\"wardle.example.com/v1alpha1\",\"kind\":\"Flunder\",\"metadata\":{\"name\":\"bench\",\"labels\":{\"app\":\"bench\"},\"annotations\":{\"pad\":\"$pad\"}},\"spec\":{}}")"
[[ "$code" == 201 ]] || die "creating the flunder: $code $(cat kc.out)"
object_bytes="$(kc GET "${url[kube]}$object" >/dev/null; wc -c <kc.out)"
log "the flunder: $object_bytes bytes"

# ------------------------------------------------------------------------------------ apiagg
cat >apiagg.yaml <<EOF
listen: 127.0.0.1:$apiagg_port
tls: {certFile: serving.crt, keyFile: serving.key}
authentication: {clientCAFile: client-ca.crt, tokenFile: tokens.csv}
proxyClient: {certFile: apiagg-proxy.crt, keyFile: apiagg-proxy.key}
delegate: {url: "${url[kube]}", caFile: serving-ca.crt, certFile: admin.crt, keyFile: admin.key}
services:
  - {namespace: wardle, name: api, port: $sample_port, endpoints: ["https://127.0.0.1:$sample_port"]}
apiServices:
  - $apiservice
EOF
printf 'apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: RBAC\n  name: rbac\n' >authz.yaml
apiagg_cmd=("$tmp/apiagg" serve --config "$tmp/apiagg.yaml" --data-dir "$tmp/apiagg-data"
    --authorization-config "$tmp/authz.yaml" --flow-control-from-cluster)
cp "$target_dir/release/apiagg" "$tmp/apiagg"
start_apiagg() { # [wrapper...]
    rm -rf "$tmp/apiagg-data"
    setpriv --pdeathsig KILL -- "$@" "${apiagg_cmd[@]}" >>apiagg.log 2>&1 &
    pid[apiagg]=$!; pids+=($!)
}

# --------------------------------------------------------------------------- kube-aggregator
kubeconfig aggregator "${url[kube]}" admin
agg_cmd=("$kube_bin/kube-aggregator" --etcd-servers "http://127.0.0.1:$etcd_port" --etcd-prefix /kube-aggregator
    --bind-address 127.0.0.1 --secure-port "$agg_port" --tls-cert-file serving.crt --tls-private-key-file serving.key
    --client-ca-file client-ca.crt --kubeconfig aggregator.kubeconfig
    --authentication-kubeconfig aggregator.kubeconfig --authorization-kubeconfig aggregator.kubeconfig
    --proxy-client-cert-file front-proxy-client.crt --proxy-client-key-file front-proxy-client.key
    --requestheader-allowed-names front-proxy-client "${requestheader[@]}" --cert-dir agg-certs
    ${AGG_ARGS:-})
start_agg() { # [wrapper...]
    setpriv --pdeathsig KILL -- "$@" "${agg_cmd[@]}" >>kube-aggregator.log 2>&1 &
    pid[agg]=$!; pids+=($!)
}

# ------------------------------------------------------------------------------------- nginx
mkdir -p nginx
nginx_conf() { # the floor: TLS + h2, client certificates verified, X-Remote-User from the CN
    cat >nginx.conf <<EOF
daemon off; master_process off; worker_processes 1; pid $tmp/nginx/pid; error_log $tmp/nginx/error.log warn;
worker_rlimit_nofile 40000;
events { worker_connections 20000; }
http { access_log off; $(nginx_temps "$tmp/nginx")
  map \$ssl_client_s_dn \$cn { ~CN=(?<c>[^,/]+) \$c; default ""; }
  map \$http_authorization \$token_user { "Bearer $token" bench; default ""; }
  map \$cn \$remote_user_name { "" \$token_user; default \$cn; }
  upstream sample { server 127.0.0.1:$sample_port; keepalive 64; }
  server { listen 127.0.0.1:$nginx_port ssl http2; keepalive_requests 1000000; http2_max_concurrent_streams 250;
    ssl_certificate $tmp/serving.crt; ssl_certificate_key $tmp/serving.key;
    ssl_client_certificate $tmp/client-ca.crt; ssl_verify_client optional;
    location / {
      proxy_pass https://sample; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header X-Remote-User \$remote_user_name; proxy_set_header Authorization "";
      proxy_ssl_certificate $tmp/front-proxy-client.crt; proxy_ssl_certificate_key $tmp/front-proxy-client.key;
      proxy_ssl_trusted_certificate $tmp/serving-ca.crt; proxy_ssl_verify on; proxy_ssl_name api.wardle.svc;
      proxy_ssl_session_reuse on; proxy_buffering off; proxy_read_timeout 1h; } } }
EOF
}
nginx_conf
start_nginx() { # [wrapper...]
    setpriv --pdeathsig KILL -- "$@" nginx -p "$tmp/nginx/" -c "$tmp/nginx.conf" >>nginx.log 2>&1 &
    pid[nginx]=$!; pids+=($!)
}

# Each front ready: serving the flunder to bench.
bench_get() { # URL: the status bench gets
    curl -sS --cacert serving-ca.crt --cert bench.crt --key bench.key -o /dev/null -w '%{http_code}' "$1$object" || true
}
wait_front() { # FRONT SECONDS
    local deadline=$((SECONDS + $2)) got=""
    while ((SECONDS < deadline)); do
        got="$(bench_get "${url[$1]}")"
        [[ "$got" == 200 ]] && return 0
        sleep 0.5
    done
    die "$1 does not serve the flunder to bench within $2 s (last: $got)"
}
start_front() { # FRONT [wrapper...]
    local f=$1
    shift
    case $f in
        apiagg) start_apiagg "$@" ;;
        kube) start_kube "$@" ;;
        agg) start_agg "$@" ;;
        nginx) start_nginx "$@" ;;
    esac
}
stop_front() { stop_pid "${pid[$1]}"; wait "${pid[$1]}" 2>/dev/null || true; }
restart_front() { # FRONT
    stop_front "$1"
    start_front "$1"
    [[ $1 != kube ]] || wait_code "${url[kube]}/readyz" 200 120 kube-apiserver
    wait_front "$1" 180
}

running=()
notes=()
for f in "${fronts[@]}"; do
    case $f in
        kube) ;;
        agg)
            start_agg
            for _ in $(seq 90); do
                kill -0 "${pid[agg]}" 2>/dev/null || break
                [[ "$(kc GET "${url[agg]}/readyz" 2>/dev/null || true)" == 200 ]] && break
                sleep 1
            done
            if ! (wait_code "${url[agg]}/readyz" 200 2 kube-aggregator 2>/dev/null); then
                why="$(grep -m1 -E '^E.*(command failed|run.go)' kube-aggregator.log | cut -c1-300 || true)"
                log "the standalone kube-aggregator did not start: ${why:-see its log}"
                notes+=("the standalone kube-aggregator did not start in this run: ${why:-no ready answer in 90 s}")
                stop_front agg
                continue
            fi
            code="$(kc POST "${url[agg]}/apis/apiregistration.k8s.io/v1/apiservices" "$apiservice")"
            [[ "$code" == 201 ]] || die "APIService at kube-aggregator: $code $(cat kc.out)"
            ;;
        *) start_front "$f" ;;
    esac
    wait_front "$f" 120
    running+=("$f")
    log "$f serves the flunder to bench"
done

results="$out_dir/side-by-side.json"
: >"$tmp/rows.tsv" # name \t front \t value \t better
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-lower}" >>"$tmp/rows.tsv"; }

# ------------------------------------- instructions, load, watches, answers per second, outage
source "$here/side_by_side_rows.sh"

# ---------------------------------------- OpenAPI v2 merge and cold start with many APIServices
[[ "$rows" != *" many "* ]] || source "$here/side_by_side_many.sh"
source "$here/side_by_side_more.sh" # the rows silent and audit
python3 - "$tmp/rows.tsv" "$results" "$(date -u +%F)" "$(nproc)" "$("$kube_bin/kube-apiserver" --version | awk '{print $2}')" \
    "$(git -C "$repo" rev-parse --short HEAD)" "$object_bytes" "${notes[@]}" <<'PY'
import json, sys
rows_tsv, out, date, cores, kube, commit, size, *notes = sys.argv[1:]
rows, order = {}, []
for line in open(rows_tsv):
    name, front, value, better = line.rstrip("\n").split("\t")
    if name not in rows:
        rows[name] = {"name": name, "better": better, "values": {}}
        order.append(name)
    rows[name]["values"][front] = float(value) if value not in ("", "None") else None
json.dump({"title": f"apiagg ({commit}) and kube-apiserver {kube}'s aggregator, one run, {date}, {cores} cores; a {size}-byte flunder from sample-apiserver",
           "date": date, "rows": [rows[n] for n in order], "notes": notes}, open(out, "w"), indent=1)
PY
python3 "$helper" report "$results" "$out_dir/side-by-side.md" "$out_dir/side-by-side.png"
[[ -z "${DOC_PNG:-}" ]] || cp "$out_dir/side-by-side.png" "$DOC_PNG"
log "results in $out_dir"
