#!/usr/bin/env python3
"""Load, chaos and report for soak.sh (Python 3 standard library only).

Subcommands:
  load   --port P --duration S --rate R --healthy G/V/RES ... --flapping G/V/RES
         --delegate G/V/RES --watchers N --out load.json
         Mixed traffic through apiagg for S seconds at about R requests/s (watches not counted
         in R): list and get of the healthy groups, list of the delegate's resource and of the
         flapping group, aggregated and legacy /apis, /openapi/v2, /openapi/v3 (index and a
         healthy group's document), a writer that creates and deletes objects in the healthy
         groups (so watches carry events), N watchers of the healthy groups (each watch held
         10-30 s, then closed) and one of the flapping group. Objects soak-0..4 are created in
         each healthy group first (what the gets read).
  chaos  --duration S --config FILE --forms A B --rewrite-every S --flap-every S
         --flap-down S --flap-port P --flap-log FILE --pidfile FILE --apiagg-pid PID
         --sample-every S --out chaos.json -- SAMPLE-APISERVER-COMMAND...
         Rewrites FILE (atomically, rename) alternately with the bytes of A and B; SIGKILLs the
         flapping backend (started here with the command) and restarts it on the same port
         after --flap-down s; samples apiagg's RSS, CPU, threads and open fds.
  report --load load.json --chaos chaos.json --log apiagg.log --metrics URL --max-growth PCT
         Prints the results; exits 1 when a healthy-group request failed or RSS grew by more
         than PCT% from the first minute to the last.
"""

import argparse
import collections
import http.client
import json
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


# ---------------------------------------------------------------------------------------------
# load


class Stats:
    """Counts per request kind; thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.kinds = {}
        self.failures = []  # first failures, for the report
        self.retries = []  # requests retried on a new connection after a stale one failed

    def record(self, kind, healthy, status, seconds, error=None, path="", retried=False, body=b""):
        ok = error is None and status is not None and 200 <= status < 300
        with self.lock:
            k = self.kinds.setdefault(
                kind,
                {"healthy": healthy, "total": 0, "ok": 0, "failed": 0, "retried": 0,
                 "statuses": collections.Counter(), "lat": []},
            )
            k["total"] += 1
            if retried:
                k["retried"] += 1
                if len(self.retries) < 200:
                    self.retries.append({"t": time.time(), "kind": kind, "path": path,
                                         "error": retried})
            k["statuses"][str(status) if error is None else error.split(":")[0]] += 1
            if ok:
                k["ok"] += 1
                k["lat"].append(seconds)
            else:
                k["failed"] += 1
                if healthy and len(self.failures) < 50:
                    self.failures.append(
                        {"t": time.time(), "kind": kind, "path": path, "status": status,
                         "error": error, "body": body[:300].decode("utf-8", "replace")})
        return ok

    def demote(self, kind, path, status, problem):
        """An answer counted as ok turned out wrong (misrouted, content)."""
        with self.lock:
            k = self.kinds[kind]
            k["ok"] -= 1
            k["failed"] += 1
            k.setdefault("notes", collections.Counter())[problem] += 1
            if k["healthy"] and len(self.failures) < 50:
                self.failures.append({"t": time.time(), "kind": kind, "path": path,
                                      "status": status, "error": problem})

    def note(self, kind, key, n=1):
        with self.lock:
            k = self.kinds.setdefault(
                kind,
                {"healthy": False, "total": 0, "ok": 0, "failed": 0, "retried": 0,
                 "statuses": collections.Counter(), "lat": []},
            )
            k.setdefault("notes", collections.Counter())[key] += n


class Client:
    """One keep-alive HTTP/1.1 connection to apiagg, reopened after errors."""

    def __init__(self, port, timeout=15):
        self.port, self.timeout, self.conn, self.used = port, timeout, None, False

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.conn, self.used = None, False

    def request(self, method, path, headers=None, body=None):
        """(status, response, body, error of a retried attempt or None); a stale reused
        connection is retried once on a new one (as client-go's transport does for requests that got no answer)."""
        stale = None
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
                self.used = False
            reused = self.used
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                resp = self.conn.getresponse()
                data = resp.read()
                self.used = True
                if resp.getheader("connection", "").lower() == "close":
                    self.close()
                return resp.status, resp, data, stale
            except STALE_ERRORS as e:
                self.close()
                if not reused or attempt == 1:
                    raise
                stale = f"{type(e).__name__}: {e}"
            except Exception:
                self.close()
                raise
        raise AssertionError("unreachable")


def gv_parts(spec):
    g, v, res = spec.split("/")
    return g, v, res


def seed(port, healthy):
    c = Client(port)
    for spec in healthy:
        g, v, res = gv_parts(spec)
        for i in range(5):
            body = json.dumps({"apiVersion": f"{g}/{v}", "kind": "Object",
                               "metadata": {"name": f"soak-{i}", "labels": {"soak": "seed"}},
                               "spec": {"pad": "x" * 512}})
            status, _, data, _ = c.request("POST", f"/apis/{g}/{v}/{res}", {"Content-Type": "application/json"}, body)
            if status not in (200, 201, 409):
                sys.exit(f"seeding {g}/{v}/{res}/soak-{i}: HTTP {status}: {data[:300]!r}")
    c.close()


def check_content(kind, data, healthy_groups):
    """Content problems of an answer apiagg builds itself (None when fine)."""
    if kind == "discovery-aggregated":
        doc = json.loads(data)
        seen = {}
        for item in doc.get("items", []):
            name = item.get("metadata", {}).get("name")
            seen[name] = [v.get("freshness", "Current") for v in item.get("versions", [])]
        for g in healthy_groups:
            if g not in seen:
                return f"{g} missing from aggregated /apis"
            if "Stale" in seen[g]:
                return f"{g} Stale in aggregated /apis"
    elif kind == "discovery-legacy":
        names = {x.get("name") for x in json.loads(data).get("groups", [])}
        for g in healthy_groups:
            if g not in names:
                return f"{g} missing from legacy /apis"
    elif kind == "openapi-v2":
        for g in healthy_groups:
            if f'"/apis/{g}/'.encode() not in data:
                return f"{g} paths missing from /openapi/v2"
    elif kind == "openapi-v3-index":
        paths = json.loads(data).get("paths", {})
        for g in healthy_groups:
            if not any(p.startswith(f"apis/{g}/") for p in paths):
                return f"{g} missing from /openapi/v3"
    return None


def load(args):
    stop = threading.Event()
    stats = Stats()
    healthy = args.healthy
    healthy_groups = [gv_parts(s)[0] for s in healthy]
    seed(args.port, healthy)

    fg, fv, fres = gv_parts(args.flapping)
    dg, dv, dres = gv_parts(args.delegate)
    h0g, h0v, _ = gv_parts(healthy[0])

    def pick():
        """(kind, path, headers, healthy, expected X-Sample-Server or None)"""
        r = random.random()
        g, v, res = gv_parts(random.choice(healthy))
        if r < 0.30:
            return f"list {g}", f"/apis/{g}/{v}/{res}", {"Accept": "application/json"}, True, g
        if r < 0.62:
            return f"get {g}", f"/apis/{g}/{v}/{res}/soak-{random.randrange(5)}", {"Accept": "application/json"}, True, g
        if r < 0.72:
            return "discovery-aggregated", "/apis", {"Accept": AGGREGATED}, True, None
        if r < 0.78:
            return "discovery-legacy", "/apis", {"Accept": "application/json"}, True, None
        if r < 0.81:
            return f"discovery {g}/{v}", f"/apis/{g}/{v}", {"Accept": "application/json"}, True, None
        if r < 0.82:
            return "openapi-v2", "/openapi/v2", {"Accept": "application/json"}, True, None
        if r < 0.85:
            return "openapi-v3-index", "/openapi/v3", {"Accept": "application/json"}, True, None
        if r < 0.88:
            return f"openapi-v3 {g}/{v}", f"/openapi/v3/apis/{g}/{v}", {"Accept": "application/json"}, True, None
        if r < 0.94:
            return f"list {dg} (delegate)", f"/apis/{dg}/{dv}/{dres}", {"Accept": "application/json"}, True, "delegate"
        return f"list {fg} (flapping)", f"/apis/{fg}/{fv}/{fres}", {"Accept": "application/json"}, False, fg

    def one(client, kind, method, path, headers, is_healthy, server=None, body=None):
        t0 = time.monotonic()
        try:
            status, resp, data, retried = client.request(method, path, headers, body)
        except Exception as e:  # connection errors, timeouts
            stats.record(kind, is_healthy, None, time.monotonic() - t0,
                         error=f"{type(e).__name__}: {e}", path=path)
            return None
        dt = time.monotonic() - t0
        if not stats.record(kind, is_healthy, status, dt, path=path, retried=retried, body=data):
            return None
        if server is not None and resp.getheader("x-sample-server") != server:
            if is_healthy:
                stats.demote(kind, path, status, f"misrouted to {resp.getheader('x-sample-server')}")
            else:
                stats.note(kind, f"answered by {resp.getheader('x-sample-server')}")
            return None
        if is_healthy:
            try:
                problem = check_content(kind, data, healthy_groups)
            except ValueError as e:
                problem = f"not JSON: {e}"
            if problem:
                stats.demote(kind, path, status, problem)
                return None
        return data

    workers = max(1, args.workers)
    period = workers / args.rate

    def worker(i):
        client = Client(args.port)
        next_t = time.monotonic() + i * period / workers
        while not stop.is_set():
            now = time.monotonic()
            if next_t > now:
                stop.wait(next_t - now)
                if stop.is_set():
                    break
            next_t = max(next_t + period, time.monotonic() - 1)
            kind, path, headers, is_healthy, server = pick()
            one(client, kind, "GET", path, headers, is_healthy, server)
        client.close()

    def writer():
        client = Client(args.port)
        n = 0
        while not stop.wait(1.0):
            g, v, res = gv_parts(healthy[n % len(healthy)])
            name = f"churn-{n}"
            body = json.dumps({"apiVersion": f"{g}/{v}", "kind": "Object", "metadata": {"name": name}})
            one(client, f"create {g}", "POST", f"/apis/{g}/{v}/{res}",
                {"Content-Type": "application/json"}, True, g, body)
            if stop.wait(1.0):
                break
            one(client, f"delete {g}", "DELETE", f"/apis/{g}/{v}/{res}/{name}", {}, True, g)
            n += 1
        client.close()

    def watcher(spec, is_healthy):
        """Watches held 10-30 s, on a raw socket (a timed-out http.client response cannot be
        read again): events are counted as `"type":` occurrences in the chunked stream."""
        g, v, res = gv_parts(spec)
        kind = f"watch {g}" + ("" if is_healthy else " (flapping)")
        path = f"/apis/{g}/{v}/{res}?watch=true&timeoutSeconds=300"
        request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{args.port}\r\n"
                   "Accept: application/json\r\nUser-Agent: soak-load\r\n\r\n").encode()
        while not stop.is_set():
            hold = random.uniform(10, 30)
            t0 = time.monotonic()
            sock, buf = None, b""
            try:
                sock = socket.create_connection(("127.0.0.1", args.port), timeout=15)
                sock.sendall(request)
                while b"\r\n\r\n" not in buf:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionError(f"closed before the response head ({len(buf)} bytes)")
                    buf += chunk
            except Exception as e:
                stats.record(kind, is_healthy, None, time.monotonic() - t0,
                             error=f"{type(e).__name__}: {e}", path=path)
                if sock is not None:
                    sock.close()
                stop.wait(1.0)
                continue
            head, _, body = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
            if status != 200:
                stats.record(kind, is_healthy, status, time.monotonic() - t0, path=path, body=body)
                sock.close()
                stop.wait(1.0)
                continue
            stats.record(kind, is_healthy, status, time.monotonic() - t0, path=path)
            if headers.get("x-sample-server") != g:
                stats.note(kind, f"answered by {headers.get('x-sample-server')}")
            deadline = t0 + hold
            events, ended, tail = body.count(b'"type":'), None, body[-16:]
            while not stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                ready, _, _ = select.select([sock], [], [], min(left, 1.0))
                if not ready:
                    continue
                try:
                    chunk = sock.recv(65536)
                except OSError as e:
                    ended = type(e).__name__
                    break
                if not chunk:
                    ended = "connection closed"
                    break
                events += chunk.count(b'"type":')
                tail = (tail + chunk)[-16:]
                if tail.endswith(b"\r\n0\r\n\r\n") or tail == b"0\r\n\r\n":
                    ended = "stream ended"
                    break
            stats.note(kind, "events", events)
            if ended is not None:
                stats.note(kind, f"cut before the hold time ({ended})")
            else:
                stats.note(kind, "held and closed by the client")
            sock.close()
            stop.wait(random.uniform(0, 2))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
    threads.append(threading.Thread(target=writer, daemon=True))
    for i in range(args.watchers):
        threads.append(threading.Thread(target=watcher, args=(healthy[i % len(healthy)], True), daemon=True))
    threads.append(threading.Thread(target=watcher, args=(args.flapping, False), daemon=True))
    start = time.time()
    for t in threads:
        t.start()
    try:
        time.sleep(args.duration)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=20)
    elapsed = time.time() - start
    with stats.lock:
        out = {"start": start, "elapsed": elapsed, "kinds": {}, "failures": stats.failures,
               "retries": stats.retries}
        for name, k in stats.kinds.items():
            lat = sorted(k["lat"])
            q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else None  # noqa: E731
            out["kinds"][name] = {
                "healthy": k["healthy"], "total": k["total"], "ok": k["ok"], "failed": k["failed"],
                "retried": k["retried"], "statuses": dict(k["statuses"]),
                "p50_ms": q(0.50), "p99_ms": q(0.99), "max_ms": lat[-1] * 1000 if lat else None,
                "notes": dict(k.get("notes", {})),
            }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


# ---------------------------------------------------------------------------------------------
# chaos


def proc_sample(pid, clk):
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return {
        "rss_kib": int(status["VmRSS"].split()[0]),
        "hwm_kib": int(status["VmHWM"].split()[0]),
        "threads": int(status["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "cpu_s": (int(fields[11]) + int(fields[12])) / clk,
    }


def wait_healthy(port, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def chaos(args):
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    forms = []
    for path in args.forms:
        with open(path, "rb") as f:
            forms.append(f.read())
    logf = open(args.flap_log, "ab")
    state = {"child": None}

    def start_backend():
        for _ in range(50):
            child = subprocess.Popen(cmd, stdout=logf, stderr=logf)
            with open(args.pidfile, "w") as f:
                f.write(str(child.pid))
            if wait_healthy(args.flap_port, 10):
                state["child"] = child
                return True
            child.kill()
            child.wait()
            time.sleep(0.2)  # the port was not free yet
        return False

    def on_term(*_):
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, on_term)
    out = {"rss": [], "events": [], "rewrites": 0, "kills": 0, "restarts": 0, "restart_failures": 0,
           "restart_s": []}
    if not start_backend():
        sys.exit("the flapping backend did not start")
    try:
        # soak.sh writes apiagg's pid once apiagg is ready: the run starts then.
        with open(args.apiagg_pid_fifo) as f:
            apiagg_pid = int(f.read().strip())
        run_chaos(args, forms, state, start_backend, out, apiagg_pid)
    finally:
        child = state["child"]
        if child is not None:
            child.kill()
            child.wait()
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


def run_chaos(args, forms, state, start_backend, out, apiagg_pid):
    clk = os.sysconf("SC_CLK_TCK")
    start = time.monotonic()
    events = []  # (time offset, action)
    t = args.rewrite_every
    while t < args.duration:
        events.append((t, "rewrite"))
        t += args.rewrite_every
    t = args.flap_every / 2
    while t + args.flap_down < args.duration:
        events.append((t, "kill"))
        events.append((t + args.flap_down, "restart"))
        t += args.flap_every
    t = 0.0
    while t <= args.duration:
        events.append((t, "sample"))
        t += args.sample_every
    events.sort(key=lambda e: (e[0], e[1] != "sample"))
    form = 0
    prev = None
    for offset, action in events:
        delay = start + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if action == "rewrite":
            form = 1 - form
            tmp = args.config + ".tmp"
            with open(tmp, "wb") as f:
                f.write(forms[form])
            os.replace(tmp, args.config)
            out["rewrites"] += 1
            out["events"].append([time.time(), f"config rewrite (form {'ab'[form]})"])
        elif action == "kill":
            child = state["child"]
            if child is not None:
                child.send_signal(signal.SIGKILL)
                child.wait()
                state["child"] = None
                out["kills"] += 1
                out["events"].append([time.time(), "flapping backend killed"])
        elif action == "restart":
            t0 = time.monotonic()
            if start_backend():
                out["restarts"] += 1
                out["restart_s"].append(time.monotonic() - t0)
                out["events"].append([time.time(), "flapping backend restarted"])
            else:
                out["restart_failures"] += 1
        else:
            s = proc_sample(apiagg_pid, clk)
            s["t"] = round(offset)
            s["cpu_pct"] = (100 * (s["cpu_s"] - prev["cpu_s"]) / (s["t"] - prev["t"])) if prev and s["t"] > prev["t"] else None
            prev = s
            out["rss"].append(s)
            with open(args.out, "w") as f:
                json.dump(out, f, indent=1)


# ---------------------------------------------------------------------------------------------
# report


def normalize(msg):
    msg = re.sub(r"\b\d+(\.\d+)?(ms|µs|s)?\b", "N", msg)
    return re.sub(r"\s+", " ", msg)


def read_log(path):
    """(level counts, {(level, target, normalized message): [count, example]}, other lines)"""
    levels = collections.Counter()
    groups = {}
    other = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                level = d.get("level", "?")
                fields = dict(d.get("fields", {}))
                msg = str(fields.pop("message", ""))
                target = d.get("target", "")
            except ValueError:
                m = re.search(r"\b(ERROR|WARN|INFO|DEBUG|TRACE)\b", line)
                if not m:
                    other.append(line)
                    continue
                level, msg, fields, target = m.group(1), line[m.end():].strip(), {}, "(text)"
            levels[level] += 1
            if level in ("ERROR", "WARN"):
                key = (level, target, normalize(msg))
                g = groups.setdefault(key, [0, msg, fields])
                g[0] += 1
    return levels, groups, other


def report(args):
    with open(args.load) as f:
        ld = json.load(f)
    with open(args.chaos) as f:
        ch = json.load(f)
    bad = []

    print(f"\n== requests ({ld['elapsed']:.0f} s; failure = non-2xx, connection error, misrouted or "
          "wrong content on a healthy group)")
    print(f"{'kind':44} {'total':>7} {'ok':>7} {'failed':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}  statuses")
    total = healthy_failed = 0
    fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    for name in sorted(ld["kinds"], key=lambda n: (not ld["kinds"][n]["healthy"], n)):
        k = ld["kinds"][name]
        total += k["total"]
        if k["healthy"]:
            healthy_failed += k["failed"]
        label = name + ("" if k["healthy"] else " [not counted]")
        statuses = ",".join(f"{s}:{n}" for s, n in sorted(k["statuses"].items()))
        print(f"{label:44} {k['total']:7} {k['ok']:7} {k['failed']:6} {fmt(k['p50_ms']):>7} "
              f"{fmt(k['p99_ms']):>7} {fmt(k['max_ms']):>7}  {statuses}")
        notes = dict(k.get("notes", {}))
        if k["retried"]:
            notes["retried once on a stale keep-alive connection"] = k["retried"]
        for note, n in sorted(notes.items()):
            print(f"{'':46}{note}: {n}")
    print(f"total {total} requests, {total / max(1, ld['elapsed']):.0f}/s; healthy-group failures: {healthy_failed}")
    def after(t):
        before = [e for e in ch.get("events", []) if e[0] <= t]
        return f"{t - before[-1][0]:.2f} s after {before[-1][1]}" if before else "before any chaos event"

    if healthy_failed:
        bad.append(f"{healthy_failed} healthy-group requests failed")
        for fl in ld["failures"][:20]:
            at = time.strftime("%H:%M:%S", time.localtime(fl["t"]))
            print(f"  FAILED {at} +{fl['t'] - ld['start']:.0f}s ({after(fl['t'])}) {fl['kind']} "
                  f"{fl['path']}: {fl.get('status')} {fl.get('error') or ''} {fl.get('body', '')[:200]}")
    for r in ld.get("retries", [])[:10]:
        at = time.strftime("%H:%M:%S", time.localtime(r["t"]))
        print(f"  retried {at} +{r['t'] - ld['start']:.0f}s ({after(r['t'])}) {r['kind']} "
              f"{r['path']}: {r['error']}")

    print(f"\n== chaos: {ch['rewrites']} config rewrites, {ch['kills']} kills of the flapping backend, "
          f"{ch['restarts']} restarts ({ch['restart_failures']} failed)")
    try:
        with urllib.request.urlopen(args.metrics, timeout=5) as r:
            text = r.read().decode()
        reloads = {m.group(1): float(m.group(2)) for m in re.finditer(
            r'^apiagg_config_reloads_total\{result="(\w+)"\} (\S+)', text, re.M)}
        print(f"apiagg_config_reloads_total: {reloads}")
    except OSError as e:
        print(f"(metrics not read: {e})")

    rss = ch["rss"]
    print("\n== apiagg RSS (sampled every 10 s)")
    print(f"{'t s':>5} {'RSS MiB':>8} {'CPU %':>6} {'threads':>7} {'fds':>5}")
    for s in rss:
        cpu = "-" if s.get("cpu_pct") is None else f"{s['cpu_pct']:.1f}"
        print(f"{s['t']:5} {s['rss_kib'] / 1024:8.1f} {cpu:>6} {s['threads']:7} {s['fds']:5}")
    if rss:
        end = rss[-1]["t"]
        # t=0 is sampled when apiagg just turned ready, before the load: not part of it.
        first = [s["rss_kib"] for s in rss if 0 < s["t"] <= 60] or [rss[-1]["rss_kib"]]
        last = [s["rss_kib"] for s in rss if s["t"] > end - 60] or [rss[-1]["rss_kib"]]
        a, b = sum(first) / len(first) / 1024, sum(last) / len(last) / 1024
        growth = 100 * (b - a) / a
        print(f"RSS first minute {a:.1f} MiB (mean of {len(first)}) -> last minute {b:.1f} MiB "
              f"(mean of {len(last)}): {growth:+.1f}% (limit +{args.max_growth:.0f}%); peak "
              f"(VmHWM) {rss[-1]['hwm_kib'] / 1024:.1f} MiB; CPU {rss[-1]['cpu_s'] - rss[0]['cpu_s']:.0f} s "
              f"over {end - rss[0]['t']} s")
        if growth > args.max_growth:
            bad.append(f"RSS grew {growth:.1f}%")

    levels, groups, other = read_log(args.log)
    print(f"\n== apiagg log: {levels.get('ERROR', 0)} ERROR, {levels.get('WARN', 0)} WARN, "
          f"{levels.get('INFO', 0)} INFO lines; {len(other)} other lines")
    for (level, target, _), (n, msg, fields) in sorted(groups.items(), key=lambda kv: (kv[0][0], -kv[1][0])):
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        text = f"{msg} {extra}".strip()
        print(f"  {n:6} {level:5} {target}: {text[:220]}")
    for line in other[:10]:
        print(f"  other: {line[:220]}")

    print()
    if bad:
        print("FAIL: " + "; ".join(bad))
        sys.exit(1)
    print("OK: no healthy-group failure, RSS within the limit")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd_name", required=True)
    lp = sub.add_parser("load")
    lp.add_argument("--port", type=int, required=True)
    lp.add_argument("--duration", type=float, required=True)
    lp.add_argument("--rate", type=float, default=150)
    lp.add_argument("--workers", type=int, default=4)
    lp.add_argument("--healthy", nargs="+", required=True)
    lp.add_argument("--flapping", required=True)
    lp.add_argument("--delegate", required=True)
    lp.add_argument("--watchers", type=int, default=3)
    lp.add_argument("--out", required=True)
    cp = sub.add_parser("chaos")
    cp.add_argument("--duration", type=float, required=True)
    cp.add_argument("--config", required=True)
    cp.add_argument("--forms", nargs=2, required=True)
    cp.add_argument("--rewrite-every", type=float, default=10)
    cp.add_argument("--flap-every", type=float, default=30)
    cp.add_argument("--flap-down", type=float, default=5)
    cp.add_argument("--flap-port", type=int, required=True)
    cp.add_argument("--flap-log", required=True)
    cp.add_argument("--pidfile", required=True)
    cp.add_argument("--apiagg-pid-fifo", required=True)
    cp.add_argument("--sample-every", type=float, default=10)
    cp.add_argument("--out", required=True)
    cp.add_argument("cmd", nargs=argparse.REMAINDER)
    rp = sub.add_parser("report")
    rp.add_argument("--load", required=True)
    rp.add_argument("--chaos", required=True)
    rp.add_argument("--log", required=True)
    rp.add_argument("--metrics", required=True)
    rp.add_argument("--max-growth", type=float, default=20)
    args = p.parse_args()
    {"load": load, "chaos": chaos, "report": report}[args.cmd_name](args)


if __name__ == "__main__":
    main()
