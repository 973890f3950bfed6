# The `many` rows of side-by-side.sh (sourced by it, ROWS="... many"; uses its PKI, fronts,
# helpers and `row`): OpenAPI v2 merge with 50 and 200 APIServices and cold start with 200, at
# apiagg and at kube-apiserver, the same documents served to both.
#
# Backends: 200 fake extension API servers in one Python process (side_by_side_many.py serve),
# one TLS port (HTTP/1.1, a serving-ca certificate for *.many.svc) and one group each: copies of
# oauth-apiserver's two groups, bNNN.oauth.openshift.io and bNNN.user.openshift.io, 26.6 MB of
# /openapi/v2 in all (each group's paths and the definitions they reach, the openshift ones
# renamed per group so that each group brings its own). Every group has its own Service
# (many/bNNN-oauth…): an ExternalName Service (localhost, the backend's port) at kube-apiserver,
# an entry of the `services` table at apiagg; each APIService names its Service and the caBundle,
# so both aggregators fetch each APIService's document separately.
#
# Each measurement starts the front anew, pinned to CPU 1 (everything else on CPU 0), with no
# APIService of the bench yet, reads /openapi/v2 once (apiagg reads sources' v2 documents from a
# client's first ask on) and waits $MANY_SETTLE s (5). Then (side_by_side_many.py merge): VmHWM
# reset (clear_refs 5) and RSS read, N APIServices POSTed to the front (8 connections; apiagg's
# APIService API, which keeps them in its store), and /openapi/v2 (JSON) polled on one
# connection, $MANY_POLL s (0.5) between answers, until it holds every renamed definition of the
# N groups (each answer is a merge at either front when something changed since the last one).
#   s to /openapi/v2 with N APIServices = from the first POST to that answer;
#   peak RSS MiB = VmHWM at that answer (the highest RSS since the reset) - RSS at the reset.
# Cold start: the 200 APIServices stay stored (kube-apiserver: etcd; apiagg: its --data-dir
# store) and the front is stopped and spawned again; from just before the spawn, /readyz and
# GET /apis/b099.user.openshift.io/v1/users (the last group registered, an empty list from its
# backend) are polled every 20 ms on new connections: two rows, the first 200 of each.
# apiagg is measured first (kube-apiserver is its delegate), then stopped; then kube-apiserver
# (its 50 APIServices deleted before the 200 are registered).
many_py="$here/side_by_side_many.py"
many_fixtures="${APIAGG_FIXTURES:-$repo/../shared/fixtures}"
many_settle=${MANY_SETTLE:-5}
many_poll=${MANY_POLL:-0.5}
many_last=/apis/b099.user.openshift.io/v1/users
[[ -f "$many_fixtures/extension-apiservers/oauth-apiserver/openapi-v2/swagger.json" ]] \
    || die "fixtures not found in $many_fixtures (set APIAGG_FIXTURES)"

log "many: 200 fake TLS backends (one process, one port and group each), their Services"
leaf serving-ca many serverAuth "/CN=many" "DNS:*.many.svc,$local_san"
mkdir -p "$tmp/many"
taskset -c 0 python3 "$many_py" serve "$many_fixtures" "$tmp/many" 200 many.crt many.key \
    2>"$tmp/many/serve.log" &
pid[many]=$!; pids+=($!)
for _ in $(seq 600); do [[ -f "$tmp/many/many.json" ]] && break; sleep 0.1; done
[[ -f "$tmp/many/many.json" ]] || die "fake backends did not start: $(tail -n 5 "$tmp/many/serve.log")"
python3 "$many_py" kube-services "${url[kube]}" serving-ca.crt admin.crt admin.key "$tmp/many"
python3 "$many_py" apiagg-services "$tmp/many" >"$tmp/many/services.yaml"
awk -v f="$tmp/many/services.yaml" '{ print } /^services:$/ { while ((getline l < f) > 0) print l }' \
    apiagg.yaml >apiagg.many.yaml
mv apiagg.many.yaml apiagg.yaml

many_get() { # FILE KEY...: the values of KEYs in a JSON object (peak_mib: peak_kib - rss0_kib in MiB)
    python3 - "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if "peak_kib" in r:
    r["peak_mib"] = round((r["peak_kib"] - r["rss0_kib"]) / 1024, 1)
print(" ".join(str(r.get(k, "")) for k in sys.argv[2:]))
PY
}
many_spawn() { # FRONT [keep]: a new process of FRONT on CPU 1 (apiagg: a new store unless keep)
    if [[ $1 == apiagg && ${2:-} == keep ]]; then
        setpriv --pdeathsig KILL -- taskset -c 1 "${apiagg_cmd[@]}" >>apiagg.log 2>&1 &
        pid[apiagg]=$!; pids+=($!)
    else
        start_front "$1" taskset -c 1
    fi
}
many_pin() { # FRONT on CPU 1, the rest on CPU 0
    pin_rest
    taskset -a -p -c 1 "${pid[$1]}" >/dev/null
}
many_merge() { # FRONT N
    local f=$1 n=$2 out="$tmp/many/merge.$1.$2"
    stop_front "$f"
    many_spawn "$f"
    wait_front "$f" 180
    many_pin "$f"
    wait_code "${url[$f]}/openapi/v2" 200 120 "$f /openapi/v2"
    sleep "$many_settle"
    wait_code "${url[$f]}/openapi/v2" 200 60 "$f /openapi/v2"
    log "  $f: $n APIServices registered, /openapi/v2 polled"
    taskset -c 0 python3 "$many_py" merge --url "${url[$f]}" --pid "${pid[$f]}" --n "$n" --dir "$tmp/many" \
        --poll "$many_poll" --ca serving-ca.crt --cert admin.crt --key admin.key >"$out.json" 2>"$out.log" \
        || die "$f merge of $n: $(tail -n 3 "$out.log")"
    read -r complete peak registered <<<"$(many_get "$out.json" complete_s peak_mib registered_s)"
    row "s to /openapi/v2 with $n APIServices" "$f" "$complete"
    row "peak RSS growth MiB, /openapi/v2 with $n APIServices" "$f" "$peak"
    log "  $f $n: $(cat "$out.json")"
    many_notes+=("$f $n: the POSTs took $registered s")
}
many_cold() { # FRONT
    local f=$1 t0 out="$tmp/many/cold.$1"
    stop_front "$f"
    sleep 2
    t0=$(date +%s.%N)
    many_spawn "$f" keep
    # The poller outranks the 200 fake backends on CPU 0 (nice -10): their start-up downloads
    # must not delay the poller's own connections, which would count against the front.
    nice -n -10 taskset -c 0 python3 "$many_py" coldstart --url "${url[$f]}" --pid "${pid[$f]}" --t0 "$t0" --path "$many_last" \
        --ca serving-ca.crt --cert admin.crt --key admin.key >"$out.json" 2>"$out.log" \
        || die "$f cold start: $(tail -n 3 "$out.log")"
    log "  $f cold start, 200 APIServices stored: $(cat "$out.json")"
    read -r ready get <<<"$(many_get "$out.json" readyz_s get_s)"
    row "s cold start to /readyz 200, 200 APIServices" "$f" "$ready"
    row "s cold start to a GET of the last group, 200 APIServices" "$f" "$get"
}

many_notes=()
for f in apiagg kube; do
    [[ " ${running[*]} " == *" $f "* ]] || continue
    log "many: $f, OpenAPI v2 with 50 then 200 APIServices, then cold start with 200"
    many_merge "$f" 50
    if [[ $f == kube ]]; then
        code="$(kc DELETE "${url[kube]}/apis/apiregistration.k8s.io/v1/apiservices?labelSelector=bench%3Dmany")"
        [[ "$code" == 200 ]] || die "deleting the 50 APIServices at kube-apiserver: $code $(head -c 300 kc.out)"
    fi
    many_merge "$f" 200
    many_cold "$f"
    if [[ $f == apiagg ]]; then stop_front apiagg; fi
done
many_mb="$(python3 -c "import json; print(round(sum(g['openapi_bytes'] for g in json.load(open('$tmp/many/many.json'))) / 1e6, 1))")"
notes+=("many: 200 fake TLS backends (one Python process on CPU 0, one port, group and Service per APIService; $many_mb MB of /openapi/v2 in all); the front started anew on CPU 1 for each N; s to /openapi/v2 = from the first of N APIService POSTs (8 connections) to the first /openapi/v2 answer (polled, $many_poll s between answers) holding every group's definitions; peak RSS = VmHWM then (reset by clear_refs at the first POST) - RSS at the first POST; cold start = spawn to the first 200 of /readyz, and of GET $many_last, polled every 20 ms, the 200 APIServices stored (etcd; apiagg's store); ${many_notes[*]}")
