#!/usr/bin/env python3
"""Helpers for discovery-load.sh, startup.sh and availability.sh (Python 3 standard library only).

The generic subcommands of proxy_load_helper.py (free-ports, wait-http, cpu-ticks, core-ticks,
system-busy) are used from there; this file holds what the newer benchmarks need.

Subcommands:
  fetch URL ACCEPT OUT               GET URL with ACCEPT, write the body to OUT; prints
                                     "status content-type etag" (fails unless 200)
  discovery-config DIR PORT DELEGATE NAME=URL...
                                     write DIR/apiagg.yaml for discovery-load.sh: the delegate and
                                     one Service per NAME=URL, APIServices from the names
                                     (oauth → oauth.openshift.io/v1 + user.openshift.io/v1, wardle →
                                     wardle.example.com/v1alpha1, metrics → metrics.k8s.io/v1beta1)
  wrk-row NAME LINE P0 P1 HZ C0 C1   one results.tsv row from wrk's BENCH line and CPU ticks
  report-discovery RESULTS.tsv       print the discovery-load table and the apiagg/nginx ratios
  serve-fake FIXTURES PORTFILE N_GROUPS N_SERVERS [OPENAPI]
                                     fake extension API servers for startup.sh: N_SERVERS ports in
                                     this one process, N_GROUPS groups (copies of the oauth-apiserver
                                     groups, `bNNN.oauth.openshift.io` / `bNNN.user.openshift.io`)
                                     spread over them; writes "port port ..." to PORTFILE once bound;
                                     OPENAPI=0: /openapi/v2 is 404 too
  startup-config DIR PORT DELEGATE N_GROUPS PORT...
                                     write DIR/apiagg.yaml with one APIService per group and one
                                     Service per fake server
  startup APIAGG CONFIG PORT REPEATS POLL_MS SETTLE_S OUT.tsv [ARGS...]
                                     start apiagg REPEATS times; time from spawn to /readyz 200
                                     (polled every POLL_MS), VmHWM at ready and SETTLE_S later
  report-startup OUT.tsv GOAL_S      print median/max
  availability ...                   see availability() below
  traffic URL SLEEP_MS               GET URL in a loop on one keep-alive connection until SIGTERM;
                                     prints the status-code counts
  report-availability OUT.tsv        print the median/max table with kube-aggregator's anchor
"""

import hashlib
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

AGG_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGG_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
KUBECTL_ACCEPT = f"{AGG_V2},{AGG_V2BETA1},application/json"


# ---------------------------------------------------------------------------------------------
# Small HTTP client on a keep-alive connection (reconnects after any error).
class Client:
    def __init__(self, hostport, timeout=2.0):
        self.hostport = hostport
        self.timeout = timeout
        self.conn = None

    def get(self, path, accept=None):
        """Returns (status, body); status 0 when the connection failed."""
        headers = {"Accept": accept} if accept else {}
        for attempt in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.hostport, timeout=self.timeout)
                self.conn.request("GET", path, headers=headers)
                r = self.conn.getresponse()
                body = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return r.status, body
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 1:
                    return 0, b""
        return 0, b""

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None


def fetch(url, accept, out):
    import urllib.request

    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
        if r.status != 200:
            sys.exit(f"{url}: HTTP {r.status}")
        with open(out, "wb") as f:
            f.write(body)
        print(r.status, r.getheader("Content-Type"), r.getheader("ETag") or "-")


# ---------------------------------------------------------------------------------------------
# discovery-load.sh
BACKENDS = {
    # name: [(group, version)]
    "oauth": [("oauth.openshift.io", "v1"), ("user.openshift.io", "v1")],
    "wardle": [("wardle.example.com", "v1alpha1")],
    "metrics": [("metrics.k8s.io", "v1beta1")],
}


def apiservice_yaml(group, version, service, gpm=1000, vp=15):
    return (
        "---\n"
        "apiVersion: apiregistration.k8s.io/v1\n"
        "kind: APIService\n"
        f"metadata:\n  name: {version}.{group}\n"
        "spec:\n"
        f"  group: {group}\n"
        f"  version: {version}\n"
        f"  groupPriorityMinimum: {gpm}\n"
        f"  versionPriority: {vp}\n"
        "  insecureSkipTLSVerify: true\n"
        f"  service:\n    namespace: bench\n    name: {service}\n    port: 443\n"
    )


def discovery_config(d, port, delegate, *backends):
    services, apiservices = [], []
    for spec in backends:
        name, url = spec.split("=", 1)
        services.append((name, url))
        for group, version in BACKENDS[name]:
            apiservices.append(apiservice_yaml(group, version, name))
    with open(os.path.join(d, "apiservices.yaml"), "w") as f:
        f.write("".join(apiservices))
    with open(os.path.join(d, "apiagg.yaml"), "w") as f:
        f.write(f"listen: 127.0.0.1:{port}\n")
        f.write(f'delegate:\n  url: "{delegate}"\n')
        f.write("services:\n")
        for name, url in services:
            f.write(f'  - namespace: bench\n    name: {name}\n    port: 443\n    endpoints: ["{url}"]\n')
        f.write("apiServiceFiles:\n  - apiservices.yaml\n")


def wrk_row(name, line, p0, p1, hz, c0, c1):
    rec = dict(kv.split("=") for kv in line.split()[1:])
    req, dur, hz = int(rec["requests"]), int(rec["duration_us"]), int(hz)
    core = []
    for a, b in zip(c0.split(), c1.split()):
        (ab, at), (bb, bt) = map(int, a.split(",")), map(int, b.split(","))
        core.append(f"{(bb - ab) * 100 / max(1, bt - at):.1f}")
    cpu = (int(p1) - int(p0)) / hz
    print(
        f"{name}\t{req * 1e6 / dur:.1f}\t{rec['p50_us']}\t{rec['p99_us']}\t"
        f"{cpu * 1e6 / dur * 100:.1f}\t{cpu * 1e6 / req:.2f}\t{req}\t{core[0]}\t{core[1]}"
    )


def read_tsv(path):
    rows, order = {}, []
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            rec = dict(zip(header, line.rstrip("\n").split("\t")))
            rows[rec["case"]] = rec
            order.append(rec["case"])
    return rows, order


def report_discovery(path):
    rows, order = read_tsv(path)
    print()
    print(
        f"{'case':<10} {'RPS':>9} {'p50 ms':>8} {'p99 ms':>8} {'server CPU':>10} "
        f"{'CPU µs/req':>10} {'load core':>9} {'server core':>11}"
    )
    for case in order:
        r = rows[case]
        print(
            f"{case:<10} {float(r['rps']):>9.0f} {float(r['p50_us']) / 1000:>8.2f} "
            f"{float(r['p99_us']) / 1000:>8.2f} {float(r['cpu_pct']):>9.0f}% "
            f"{float(r['us_per_req']):>10.1f} {float(r['load_core_pct']):>8.0f}% "
            f"{float(r['server_core_pct']):>10.0f}%"
        )
    if "apiagg" in rows and "nginx" in rows:
        a, n = rows["apiagg"], rows["nginx"]
        x = float(a["rps"]) / float(n["rps"])
        print("\nratios (apiagg / nginx):")
        print(f"  {'RPS':<22} {x:6.2f}   (goal ≥ 1.0: {'met' if x >= 1.0 else 'MISSED'})")
        print(f"  {'p50':<22} {float(a['p50_us']) / float(n['p50_us']):6.2f}   (lower is better)")
        print(f"  {'p99':<22} {float(a['p99_us']) / float(n['p99_us']):6.2f}   (lower is better)")
        print(
            f"  {'CPU µs/req':<22} {float(a['us_per_req']) / float(n['us_per_req']):6.2f}   "
            "(lower is better)"
        )


# ---------------------------------------------------------------------------------------------
# startup.sh: fake extension API servers serving 200 groups.
def fake_groups(fixtures, n_groups):
    base = os.path.join(fixtures, "extension-apiservers/oauth-apiserver")
    with open(os.path.join(base, "discovery/aggregated_v2.json")) as f:
        agg = json.load(f)
    legacy = {}
    for item in agg["items"]:
        g = item["metadata"]["name"]
        v = item["versions"][0]["version"]
        with open(os.path.join(base, f"discovery/apis__{g}__{v}.json")) as f:
            legacy[g] = json.load(f)
    groups = []
    for i in range(int(n_groups)):
        item = agg["items"][i % len(agg["items"])]
        base_group = item["metadata"]["name"]
        groups.append((f"b{i // len(agg['items']):03d}.{base_group}", base_group, item))
    return groups, legacy


def split(seq, n):
    k, m = divmod(len(seq), n)
    return [seq[i * k + min(i, m) : (i + 1) * k + min(i + 1, m)] for i in range(n)]


def etag(body):
    return '"' + hashlib.sha512(body).hexdigest().upper() + '"'


def dumps(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def build_server_docs(mine, legacy, swagger, openapi=True):
    """Pre-rendered documents of one fake server: path -> [(content-type, body, etag)]."""
    docs = {}
    items = []
    group_list = []
    paths = {}
    for name, base, item in mine:
        it = json.loads(json.dumps(item))
        it["metadata"] = {"name": name}
        items.append(it)
        v = it["versions"][0]["version"]
        gv = {"groupVersion": f"{name}/{v}", "version": v}
        group_list.append({"name": name, "versions": [gv], "preferredVersion": gv})
        docs[f"/apis/{name}"] = dumps(
            {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": [gv], "preferredVersion": gv}
        )
        rl = dict(legacy[base])
        rl["groupVersion"] = f"{name}/{v}"
        docs[f"/apis/{name}/{v}"] = dumps(rl)
        for p, op in swagger["paths"].items():
            if p.startswith(f"/apis/{base}/{v}/"):
                paths[f"/apis/{name}/{v}/" + p[len(f"/apis/{base}/{v}/") :]] = op
            elif p == f"/apis/{base}/":
                paths[f"/apis/{name}/"] = op
    for p in ("/apis/", "/version/"):
        if p in swagger["paths"]:
            paths[p] = swagger["paths"][p]
    agg = {"apiVersion": "apidiscovery.k8s.io/v2", "kind": "APIGroupDiscoveryList", "metadata": {}, "items": items}
    v2 = dumps(agg)
    agg["apiVersion"] = "apidiscovery.k8s.io/v2beta1"
    v2beta1 = dumps(agg)
    sw = dict(swagger)
    sw["paths"] = paths
    out = {p: ("application/json", b) for p, b in docs.items()}
    out["/apis"] = ("application/json", dumps({"kind": "APIGroupList", "apiVersion": "v1", "groups": group_list}))
    out["/apis#v2"] = (AGG_V2, v2)
    out["/apis#v2beta1"] = (AGG_V2BETA1, v2beta1)
    if openapi:
        out["/openapi/v2"] = ("application/json", dumps(sw))
    out["/healthz"] = ("text/plain", b"ok")
    out["/readyz"] = ("text/plain", b"ok")
    return {p: (ct, b, etag(b)) for p, (ct, b) in out.items()}


def negotiate(accept):
    for clause in (accept or "").split(","):
        params = {}
        for part in clause.split(";")[1:]:
            if "=" in part:
                k, v = part.split("=", 1)
                params[k.strip()] = v.strip()
        if params.get("g") == "apidiscovery.k8s.io" and params.get("as") == "APIGroupDiscoveryList":
            if params.get("v") in ("v2", "v2beta1"):
                return "#" + params["v"]
    return ""


NOT_FOUND = dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "the server could not find the requested resource", "reason": "NotFound",
                   "details": {}, "code": 404})


def make_handler(docs):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            key = path + (negotiate(self.headers.get("Accept")) if path == "/apis" else "")
            doc = docs.get(key)
            if doc is None:
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(NOT_FOUND)))
                self.end_headers()
                self.wfile.write(NOT_FOUND)
                return
            ct, body, tag = doc
            if self.headers.get("If-None-Match") == tag:
                self.send_response(304)
                self.send_header("ETag", tag)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", ct)
            self.send_header("ETag", tag)
            if path == "/apis":
                self.send_header("Vary", "Accept")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return H


def serve_fake(fixtures, portfile, n_groups, n_servers, openapi="1"):
    n_servers = int(n_servers)
    openapi = openapi != "0"
    groups, legacy = fake_groups(fixtures, n_groups)
    with open(os.path.join(fixtures, "extension-apiservers/oauth-apiserver/openapi-v2/swagger.json")) as f:
        swagger = json.load(f)
    servers = []
    for mine in split(groups, n_servers):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(build_server_docs(mine, legacy, swagger, openapi)))
        srv.daemon_threads = True
        servers.append(srv)
    for srv in servers:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    tmp = portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(" ".join(str(s.server_address[1]) for s in servers) + "\n")
    os.rename(tmp, portfile)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    while True:
        time.sleep(3600)


def startup_config(d, port, delegate, n_groups, *ports):
    # Group names only: fake_groups needs the fixtures, but the names follow the same rule.
    n_groups = int(n_groups)
    bases = ["oauth.openshift.io", "user.openshift.io"]
    groups = [f"b{i // 2:03d}.{bases[i % 2]}" for i in range(n_groups)]
    chunks = split(groups, len(ports))
    with open(os.path.join(d, "apiservices.yaml"), "w") as f:
        for s, chunk in enumerate(chunks):
            for g in chunk:
                f.write(apiservice_yaml(g, "v1", f"fake-{s:03d}"))
    with open(os.path.join(d, "apiagg.yaml"), "w") as f:
        f.write(f"listen: 127.0.0.1:{port}\n")
        if delegate != "-":
            f.write(f'delegate:\n  url: "{delegate}"\n')
        f.write("services:\n")
        for s, p in enumerate(ports):
            f.write(
                f"  - namespace: bench\n    name: fake-{s:03d}\n    port: 443\n"
                f'    endpoints: ["http://127.0.0.1:{p}"]\n'
            )
        f.write("apiServiceFiles:\n  - apiservices.yaml\n")


def vmhwm(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0])
    return out.get("VmHWM", 0), out.get("VmRSS", 0)


def http_status(hostport, path, timeout=1.0):
    try:
        c = http.client.HTTPConnection(hostport, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status
    except (OSError, http.client.HTTPException):
        return 0


def startup(apiagg, config, port, repeats, poll_ms, settle_s, out, *args):
    hostport = f"127.0.0.1:{port}"
    poll = float(poll_ms) / 1000
    with open(out, "w") as f:
        f.write("run\tready_s\tvmhwm_ready_kib\tvmhwm_settled_kib\tvmrss_settled_kib\tdiscovery_items\n")
    logdir = os.path.dirname(out)
    for run in range(1, int(repeats) + 1):
        log = open(os.path.join(logdir, f"startup-{run}.log"), "w")
        t0 = time.monotonic()
        p = subprocess.Popen([apiagg, "serve", "--config", config, *args], stdout=log, stderr=log)
        ready = None
        while time.monotonic() - t0 < 30:
            if p.poll() is not None:
                sys.exit(f"apiagg exited with {p.returncode}, see {log.name}")
            if http_status(hostport, "/readyz") == 200:
                ready = time.monotonic() - t0
                break
            time.sleep(poll)
        if ready is None:
            p.kill()
            sys.exit(f"apiagg not ready after 30 s, see {log.name}")
        hwm_ready, _ = vmhwm(p.pid)
        # The aggregated document at ready time: every group must be there already.
        c = Client(hostport, timeout=5)
        st, body = c.get("/apis", AGG_V2)
        c.close()
        items = len(json.loads(body)["items"]) if st == 200 else -1
        time.sleep(float(settle_s))
        hwm, rss = vmhwm(p.pid)
        p.send_signal(signal.SIGINT)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
        with open(out, "a") as f:
            f.write(f"{run}\t{ready:.4f}\t{hwm_ready}\t{hwm}\t{rss}\t{items}\n")
        print(
            f"[startup]   run {run}: ready after {ready * 1000:.0f} ms, {items} groups in /apis, "
            f"VmHWM {hwm_ready / 1024:.1f} MiB at ready, {hwm / 1024:.1f} MiB after {settle_s} s "
            f"(VmRSS {rss / 1024:.1f} MiB)",
            file=sys.stderr,
        )
        time.sleep(0.5)


def report_startup(path, goal):
    with open(path) as f:
        f.readline()
        rows = [line.rstrip("\n").split("\t") for line in f]
    ready = [float(r[1]) for r in rows]
    hwm_r = [int(r[2]) / 1024 for r in rows]
    hwm_s = [int(r[3]) / 1024 for r in rows]
    rss_s = [int(r[4]) / 1024 for r in rows]
    goal = float(goal)
    print()
    print(f"{'':<36} {'median':>9} {'max':>9}")
    print(f"{'start → /readyz 200 (ms)':<36} {statistics.median(ready) * 1000:>9.0f} {max(ready) * 1000:>9.0f}"
          f"   (goal ≤ {goal * 1000:.0f} ms: {'met' if max(ready) <= goal else 'MISSED'})")
    print(f"{'VmHWM at ready (MiB)':<36} {statistics.median(hwm_r):>9.1f} {max(hwm_r):>9.1f}")
    print(f"{'VmHWM after settle (MiB)':<36} {statistics.median(hwm_s):>9.1f} {max(hwm_s):>9.1f}")
    print(f"{'VmRSS after settle (MiB)':<36} {statistics.median(rss_s):>9.1f} {max(rss_s):>9.1f}")
    print(f"runs: {len(rows)}; groups in aggregated /apis at ready: {sorted(set(r[5] for r in rows))}")


# ---------------------------------------------------------------------------------------------
# availability.sh
def traffic(url, sleep_ms):
    from urllib.parse import urlsplit

    u = urlsplit(url)
    c = Client(u.netloc, timeout=2)
    counts = {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    pause = float(sleep_ms) / 1000
    while not stop:
        st, _ = c.get(u.path)
        counts[st] = counts.get(st, 0) + 1
        if pause:
            time.sleep(pause)
    print(" ".join(f"{k}:{v}" for k, v in sorted(counts.items())), flush=True)


def freshness(client, group):
    st, body = client.get("/apis", AGG_V2)
    if st != 200:
        return f"HTTP {st}"
    for item in json.loads(body)["items"]:
        if item["metadata"]["name"] == group:
            return item["versions"][0].get("freshness", "Current")
    return "absent"


def availability(sample, port, apiagg_port, group, version, resource, kind, kills, mode, poll_ms, sleep_ms, out, logdir):
    """Kill the sample-apiserver on PORT KILLS times; time detection and recovery through apiagg."""
    kills, poll = int(kills), float(poll_ms) / 1000
    gw = f"127.0.0.1:{apiagg_port}"
    gpath = f"/apis/{group}/{version}/{resource}"
    cmd = [sample, "--listen", f"127.0.0.1:{port}", "--group", group, "--version", version,
           "--resource", resource, "--kind", kind]
    blog = open(os.path.join(logdir, f"backend-{mode}.log"), "a")

    def start_backend():
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=blog, text=True)
        line = p.stdout.readline()  # "listening on http://..." once bound
        if not line.startswith("listening on"):
            sys.exit(f"backend did not start: {line!r}")
        return p

    poller = Client(gw, timeout=2)
    checker = Client(gw, timeout=2)

    def wait(cond, limit=60):
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            if cond():
                return True
            time.sleep(poll)
        return False

    backend = start_backend()
    if not wait(lambda: poller.get(gpath)[0] == 200 and freshness(checker, group) == "Current", 30):
        sys.exit("the backend never became available through apiagg")
    tproc = None
    if mode == "traffic":
        tproc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "traffic",
                                  f"http://{gw}{gpath}", str(sleep_ms)], stdout=subprocess.PIPE, text=True)
        time.sleep(1)
    rows = []
    for i in range(1, kills + 1):
        # A random phase against the probe schedule.
        time.sleep(0.5 + random.random())
        backend.kill()
        t_kill = time.monotonic()
        backend.wait()
        t_503 = t_stale = None
        deadline = t_kill + 60
        while time.monotonic() < deadline:
            now = time.monotonic()
            if t_stale is None and freshness(checker, group) == "Stale":
                t_stale = time.monotonic()
            # Idle: no proxied request may reach the group before apiagg says Stale (a request
            # would trigger passive detection); with traffic, the client is already sending some.
            if t_503 is None and (mode == "traffic" or t_stale is not None):
                if poller.get(gpath)[0] == 503:
                    t_503 = time.monotonic()
            if t_503 is not None and t_stale is not None:
                break
            time.sleep(max(0, poll - (time.monotonic() - now)))
        if t_503 is None or t_stale is None:
            sys.exit(f"kill {i}: not detected within 60 s (503: {t_503}, Stale: {t_stale})")
        det = max(t_503, t_stale) - t_kill
        # Restart after a random pause too: detection happens right after a probe in idle mode,
        # so restarting at once would always land one full interval before the next probe.
        time.sleep(random.random())
        backend = start_backend()
        t_up = time.monotonic()
        t_200 = t_cur = None
        deadline = t_up + 60
        while time.monotonic() < deadline:
            now = time.monotonic()
            if t_200 is None and poller.get(gpath)[0] == 200:
                t_200 = time.monotonic()
            if t_cur is None and freshness(checker, group) == "Current":
                t_cur = time.monotonic()
            if t_200 is not None and t_cur is not None:
                break
            time.sleep(max(0, poll - (time.monotonic() - now)))
        if t_200 is None or t_cur is None:
            sys.exit(f"kill {i}: not recovered within 60 s (200: {t_200}, Current: {t_cur})")
        rec = max(t_200, t_cur) - t_up
        rows.append((i, det, t_503 - t_kill, t_stale - t_kill, rec, t_200 - t_up, t_cur - t_up))
        print(f"[availability]   {mode} kill {i:2d}: detected {det * 1000:7.1f} ms "
              f"(503 {(t_503 - t_kill) * 1000:.1f}, Stale {(t_stale - t_kill) * 1000:.1f}); recovered "
              f"{rec * 1000:7.1f} ms (200 {(t_200 - t_up) * 1000:.1f}, Current {(t_cur - t_up) * 1000:.1f})",
              file=sys.stderr)
    if tproc:
        tproc.terminate()
        counts = tproc.communicate(timeout=10)[0].strip()
        print(f"[availability]   traffic client status counts: {counts}", file=sys.stderr)
    backend.kill()
    backend.wait()
    new = not os.path.exists(out)
    with open(out, "a") as f:
        if new:
            f.write("mode\tkill\tdetect_s\tdetect_503_s\tdetect_stale_s\trecover_s\trecover_200_s\trecover_current_s\n")
        for r in rows:
            f.write(mode + "\t" + "\t".join(f"{x:.6f}" if isinstance(x, float) else str(x) for x in r) + "\n")


def report_availability(path, probe_interval):
    by = {}
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            rec = dict(zip(header, line.rstrip("\n").split("\t")))
            by.setdefault(rec["mode"], []).append(rec)
    print()
    print(f"{'mode':<9} {'kills':>5} | {'detect median':>13} {'max':>9} | {'(503 med':>9} {'Stale med)':>10} | "
          f"{'recover median':>14} {'max':>9} | {'(200 med':>9} {'Current med)':>12}")
    ms = lambda rows, k, f: f([float(r[k]) for r in rows]) * 1000
    for mode, rows in by.items():
        print(
            f"{mode:<9} {len(rows):>5} | {ms(rows, 'detect_s', statistics.median):>10.1f} ms "
            f"{ms(rows, 'detect_s', max):>6.1f} ms | {ms(rows, 'detect_503_s', statistics.median):>9.1f} "
            f"{ms(rows, 'detect_stale_s', statistics.median):>10.1f} | "
            f"{ms(rows, 'recover_s', statistics.median):>11.1f} ms {ms(rows, 'recover_s', max):>6.1f} ms | "
            f"{ms(rows, 'recover_200_s', statistics.median):>9.1f} {ms(rows, 'recover_current_s', statistics.median):>12.1f}"
        )
    print(
        f"  detect: SIGKILL of the backend → a request to its group gets 503 AND aggregated /apis shows\n"
        f"          its group-version Stale; recover: backend listening again → 200 AND Current.\n"
        f"  apiagg --probe-interval {probe_interval}. Anchor, kube-aggregator: the availability controller\n"
        f"  re-checks every APIService on a 30 s resync with a 5 s probe timeout, i.e. up to ~35 s\n"
        f"  to detect a dead backend (and up to ~30 s to see it back) without an endpoints event."
    )


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {
        "fetch": lambda: fetch(*args),
        "discovery-config": lambda: discovery_config(*args),
        "wrk-row": lambda: wrk_row(*args),
        "report-discovery": lambda: report_discovery(args[0]),
        "serve-fake": lambda: serve_fake(*args),
        "startup-config": lambda: startup_config(*args),
        "startup": lambda: startup(*args),
        "report-startup": lambda: report_startup(*args),
        "availability": lambda: availability(*args),
        "traffic": lambda: traffic(*args),
        "report-availability": lambda: report_availability(*args),
    }[cmd]()


if __name__ == "__main__":
    main()
