# Sourced by side-by-side.sh once its fronts serve and `row` is defined: the rows "silent" and
# "audit" (issue 45). Uses its globals (here, tmp, url, pid, pids, running, kube_cmd, apiagg_cmd,
# name, object, token, rate, secs, quick, rows, notes, helper, sample_port) and functions
# (start_front, stop_front, restart_front, wait_front, wait_code, kc, pin_rest, nginx_conf, row, log, die).
#
# silent: one endpoint of two goes silent under 10 GETs/s (apiagg and kube-apiserver; nginx has no
#   active health check and is not measured). The wardle Service gets two endpoints, both TCP
#   relays (side_by_side_more.py relay) on this machine's first global IPv4 address, two ports,
#   to sample-apiserver: EndpointSlice validation refuses loopback addresses (127.0.0.0/8), so
#   127.0.0.2 cannot be an endpoint at kube-apiserver. kube-apiserver is restarted with
#   `--enable-aggregator-routing=true` and the Service becomes a selector-less ClusterIP Service
#   with one EndpointSlice per relay (its proxy then picks a slice, so an endpoint, at random per
#   request); apiagg is restarted with both relays in its `services` table (round-robin, probed
#   on /readyz). SILENT_SECS (20 with QUICK=1, else 60) of GETs at 10/s, each on its own TLS
#   connection (client certificate, not waiting for the one before, client timeout
#   SILENT_TIMEOUT=30 s); after 5 s the second relay goes silent: nothing more passes either way,
#   nothing is closed (no FIN, no RST), new connections are accepted and held. Rows: GETs lost
#   (not 200, or no answer within the client timeout) and the worst wait. Afterwards both fronts
#   get their first command line and kube-apiserver its ExternalName Service back.
#   kube-apiserver's proxy to an endpoint (client-go's transport, no egress selector): dial
#   timeout 30 s, TLS handshake timeout 10 s, no response-header timeout; an HTTP/2 connection
#   that stops answering is closed by its health check, a ping after 30 s without a frame and 15
#   s for its answer, failing what waits on it with 503; no retry on another endpoint.
#   Its availability check (every 30 s) tries 5 random endpoints and needs one answer.
# audit: CPU µs a Metadata audit adds per GET at the load row's rate (HTTP/1.1, h2load, bearer
#   token, the front on CPU 1; CPU = schedstat of its threads / GETs answered 200): measured
#   without audit, restarted with a policy of one rule `level: Metadata` (both stages) written
#   as JSON lines to a file (kube-apiserver and apiagg: --audit-policy-file, --audit-log-path;
#   nginx, the floor: a JSON access log line per request), then restarted without, AUDIT_ROUNDS
#   (2) times; added = the least CPU per GET with audit - the least without (other work on the
#   machine only adds). AUDIT_SECS (default 2 x the load row's) per run, after 1 s of warm-up.
#   The log lines written over each audited run are counted.

more_helper="$here/side_by_side_more.py"
silent_secs=${SILENT_SECS:-$([[ "$quick" == 1 ]] && echo 20 || echo 60)}
silent_timeout=${SILENT_TIMEOUT:-30}
audit_secs=${AUDIT_SECS:-$((secs * 2))}
audit_rounds=${AUDIT_ROUNDS:-2}

# ------------------------------------------------------------------------ a silent endpoint
wardle_service() { # external | slices PORT_A PORT_B: the Service wardle/api at kube-apiserver
    local ns="${url[kube]}/api/v1/namespaces/wardle" es="${url[kube]}/apis/discovery.k8s.io/v1/namespaces/wardle/endpointslices" p code
    kc DELETE "$es?labelSelector=kubernetes.io%2Fservice-name%3Dapi" >/dev/null
    kc DELETE "$ns/services/api" >/dev/null
    if [[ $1 == external ]]; then
        code="$(kc POST "$ns/services" "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"api\",\"namespace\":\"wardle\"},\"spec\":{\"type\":\"ExternalName\",\"externalName\":\"localhost\",\"ports\":[{\"port\":$sample_port,\"targetPort\":$sample_port}]}}")"
        [[ $code == 201 ]] || die "the ExternalName Service: $code $(cat kc.out)"
        return
    fi
    code="$(kc POST "$ns/services" "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"api\",\"namespace\":\"wardle\"},\"spec\":{\"type\":\"ClusterIP\",\"ports\":[{\"name\":\"https\",\"port\":$sample_port,\"targetPort\":$sample_port}]}}")"
    [[ $code == 201 ]] || die "the ClusterIP Service: $code $(cat kc.out)"
    for p in "$2" "$3"; do
        code="$(kc POST "$es" "{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\",\"metadata\":{\"name\":\"api-$p\",\"namespace\":\"wardle\",\"labels\":{\"kubernetes.io/service-name\":\"api\"}},\"addressType\":\"IPv4\",\"endpoints\":[{\"addresses\":[\"$silent_ip\"]}],\"ports\":[{\"name\":\"https\",\"port\":$p,\"protocol\":\"TCP\"}]}")"
        [[ $code == 201 ]] || die "EndpointSlice api-$p: $code $(cat kc.out)"
    done
}
start_relay() { # NAME PORT
    python3 "$more_helper" relay "$silent_ip" "$2" "$sample_port" >"$tmp/$1.out" 2>&1 &
    pid[$1]=$!; pids+=($!)
    for _ in $(seq 100); do grep -qs '^relaying' "$tmp/$1.out" && return 0; sleep 0.1; done
    die "relay $1 did not start: $(cat "$tmp/$1.out")"
}
stop_relay() { # NAME (it writes its count of accepted connections to its output)
    kill -TERM "${pid[$1]}" 2>/dev/null || true
    wait "${pid[$1]}" 2>/dev/null || true
    unset "pid[$1]"
}
apiagg_endpoints_healthy() { # N: until apiagg's status shows N healthy endpoints for the APIService
    local deadline=$((SECONDS + 30)) got=""
    while ((SECONDS < deadline)); do
        kc GET "${url[apiagg]}/debug/apiagg/status" >/dev/null 2>&1 || true
        got="$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sum(1 for i in d.get('items',[]) if i.get('name')==sys.argv[2] for e in i.get('endpoints') or [] if e.get('healthy')))" "$tmp/kc.out" "$name" 2>/dev/null || echo 0)"
        [[ "$got" == "$1" ]] && return 0
        sleep 0.3
    done
    log "  warning: apiagg shows $got healthy endpoints of $1"
}
measure_silent() { # FRONT
    local f=$1 a b saved i json lost worst
    read -r a b <<<"$(python3 "$helper" free-ports 2)"
    start_relay relay-a "$a"
    start_relay relay-b "$b"
    case $f in
        apiagg)
            saved=("${apiagg_cmd[@]}")
            sed "s|endpoints: \[\"https://127.0.0.1:$sample_port\"\]|endpoints: [\"https://$silent_ip:$a\", \"https://$silent_ip:$b\"]|" \
                apiagg.yaml >apiagg-silent.yaml
            for i in "${!apiagg_cmd[@]}"; do
                [[ "${apiagg_cmd[$i]}" == "$tmp/apiagg.yaml" ]] && apiagg_cmd[i]="$tmp/apiagg-silent.yaml"
            done
            restart_front apiagg
            apiagg_endpoints_healthy 2
            ;;
        kube)
            saved=("${kube_cmd[@]}")
            kube_cmd+=(--enable-aggregator-routing=true)
            stop_front kube
            start_front kube
            wait_code "${url[kube]}/readyz" 200 120 kube-apiserver
            wardle_service slices "$a" "$b"
            wait_front kube 180
            ;;
    esac
    log "  $f: $silent_secs s of GETs at 10/s, endpoints $silent_ip:$a and $silent_ip:$b, the second silent after 5 s"
    json="$(python3 "$more_helper" load --url "${url[$f]}" --path "$object" --ca serving-ca.crt --cert bench.crt \
        --key bench.key --rate 10 --secs "$silent_secs" --silence-at 5 --relay-pid "${pid[relay-b]}" \
        --timeout "$silent_timeout" --detail "$tmp/silent.$f.tsv")"
    echo "$json" >"$tmp/silent.$f.json"
    log "  $f: $json"
    stop_relay relay-a
    stop_relay relay-b
    log "  $f relays: a $(grep -m1 '^accepted' relay-a.out); b $(grep -m1 '^accepted' relay-b.out)"
    lost="$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['lost'])" "$json")"
    worst="$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['worst_s'])" "$json")"
    row "GETs lost of $((10 * silent_secs)), one endpoint of two going silent" "$f" "$lost"
    row "s worst wait, one endpoint of two going silent" "$f" "$worst"
    notes+=("silent endpoint at $f: $(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(f\"{d['ok']} of {d['requests']} answered 200, worst {d['worst_s']} s, p99 {d['p99_s']} s; {d['over_1s_after_silence']} of the {d['sent_after_silence']} sent after the silence waited over 1 s; lost: {d['lost_by'] or 'none'}\")" "$json")")
    case $f in
        apiagg) apiagg_cmd=("${saved[@]}"); restart_front apiagg ;;
        kube)
            kube_cmd=("${saved[@]}")
            cp kube-apiserver.log kube-apiserver.silent.log
            stop_front kube
            start_front kube
            wait_code "${url[kube]}/readyz" 200 120 kube-apiserver
            wardle_service external
            wait_front kube 180
            ;;
    esac
}
if [[ "$rows" == *" silent "* ]]; then
    silent_ip="$(ip -4 -o addr show scope global 2>/dev/null | awk '{sub("/.*", "", $4); print $4; exit}')"
    if [[ -z "$silent_ip" ]]; then
        notes+=("silent endpoint: not measured (no global IPv4 address on this machine; EndpointSlices refuse loopback addresses)")
    else
        log "a silent endpoint: $silent_secs s of GETs at 10/s, one endpoint of two silent after 5 s"
        for f in "${running[@]}"; do [[ $f == apiagg || $f == kube ]] && measure_silent "$f"; done
        notes+=("silent endpoint: two TCP relays to sample-apiserver on $silent_ip (EndpointSlices refuse loopback addresses), kube-apiserver with --enable-aggregator-routing=true and one EndpointSlice per relay, apiagg with both in its services table; 10 GETs/s for $silent_secs s, each on its own TLS connection, client timeout $silent_timeout s; the second relay goes silent (nothing passes, nothing closes, new connections held) 5 s in; lost = not 200 or no answer within the timeout (its wait then counts as $silent_timeout s)")
    fi
fi

# --------------------------------------------------------------------- what an audit adds
printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n' >audit-policy.yaml
json_log="log_format json escape=json '{\"time\":\"\$time_iso8601\",\"remote\":\"\$remote_addr\",\"user\":\"\$remote_user_name\",\"method\":\"\$request_method\",\"uri\":\"\$request_uri\",\"status\":\$status,\"bytes\":\$body_bytes_sent,\"agent\":\"\$http_user_agent\",\"request_id\":\"\$request_id\",\"duration\":\$request_time}';"
audit_on() { # FRONT LOG
    case $1 in
        apiagg) apiagg_cmd+=(--audit-policy-file "$tmp/audit-policy.yaml" --audit-log-path "$2") ;;
        kube) kube_cmd+=(--audit-policy-file "$tmp/audit-policy.yaml" --audit-log-path "$2") ;;
        nginx)
            local conf
            conf="$(<nginx.conf)"
            printf '%s\n' "${conf/"http { access_log off;"/"http { $json_log access_log $2 json;"}" >nginx.conf
            grep -q "access_log $2 json" nginx.conf || die "nginx.conf: no access log added"
            ;;
    esac
}
cpu_per_get() { # FRONT SECONDS [LOG]: "µs per GET answered 200, answered 200, sent[, LOG's lines
    # written over the run, those naming the flunder]"
    local f=$1 p=${pid[$1]} n=$((rate * $2)) c0 c1 p50 p99 count ok l0=0 m0=0 l1=0 m1=0
    pin_rest
    taskset -a -p -c 1 "$p" >/dev/null
    taskset -c 0 h2load --h1 -c 4 -m 1 --rps $((rate / 4)) -n "$rate" -H "Authorization: Bearer $token" \
        "${url[$f]}$object" >/dev/null 2>&1 || true # warm-up, 1 s
    rm -f "$tmp/lat.audit.$f"
    if [[ -n "${3:-}" ]]; then
        sleep 2 # apiagg writes its log on its own thread
        read -r l0 m0 <<<"$(python3 "$more_helper" lines "$3" "$object")"
    fi
    c0=$(python3 "$helper" cpu-ns "$p")
    taskset -c 0 h2load --h1 -c 4 -m 1 --rps $((rate / 4)) -n "$n" -H "Authorization: Bearer $token" \
        --log-file="$tmp/lat.audit.$f" "${url[$f]}$object" >"$tmp/h2load.audit.$f" 2>&1 || true
    c1=$(python3 "$helper" cpu-ns "$p")
    read -r p50 p99 count ok <<<"$(python3 "$helper" latency "$tmp/lat.audit.$f")"
    pin_rest
    if [[ -n "${3:-}" ]]; then
        sleep 2
        read -r l1 m1 <<<"$(python3 "$more_helper" lines "$3" "$object")"
    fi
    echo "$(python3 -c "print(round(($c1 - $c0) / 1000 / max(1, $ok), 1))") $ok $n $((l1 - l0)) $((m1 - m0))"
}
measure_audit() { # FRONT
    local f=$1 log="$tmp/audit.$1.log" saved r v ok n lines named offs=() ons=() logged=() added
    read -r v _ <<<"$(cpu_per_get "$f" "$audit_secs")"
    offs+=("$v")
    case $f in apiagg) saved=("${apiagg_cmd[@]}") ;; kube) saved=("${kube_cmd[@]}") ;; esac
    for r in $(seq "$audit_rounds"); do
        audit_on "$f" "$log"
        restart_front "$f"
        read -r v ok n lines named <<<"$(cpu_per_get "$f" "$audit_secs" "$log")"
        ons+=("$v")
        logged+=("$lines lines ($named naming the flunder) for $n GETs ($ok answered 200)")
        case $f in apiagg) apiagg_cmd=("${saved[@]}") ;; kube) kube_cmd=("${saved[@]}") ;; nginx) nginx_conf ;; esac
        restart_front "$f"
        read -r v _ <<<"$(cpu_per_get "$f" "$audit_secs")"
        offs+=("$v")
    done
    added=$(python3 -c "import sys; on, off = sys.argv[1].split(), sys.argv[2].split(); print(round(min(map(float, on)) - min(map(float, off)), 1))" "${ons[*]}" "${offs[*]}")
    log "  $f: CPU µs per GET without audit ${offs[*]}, with ${ons[*]}: added $added (least with - least without); audit log: ${logged[*]}"
    row "CPU µs a Metadata audit adds per GET at $rate/s, HTTP/1.1" "$f" "$added"
    notes+=("audit at $f: CPU µs per GET without, with, in turn: ${offs[0]}$(for r in $(seq "$audit_rounds"); do printf ', %s, %s' "${ons[r-1]}" "${offs[r]}"; done); the log over each audited run: $(IFS=';'; echo "${logged[*]}")")
}
if [[ "$rows" == *" audit "* ]]; then
    log "what a Metadata audit adds: CPU per GET at $rate/s over HTTP/1.1, $audit_secs s per run: without, then $audit_rounds times with and without"
    for f in "${running[@]}"; do [[ $f == agg ]] || measure_audit "$f"; done
    notes+=("audit: policy rules [{level: Metadata}] (stages RequestReceived and ResponseComplete: two events per request), JSON lines to a file (kube-apiserver: --audit-log-path, its blocking log mode; apiagg: --audit-log-path); nginx's floor is one JSON access log line per request; $audit_secs s per run, 1 s of warm-up before each; without, then $audit_rounds times with and without, each after a restart; added = the least CPU per GET with audit - the least without (other work on the machine only adds)")
fi
