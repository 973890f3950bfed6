#!/usr/bin/env bash
# Fuzzing (issue 11, item 7): builds the cargo-fuzz targets in fuzz/ and runs each for a bounded
# time, then prints per target the executions, exec/s, the projected time to 10 million
# executions, and the findings (crash, timeout and out-of-memory files).
#
# Usage (from anywhere):   tests/bench/fuzz.sh [seconds-per-target]        (default 300)
#
# Targets (fuzz/fuzz_targets/):
#   config_file       gateway config loader (GatewayConfig::load, multi-document APIService
#                     files) and Registry::build
#   apiservice_write  APIService API writes: strategy::decode / prepare_* and apply_patch with the
#                     four patch kinds on a fixed stored APIService
#   discovery_docs    APIGroupDiscoveryList (v2, v2beta1), APIResourceList, APIGroupList,
#                     APIGroup, APIVersions through split/convert/merge/render
#   discovery_accept  Accept / Accept-Encoding parsing and discovery negotiation
#   openapi_v2        PreparedV2::local / remote, merge_order, merge_v2, render_v2 (protobuf, gzip)
#   openapi_v3        V3Source::from_index, V3Served, render_v3, build_v3_index
#   cluster_services  Services and EndpointSlices from the delegate: ClusterServices lists, watch
#                     events, resolve in every mode, parse_endpoint
#   requestinfo       client request targets: the canonical-path check, RequestInfo, the route,
#                     the authorization attributes (selectors)
#   backend_h1        a backend's HTTP/1.1 answer through apiagg's own client: heads (1xx
#                     first), framing, chunked bodies and trailers, read in fuzzer-chosen pieces
#   jwt_claims        JWT headers and payloads: untrusted_issuer, verify (signed with a real test
#                     key, or not), claim rules, CEL and claim mappings, user rules
#   authn_config      the AuthenticationConfiguration loader (apiagg_authn::load), then a mapping
#   authz_config      the AuthorizationConfiguration loader (apiagg_authz::validate::load), then
#                     the webhooks' match conditions
#
# Seeds are built at run time from the fixtures (nothing is copied into the repo): APIService
# manifests, discovery documents, OpenAPI v2 documents cut into one document per group-version
# (paths plus the definitions and parameters they reach), OpenAPI v3 documents and indexes, and
# a few hand-written patches, Accept headers, Services and EndpointSlices; request targets made
# of the OpenAPI documents' paths; backend answers carrying the discovery documents in every
# framing; tokens' claims; the authentication and authorization files of docs/ and of the
# crates' tests. The corpus grows across runs in $FUZZ_WORK.
#
# Each fuzzer runs under `nice -n 19` as one libFuzzer process (no -jobs), stops at the first
# finding, and is bounded by -max_total_time (and by RUNS executions when set). The targets are
# built with debug assertions (overflow checks included). Minimize a finding with
#   RUSTC_BOOTSTRAP=1 cargo fuzz tmin -s none -a <target> <file>
# and reproduce it with  RUSTC_BOOTSTRAP=1 cargo fuzz run -s none -a <target> <file>
#
# Toolchain: the default (stable) one with RUSTC_BOOTSTRAP=1 (libFuzzer's instrumentation flags
# are stable); a nightly only for a sanitizer (-Zsanitizer).
#
# Environment: TARGETS (space-separated subset, default all), FUZZ_SANITIZER (none: the code
# under test is safe Rust; `address` is slower but also checks unsafe-libyaml's C-style code),
# MAX_LEN (65536: the largest input, 8192 for Accept headers and request targets, and the size
# cap of seeds), RUNS (stop a target after this many executions), FUZZ_WORK
# (<repo>/target/fuzz: seeds, corpus, artifacts, logs, tmp), APIAGG_FIXTURES
# (<repo>/../shared/fixtures), SKIP_BUILD=1, FUZZ_ARGS (extra libFuzzer flags).
# Needs: rustup, cargo-fuzz (cargo install cargo-fuzz), python3.

set -euo pipefail

log() { printf '[fuzz] %s\n' "$*" >&2; }
die() { printf '[fuzz] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

SECONDS_PER_TARGET="${1:-300}"
[[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ && "$SECONDS_PER_TARGET" -gt 0 ]] || die "seconds-per-target must be a positive integer"
ALL_TARGETS="requestinfo backend_h1 jwt_claims authn_config authz_config config_file apiservice_write discovery_docs discovery_accept openapi_v2 openapi_v3 cluster_services"
TARGETS="${TARGETS:-$ALL_TARGETS}"
SANITIZER="${FUZZ_SANITIZER:-none}"
MAX_LEN="${MAX_LEN:-65536}"
work="${FUZZ_WORK:-$repo/target/fuzz}"
fixtures="${APIAGG_FIXTURES:-$repo/../shared/fixtures}"
GOAL=10000000

command -v python3 >/dev/null 2>&1 || die "'python3' not found"
command -v cargo >/dev/null 2>&1 || die "'cargo' not found"
if [[ "$SANITIZER" == none ]]; then
    # The default toolchain: without a sanitizer, cargo-fuzz's flags are stable ones, and
    # RUSTC_BOOTSTRAP=1 lets it through its check for a nightly.
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
else
    cargo +nightly --version >/dev/null 2>&1 || die "FUZZ_SANITIZER=$SANITIZER needs a nightly toolchain"
    fuzz=(cargo +nightly fuzz)
fi
"${fuzz[@]}" --version >/dev/null 2>&1 || die "cargo-fuzz not found (cargo install cargo-fuzz)"
[[ -f "$fixtures/kubernetes/discovery/aggregated_v2.json" ]] || die "fixtures not found in $fixtures (set APIAGG_FIXTURES)"
for t in $TARGETS; do
    [[ " $ALL_TARGETS " == *" $t "* ]] || die "unknown target $t (known: $ALL_TARGETS)"
done

mkdir -p "$work"
log "building seeds in $work/seeds from $fixtures"
rm -rf "$work/seeds"
python3 - "$fixtures" "$work/seeds" "$repo" "$MAX_LEN" <<'PY'
import json, os, re, sys, glob

fixtures, out, repo, max_len = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
counts = {}

def seed(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > max_len:
        return
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    counts[target] = counts.get(target, 0) + 1

def read(path):
    with open(path, "rb") as f:
        return f.read()

def documents(text):
    """YAML documents split on `---` lines (good enough for seeds; no YAML module needed)."""
    return [d for d in re.split(r"(?m)^---[^\n]*\n", text) if d.strip()]

try:
    import yaml
except ImportError:
    yaml = None

# --- config_file: config text, NUL, APIService file text -------------------------------------
manifests = sorted(glob.glob(os.path.join(fixtures, "apiservices", "**", "*.yaml"), recursive=True))
main = ("listen: 127.0.0.1:8080\nservices:\n"
        "  - namespace: kube-system\n    name: metrics-server\n    port: 443\n"
        "    endpoints: [\"https://127.0.0.1:9443\", \"http://[::1]:8080\"]\n"
        "apiServiceFiles:\n  - apiservices/*.yaml\n")
apiservice_objects = []
for path in manifests:
    text = read(path)
    base = os.path.basename(path)
    seed("config_file", "files-" + base, main.encode() + b"\0" + text)
    if yaml is not None:
        try:
            objs = [o for o in yaml.safe_load_all(text) if isinstance(o, dict) and o.get("kind") == "APIService"]
        except yaml.YAMLError:
            objs = []
        apiservice_objects += objs
        if objs:
            inline = {"listen": "127.0.0.1:8080", "serviceResolution": "config",
                      "services": [{"namespace": o["spec"]["service"]["namespace"], "name": o["spec"]["service"]["name"],
                                    "port": o["spec"]["service"].get("port", 443), "endpoints": ["https://127.0.0.1:9443"]}
                                   for o in objs if (o.get("spec") or {}).get("service")][:1],
                      "apiServices": objs}
            seed("config_file", "inline-" + base, json.dumps(inline, default=str))
examples = os.path.join(repo, "deploy", "examples")
if os.path.isfile(os.path.join(examples, "apiagg.yaml")):
    for f in sorted(glob.glob(os.path.join(examples, "apiservices", "*.yaml"))):
        seed("config_file", "example-" + os.path.basename(f), read(os.path.join(examples, "apiagg.yaml")) + b"\0" + read(f))
for f in sorted(glob.glob(os.path.join(repo, "deploy", "base", "apiagg.yaml"))):
    seed("config_file", "deploy-base", read(f))
seed("config_file", "delegate-url",
     "delegate:\n  url: https://127.0.0.1:6443\n  insecureSkipTLSVerify: true\n  bearerTokenFile: token\n"
     "authentication:\n  anonymous: true\n  tokenReview: true\n")
seed("config_file", "delegate-kubeconfig",
     "delegate:\n  kubeconfig: apiservices/a.yaml\n\0"
     "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
     "clusters:\n- name: k\n  cluster: {server: 'https://10.0.0.1:6443', certificate-authority-data: 'LS0t'}\n"
     "users:\n- name: u\n  user: {token: abc}\n")

# --- apiservice_write: op byte + body (see fuzz_targets/apiservice_write.rs) -------------------
CREATE, UPDATE, JSONP, MERGE, STRATEGIC, APPLY, APPLY_CREATE, OPTIONS = range(8)
STATUS, FORCE, STRICT, IGNORE = 0x80, 0x40, 0x20, 0x10
NAME = "v1beta1.metrics.k8s.io"
if not apiservice_objects:
    apiservice_objects = [{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                           "metadata": {"name": NAME},
                           "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                                    "versionPriority": 100, "insecureSkipTLSVerify": True,
                                    "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443}}}]
for i, obj in enumerate(apiservice_objects):
    body = json.dumps(obj, default=str).encode()
    seed("apiservice_write", f"create-{i}", bytes([CREATE]) + body)
    seed("apiservice_write", f"create-strict-{i}", bytes([CREATE | STRICT]) + body)
    renamed = json.loads(json.dumps(obj, default=str))
    renamed.setdefault("metadata", {})["name"] = NAME
    body = json.dumps(renamed).encode()
    seed("apiservice_write", f"update-{i}", bytes([UPDATE]) + body)
    seed("apiservice_write", f"merge-{i}", bytes([MERGE]) + body)
    seed("apiservice_write", f"apply-{i}", bytes([APPLY]) + body)
    seed("apiservice_write", f"apply-force-{i}", bytes([APPLY | FORCE]) + body)
    seed("apiservice_write", f"apply-create-{i}", bytes([APPLY_CREATE | IGNORE]) + body)
for path in manifests:
    for j, doc in enumerate(documents(read(path).decode("utf-8", "replace"))):
        if "kind: APIService" in doc and NAME in doc:
            seed("apiservice_write", f"apply-yaml-{os.path.basename(path)}-{j}", bytes([APPLY]) + doc.encode())
            seed("apiservice_write", f"apply-create-yaml-{os.path.basename(path)}-{j}", bytes([APPLY_CREATE]) + doc.encode())
managed = [{"manager": "kubectl", "operation": "Apply", "apiVersion": "apiregistration.k8s.io/v1",
            "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:k8s-app": {}}},
                         "f:spec": {"f:group": {}, "f:service": {".": {}, "f:name": {}, "f:namespace": {}}}}},
           {"manager": "apiagg-availability", "operation": "Update", "subresource": "status",
            "apiVersion": "apiregistration.k8s.io/v1", "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:conditions": {".": {}, 'k:{"type":"Available"}': {".": {}, "f:status": {}, "f:reason": {}}}}}}]
with_managed = dict(apiservice_objects[0], metadata={"name": NAME, "managedFields": managed})
seed("apiservice_write", "update-managed-fields", bytes([UPDATE]) + json.dumps(with_managed).encode())
seed("apiservice_write", "apply-managed-fields", bytes([APPLY]) + json.dumps(with_managed).encode())
seed("apiservice_write", "create-clear-managed-fields", bytes([CREATE]) + json.dumps(dict(apiservice_objects[0], metadata={"name": NAME, "managedFields": [{}]})).encode())
patches = {
    "json-replace": (JSONP, '[{"op":"replace","path":"/spec/versionPriority","value":200},{"op":"test","path":"/spec/group","value":"metrics.k8s.io"}]'),
    "json-add-remove": (JSONP, '[{"op":"add","path":"/metadata/labels/a","value":"b"},{"op":"remove","path":"/spec/service"},{"op":"copy","from":"/spec/group","path":"/metadata/annotations"},{"op":"move","from":"/metadata/labels","path":"/metadata/x"}]'),
    "merge-null": (MERGE, '{"spec":{"service":null,"insecureSkipTLSVerify":null,"caBundle":"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"}}'),
    "merge-finalizers": (MERGE | STRICT, '{"metadata":{"finalizers":["a/b"],"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"u1"}]},"spec":{"bogus":1}}'),
    "strategic-conditions": (STRATEGIC | STATUS, '{"status":{"conditions":[{"type":"Available","status":"True","reason":"Passed","message":"all checks passed","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Other","$patch":"delete"}]}}'),
    "strategic-replace": (STRATEGIC, '{"spec":{"$patch":"replace","group":"metrics.k8s.io","version":"v1beta1","groupPriorityMinimum":100,"versionPriority":100},"$setElementOrder/conditions":[{"type":"Available"}],"$retainKeys":["spec"]}'),
    "status-update": (UPDATE | STATUS, '{"metadata":{"name":"v1beta1.metrics.k8s.io"},"status":{"conditions":[{"type":"Available","status":"Unknown"}]}}'),
    "apply-yaml": (APPLY, "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: v1beta1.metrics.k8s.io\nspec:\n  versionPriority: 50\n  service: {namespace: kube-system, name: metrics-server, port: 8443}\n"),
    "apply-status": (APPLY | STATUS | FORCE, "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1beta1.metrics.k8s.io}\nstatus:\n  conditions:\n  - {type: Available, status: 'True', reason: Passed}\n"),
    "options": (OPTIONS, "fuzz\0true\0Strict\0kubectl/v1.32.0 (linux/amd64) kubernetes/abcdef\0application/apply-patch+yaml; charset=utf-8"),
    "options-bad": (OPTIONS, "\0false\0Bogus\0\0application/json-patch+json"),
}
for name, (op, body) in patches.items():
    seed("apiservice_write", name, bytes([op]) + body.encode())

# --- discovery_docs: every discovery document -------------------------------------------------
for path in sorted(glob.glob(os.path.join(fixtures, "**", "discovery", "*.json"), recursive=True)):
    if os.path.basename(path) != "v3-discovery.json":
        seed("discovery_docs", os.path.relpath(path, fixtures), read(path))
try:
    agg = json.loads(read(os.path.join(fixtures, "kubernetes", "discovery", "aggregated_v2.json")))
    # One group per seed (small inputs run faster), and v2beta1 with a stale version.
    for g in agg.get("items", [])[:12]:
        one = dict(agg, items=[g])
        seed("discovery_docs", "aggregated-" + g.get("metadata", {}).get("name", "core"), json.dumps(one))
    beta = dict(agg, apiVersion="apidiscovery.k8s.io/v2beta1", items=agg.get("items", [])[:2])
    if beta["items"] and beta["items"][0].get("versions"):
        beta["items"][0]["versions"][0]["freshness"] = "Stale"
    seed("discovery_docs", "aggregated-v2beta1", json.dumps(beta))
except (OSError, ValueError):
    pass

# --- discovery_accept: Accept headers ---------------------------------------------------------
for i, h in enumerate([
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer",
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList;q=0.9, application/json;q=0.5",
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json;q=0",
    "application/vnd.kubernetes.protobuf,application/json;as=Table;v=v1;g=meta.k8s.io,*/*;q=0.1",
    "text/html, application/xhtml+xml, */*;q=0.8",
    "application/json;stream=watch",
    "gzip, deflate, br;q=1.0, *;q=0.5",
    "*", "",
]):
    seed("discovery_accept", f"accept-{i}", h)

# --- openapi_v2: documents cut per group-version ----------------------------------------------
REF = re.compile(r'"\$ref":\s*"#/(definitions|parameters)/([^"]+)"')

def closure(doc, paths):
    defs, params = doc.get("definitions") or {}, doc.get("parameters") or {}
    keep = {"definitions": set(), "parameters": set()}
    todo = [json.dumps(paths)]
    while todo:
        for kind, name in REF.findall(todo.pop()):
            name = name.replace("~1", "/").replace("~0", "~")
            table = defs if kind == "definitions" else params
            if name in table and name not in keep[kind]:
                keep[kind].add(name)
                todo.append(json.dumps(table[name]))
    return keep

def cut(doc, prefix, limit):
    paths = {p: v for p, v in (doc.get("paths") or {}).items() if p.startswith(prefix)}
    while paths:
        keep = closure(doc, paths)
        small = {k: v for k, v in doc.items() if k not in ("paths", "definitions", "parameters")}
        small["paths"] = paths
        small["definitions"] = {k: v for k, v in (doc.get("definitions") or {}).items() if k in keep["definitions"]}
        if doc.get("parameters"):
            small["parameters"] = {k: v for k, v in doc["parameters"].items() if k in keep["parameters"]}
        data = json.dumps(small, separators=(",", ":"))
        if len(data) <= limit:
            return data
        paths = dict(list(paths.items())[: len(paths) // 2])
    return None

v2_files = (glob.glob(os.path.join(fixtures, "kubernetes", "openapi-v2", "*.json"))
            + glob.glob(os.path.join(fixtures, "kubernetes", "v2-v3-pairs", "v2_*.json"))
            + glob.glob(os.path.join(fixtures, "extension-apiservers", "**", "*.json"), recursive=True)
            + glob.glob(os.path.join(fixtures, "large", "crd-openapi-v2", "*.json"))
            + glob.glob(os.path.join(fixtures, "large", "config-connector-crds", "openapiv2", "*.json")))
for path in sorted(v2_files):
    try:
        doc = json.loads(read(path))
    except ValueError:
        continue
    if not isinstance(doc, dict) or doc.get("swagger") != "2.0":
        continue
    rel = os.path.relpath(path, fixtures)
    seed("openapi_v2", rel, read(path))  # whole document when small enough
    prefixes = []
    for p in doc.get("paths") or {}:
        m = re.match(r"^(/apis/[^/]+/[^/]+/|/api/v1/)", p)
        if m and m.group(1) not in prefixes:
            prefixes.append(m.group(1))
    for prefix in prefixes[:12]:
        data = cut(doc, prefix, min(max_len, 32768))
        if data:
            seed("openapi_v2", rel + prefix, data)
seed("openapi_v2", "definitions-only", json.dumps({"swagger": "2.0", "info": {"title": "x", "version": "v"}, "paths": None,
     "definitions": {"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "string"}}}))

# --- openapi_v3: indexes and documents --------------------------------------------------------
v3_files = (glob.glob(os.path.join(fixtures, "**", "openapi-v3", "*.json"), recursive=True)
            + glob.glob(os.path.join(fixtures, "large", "config-connector-crds", "openapiv3", "*.json"))
            + glob.glob(os.path.join(fixtures, "**", "v3-discovery.json"), recursive=True))
keys = []
for path in sorted(v3_files):
    seed("openapi_v3", os.path.relpath(path, fixtures), read(path))
    name = os.path.basename(path)
    if name.endswith("_openapi.json"):
        keys.append(name[: -len("_openapi.json")].replace("__", "/"))
seed("openapi_v3", "index-from-fixtures", json.dumps({"paths": {k: {"serverRelativeURL": f"/openapi/v3/{k}?hash={i:0128X}"} for i, k in enumerate(keys)}}))
seed("openapi_v3", "index-bad-entry", '{"paths":{"apis/x.io/v1":{"serverRelativeURL":7},"api/v1":{}}}')
seed("openapi_v3", "small-document", '{"openapi":"3.0.0","info":{"title":"Kubernetes","version":"v1.32.0"},"paths":{},"components":{"schemas":{}}}')

# --- cluster_services: Services and EndpointSlices as the delegate lists them ------------------
svc = lambda ns, name, spec: {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": ns, "name": name}, "spec": spec}
ports = [{"name": "https", "port": 443, "targetPort": 6443, "protocol": "TCP"}]
services = [
    svc("kube-system", "metrics-server", {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": ports}),
    svc("wardle", "api", {"clusterIP": "fd00::10", "ports": [{"port": 443}]}),
    svc("monitoring", "headless", {"clusterIP": "None", "ports": ports}),
    svc("karmada-system", "karmada-aggregated-apiserver", {"type": "ExternalName", "externalName": "karmada-aggregated-apiserver.karmada-system.svc.cluster.local"}),
]
def eps(ns, name, service, kind, endpoints, ports=({"name": "https", "port": 6443, "protocol": "TCP"},)):
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": kind, "endpoints": endpoints,
            "ports": list(ports), "metadata": {"namespace": ns, "name": name, "labels": {"kubernetes.io/service-name": service}}}
slices = [
    eps("kube-system", "metrics-server-abc12", "metrics-server", "IPv4",
        [{"addresses": ["10.244.0.5"], "conditions": {"ready": True}}, {"addresses": ["10.244.1.7"], "conditions": {"ready": False}}]),
    eps("wardle", "api-x1", "api", "IPv6", [{"addresses": ["fd00::1:5"]}], [{"port": 443}]),
    eps("monitoring", "headless-f", "headless", "FQDN", [{"addresses": ["a.example.com"]}]),
]
seed("cluster_services", "services-list", json.dumps(services))
seed("cluster_services", "slices-list", json.dumps(slices))
seed("cluster_services", "mixed-list", json.dumps(services + slices))
for i, o in enumerate(services + slices):
    seed("cluster_services", f"event-{i}", json.dumps(o))
if yaml is not None:
    for path in manifests:
        try:
            objs = [o for o in yaml.safe_load_all(read(path)) if isinstance(o, dict) and o.get("kind") == "Service"]
        except yaml.YAMLError:
            continue
        if objs:
            seed("cluster_services", "fixture-" + os.path.basename(path), json.dumps(objs, default=str))

# --- requestinfo: method byte + request targets made of the OpenAPI documents' paths ---------
GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, OTHER = range(8)
FILL = {"namespace": "kube-system", "name": "web-0", "path": "healthz", "group": "apps",
        "version": "v1", "resource": "pods", "node": "node-1", "port": "8080"}
targets = []
for path in sorted(v2_files)[:6]:
    try:
        doc = json.loads(read(path))
    except ValueError:
        continue
    for p in list((doc.get("paths") or {}))[:80]:
        targets.append(re.sub(r"\{([^}]*)\}", lambda m: FILL.get(m.group(1), "x"), p))
queries = ["", "watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=300",
           "fieldSelector=metadata.name%3Dweb-0&limit=500", "labelSelector=app%20in%20(a,b),tier!%3Dfront,!canary",
           "fieldSelector=spec.nodeName%3D%3Dnode-1,status.phase!%3DRunning&labelSelector=env%3Dprod&watch=true",
           "timeout=32s&dryRun=All&fieldManager=kubectl&fieldValidation=Strict&force=true",
           "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ&limit=1&resourceVersionMatch=NotOlderThan",
           "labelSelector=a+in+(b%2Cc)&labelSelector=x", "hash=0123ABCD&sendInitialEvents=true"]
for i, t in enumerate(targets):
    method = [GET, GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS][i % 8]
    q = queries[i % len(queries)]
    seed("requestinfo", f"path-{i}", bytes([method]) + (t + ("?" + q if q else "")).encode())
for i, t in enumerate(["/api/v1/namespaces/default/pods?watch=1", "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods/web-0",
                       "/apis/", "/apis/apps", "/openapi/v3/apis/apps/v1?hash=ABC", "/livez/etcd", "/debug/apiagg/status",
                       "/api/v1/namespaces/%2E%2E/pods", "/apis/a.io/v1/x%2Fy", "/api/v1/watch", "/api/v1/proxy/nodes/n:10250/metrics",
                       "http://host:6443/api/v1/pods?x;y=1", "/api/v1/namespaces/ns/pods/p/exec?command=sh&stdin=true",
                       "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3D..", "*", "/apis/apps/v1/../v2"]):
    seed("requestinfo", f"hand-{i}", bytes([i % 8]) + t.encode())

# --- backend_h1: flags + three read sizes + a backend's bytes --------------------------------
def chunked(body, sizes, ext=False, trailers=b""):
    out, at, k = b"", 0, 0
    while at < len(body):
        n = sizes[k % len(sizes)]
        k += 1
        piece = body[at:at + n]
        at += n
        out += b"%x%s\r\n%s\r\n" % (len(piece), b";name=v" if ext and k % 3 == 0 else b"", piece)
    return out + b"0\r\n" + trailers + b"\r\n"
bodies = []
for path in sorted(glob.glob(os.path.join(fixtures, "**", "discovery", "*.json"), recursive=True))[:8]:
    data = read(path)
    if len(data) <= 16384:
        bodies.append((os.path.basename(path), data))
ctype = b"Content-Type: application/json\r\nAudit-Id: 6b1c\r\nDate: Mon, 01 Dec 2025 10:00:00 GMT\r\n"
for i, (name, body) in enumerate(bodies):
    head = b"HTTP/1.1 200 OK\r\n" + ctype
    split = bytes([0, 0, 0, 0]), bytes([0, 7, 200, 1])
    seed("backend_h1", f"length-{name}", split[i % 2] + head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    seed("backend_h1", f"chunked-{name}", split[(i + 1) % 2] + head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(body, [4096, 17, 1000], ext=True))
    seed("backend_h1", f"close-{name}", bytes([0, 100, 3, 0]) + b"HTTP/1.0 200 OK\r\n" + ctype + b"\r\n" + body)
    seed("backend_h1", f"head-{name}", bytes([1, 0, 0, 0]) + head + b"Content-Length: %d\r\n\r\n" % len(body))
body = bodies[0][1] if bodies else b'{"kind":"Status","status":"Success"}'
for i, answer in enumerate([
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + chunked(body[:300], [100]),
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: grpc-status\r\n\r\n" + chunked(body[:200], [64], trailers=b"grpc-status: 0\r\ngrpc-message: ok\r\n"),
    b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10;a=b;c\r\n0123456789abcdef\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n",
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 60\r\n\r\n" + b'{"kind":"Status","status":"Failure","code":500,"message":"x"}'[:60],
]):
    seed("backend_h1", f"hand-{i}", bytes([0, i * 7 % 256, 1 + i, 0]) + answer)

# --- jwt_claims: header JSON + NUL + payload JSON ---------------------------------------------
NOW = 1_750_000_000
oidc = {"iss": "https://login.example.com/realms/platform", "aud": ["kubernetes", "other"], "sub": "7c1e2b",
        "email": "alice@example.com", "email_verified": True, "hd": "example.com", "groups": ["dev", "ops"],
        "tenant": "blue", "iat": NOW - 600, "exp": NOW + 600, "nbf": NOW - 600, "azp": "kubectl"}
ci = {"iss": "https://token.actions.example.com", "aud": "apiagg", "sub": "repo:org/app:ref:refs/heads/main",
      "repository": "org/app", "repository_owner": "org", "repository_id": 1234, "ref": "refs/heads/main",
      "ref_type": "branch", "environment": "Production", "workflow": "deploy", "teams": ["platform", 7],
      "scp": "read write  admin", "iat": NOW - 60, "exp": NOW + 300}
headers = [{"alg": "ES256", "kid": "fuzz", "typ": "JWT"}, {"alg": "ES256"}, {"alg": "RS256", "kid": "rsa"},
           {"alg": "none"}, {"alg": "HS256", "kid": "rsa"}, {"alg": "ES512", "kid": "fuzz"}, {"alg": "PS384", "kid": "other"}]
payloads = [oidc, ci, dict(oidc, email_verified=False), dict(oidc, groups="single"), dict(oidc, exp=NOW - 1),
            dict(oidc, nbf=NOW + 3600), dict(ci, repository="evil/app"), dict(ci, teams=None), dict(oidc, aud="nobody"),
            dict(oidc, email="system:admin"), dict(ci, exp=NOW + 100000.5)]
for i, h in enumerate(headers):
    for j, p in enumerate(payloads):
        if (i + j) % 3 == 0 or i == 0:
            seed("jwt_claims", f"token-{i}-{j}", json.dumps(h).encode() + b"\0" + json.dumps(p).encode())
seed("jwt_claims", "payload-only", json.dumps(oidc).encode())

# --- authn_config, authz_config: the files of docs/ and of the crates' tests ------------------
def yaml_blocks(path):
    try:
        text = read(path).decode()
    except (OSError, UnicodeDecodeError):
        return []
    return re.findall(r"```ya?ml\n(.*?)```", text, re.S)

def literals(path):
    """Raw string literals of a Rust source (format placeholders filled in)."""
    try:
        text = read(path).decode()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for lit in re.findall(r'r#"(.*?)"#', text, re.S):
        lit = lit.replace("{version}", "v1").replace("{ca}", "").replace("{{", "{").replace("}}", "}")
        out.append(re.sub(r"\{[a-z_]*\}", "", lit) if "format!" in text else lit)
    return out

docs = sorted(glob.glob(os.path.join(repo, "docs", "*.md")))
for kind, target, sources in [
    ("AuthenticationConfiguration", "authn_config", ["authn/src", "gateway/src/auth", "tests/tests", "fuzz/fuzz_targets"]),
    ("AuthorizationConfiguration", "authz_config", ["authz/src", "gateway/src/auth", "tests/tests"]),
]:
    found = []
    for d in docs:
        found += [b for b in yaml_blocks(d) if f"kind: {kind}" in b]
    for src in sources:
        for f in sorted(glob.glob(os.path.join(repo, src, "**", "*.rs"), recursive=True)):
            found += [l for l in literals(f) if kind in l]
    for i, text in enumerate(found):
        seed(target, f"file-{i}", text)
        if yaml is not None:
            try:
                seed(target, f"json-{i}", json.dumps(yaml.safe_load(text)))
            except Exception:
                pass
seed("authz_config", "empty", "")
seed("authn_config", "minimal", "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\n")

for t in sorted(counts):
    print(f"[fuzz] seeds {t}: {counts[t]}", file=sys.stderr)
PY

cd "$repo"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "building fuzz targets (${fuzz[*]}, sanitizer $SANITIZER, debug assertions)"
    nice -n 19 "${fuzz[@]}" build -s "$SANITIZER" -a >&2
fi

# config_file writes its inputs to a temporary folder per process: keep those under $work.
export TMPDIR="$work/tmp"
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"

results=()
for t in $TARGETS; do
    corpus="$work/corpus/$t"
    artifacts="$work/artifacts/$t"
    seeds="$work/seeds/$t"
    mkdir -p "$corpus" "$artifacts" "$seeds" "$work/logs"
    logfile="$work/logs/$t.log"
    len="$MAX_LEN"
    # Real Accept headers and request targets are short: 8 KiB keeps these on realistic sizes.
    if [[ "$t" =~ ^(discovery_accept|requestinfo)$ && "$len" -gt 8192 ]]; then len=8192; fi
    runs=()
    if [[ -n "${RUNS:-}" ]]; then runs=(-runs="$RUNS"); fi
    before="$(find "$artifacts" -type f | sort)"
    log "running $t for ${SECONDS_PER_TARGET}s (log: $logfile)"
    rc=0
    # shellcheck disable=SC2086
    start="$(date +%s)"
    nice -n 19 "${fuzz[@]}" run -s "$SANITIZER" -a "$t" "$corpus" "$seeds" -- \
        -max_total_time="$SECONDS_PER_TARGET" -max_len="$len" "${runs[@]}" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" \
        ${FUZZ_ARGS:-} >"$logfile" 2>&1 || rc=$?
    if [[ "$t" == jwt_claims && "$rc" -eq 0 ]]; then
        # Every input of the corpus once more, each token signed with the target's test key
        # and authenticated end to end (too slow to fuzz that way: see the target).
        log "replaying the jwt_claims corpus with signed tokens (log: $work/logs/$t-signed.log)"
        JWT_CLAIMS_SIGNED=1 nice -n 19 "${fuzz[@]}" run -s "$SANITIZER" -a "$t" "$corpus" -- \
            -runs=0 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" \
            >"$work/logs/$t-signed.log" 2>&1 || rc=$?
    fi
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$logfile" | tail -1)"
    rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logfile" | tail -1)"
    if [[ -z "$execs" ]]; then
        # A crash ends the run without final stats: take the last status line.
        last="$(grep -E '^#[0-9]+' "$logfile" | tail -1 || true)"
        execs="$(sed -E 's/^#([0-9]+).*/\1/' <<<"$last")"
        rate="$(sed -nE 's/.*exec\/s: ([0-9]+).*/\1/p' <<<"$last")"
    fi
    after="$(find "$artifacts" -type f | sort)"
    new="$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | sed '/^$/d')"
    findings="$(printf '%s\n' "$new" | sed '/^$/d' | wc -l)"
    size="$(find "$corpus" -type f | wc -l)"
    wall=$(($(date +%s) - start))
    results+=("$t|${execs:-0}|${rate:-0}|$wall|$size|$findings|$rc|$(printf '%s' "$new" | tr '\n' ' ')")
done

printf '\nFuzzing: %s s per target, sanitizer %s, max_len %s, one process each under nice -n 19\n\n' \
    "$SECONDS_PER_TARGET" "$SANITIZER" "$MAX_LEN"
printf '%-17s %12s %8s %8s %10s %8s %9s  %s\n' target executions exec/s "wall s" "to 10M" corpus findings files
status=0
for row in "${results[@]}"; do
    IFS='|' read -r t execs rate wall size findings rc files <<<"$row"
    if [[ "${rate:-0}" -gt 0 ]]; then
        secs=$(( (GOAL + rate - 1) / rate ))
        if (( secs >= 3600 )); then to="$((secs / 3600))h$(printf '%02d' $(((secs % 3600) / 60)))m"; else to="$((secs / 60))m$(printf '%02d' $((secs % 60)))s"; fi
    else
        to="-"
    fi
    printf '%-17s %12s %8s %8s %10s %8s %9s  %s\n' "$t" "$execs" "$rate" "$wall" "$to" "$size" "$findings" "${files:--}"
    if [[ "$findings" -gt 0 || "$rc" -ne 0 ]]; then status=1; fi
done
exit "$status"
