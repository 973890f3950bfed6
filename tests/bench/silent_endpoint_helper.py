#!/usr/bin/env python3
"""Helpers for silent-endpoint.sh (Python 3 standard library only).

Subcommands:
  relay PORT BACKEND_PORT            a TCP relay on 127.0.0.1:PORT to 127.0.0.1:BACKEND_PORT; prints
                                     "relaying ..." once bound. SIGUSR1 makes it silent: from then
                                     on nothing is forwarded in either direction (not even an EOF)
                                     and nothing is closed, and the connections it accepts are held
                                     open without reaching the backend (as tests/src/relay.rs, but
                                     stricter: a close from either side is not passed on either)
  run APIAGG_PORT PATH RELAY_PID RELAY_URL SILENT OTHER RATE WARMUP_S AFTER_S TIMEOUT_S CASE RUN OUT.tsv
                                     GET http://127.0.0.1:APIAGG_PORT/PATH RATE times a second,
                                     each on its own connection and thread (not waiting for the one
                                     before), WARMUP_S before and AFTER_S after SIGUSR1 to RELAY_PID;
                                     polls /debug/apiagg/status from the silence until RELAY_URL
                                     shows "healthy": false; appends one row to OUT.tsv
  report OUT.tsv                     print the table, the goal and the anchors; exit 1 when a run
                                     missed the goal
"""

import http.client
import json
import math
import os
import signal
import socket
import sys
import threading
import time

LATE_S = 3.0  # from this long after the silence, every request must be answered by OTHER
GOAL_WORST_S = 5.0  # no request may wait longer


# ---------------------------------------------------------------------------------------------
# The relay.
SILENT = threading.Event()
HELD = []  # sockets kept open (never closed, never read again) once silent


def relay(port, backend_port):
    backend_port = int(backend_port)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(1024)
    signal.signal(signal.SIGUSR1, lambda *a: SILENT.set())
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    print(f"relaying 127.0.0.1:{port} -> 127.0.0.1:{backend_port}", flush=True)
    while True:
        client, _ = listener.accept()
        if SILENT.is_set():
            HELD.append(client)
            continue
        threading.Thread(target=connect, args=(client, backend_port), daemon=True).start()


def connect(client, backend_port):
    try:
        server = socket.create_connection(("127.0.0.1", backend_port), timeout=5)
        server.settimeout(None)
    except OSError:
        client.close()
        return
    if SILENT.is_set():
        HELD.extend((client, server))
        return
    for s in (client, server):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pair = Pair(client, server)
    threading.Thread(target=pump, args=(client, server, pair), daemon=True).start()
    pump(server, client, pair)


class Pair:
    """Both sockets of one relayed connection: closed together when either side ends (before
    the silence), held together after it."""

    def __init__(self, a, b):
        self.socks = (a, b)
        self.lock = threading.Lock()
        self.done = False

    def close(self):
        with self.lock:
            if self.done:
                return
            self.done = True
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes the other direction's recv
            except OSError:
                pass
            s.close()

    def hold(self):
        with self.lock:
            if not self.done:
                self.done = True
                HELD.extend(self.socks)


def pump(src, dst, pair):
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if SILENT.is_set():
            # Whatever arrived (bytes or an EOF) goes nowhere; both sockets stay open, unread.
            return pair.hold()
        if not data:
            return pair.close()
        try:
            dst.sendall(data)
        except OSError:
            return pair.close()


# ---------------------------------------------------------------------------------------------
# The load and the ejection poller.
class Sent:
    __slots__ = ("at", "took", "status", "server", "error")


def get_once(port, path, timeout):
    """One GET on its own connection: (status, X-Sample-Server, error); status 0 on an error
    or a timeout."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        return r.status, r.getheader("X-Sample-Server", ""), ""
    except (OSError, http.client.HTTPException) as e:
        return 0, "", f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def endpoints(port):
    """Every endpoint of /debug/apiagg/status, by url: healthy (None when unreadable)."""
    status, body = 0, b""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/debug/apiagg/status")
        r = conn.getresponse()
        status, body = r.status, r.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    if status != 200:
        sys.exit(f"/debug/apiagg/status answered {status}: {body[:300]!r}")
    doc = json.loads(body)
    return {e["url"]: e.get("healthy") for item in doc.get("items", []) for e in item.get("endpoints") or []}


def run(port, path, relay_pid, relay_url, silent_name, other_name, rate, warmup, after, timeout,
        case, run_no, out):
    port, relay_pid = int(port), int(relay_pid)
    rate, warmup, after, timeout = float(rate), float(warmup), float(after), float(timeout)
    log = lambda msg: print(f"[silent-endpoint]   {case} run {run_no}: {msg}", file=sys.stderr)

    # Both endpoints healthy, and the group answering, before the load starts.
    deadline = time.monotonic() + 20
    while True:
        eps = endpoints(port) or {}
        if relay_url in eps and len(eps) == 2 and all(eps.values()):
            break
        if time.monotonic() > deadline:
            sys.exit(f"{case} run {run_no}: endpoints not both healthy within 20 s: {eps}")
        time.sleep(0.05)
    status, server, err = get_once(port, path, 5)
    if status != 200:
        sys.exit(f"{case} run {run_no}: GET {path} before the load: {status} {err}")

    sent, threads = [], []
    silent_at = None
    ejected = {}

    def poll_ejection():
        while silent_at is not None and time.monotonic() - silent_at < after + timeout:
            eps = endpoints(port)
            now = time.monotonic()
            if eps is not None and eps.get(relay_url) is False:
                ejected["after"] = now - silent_at
                return
            time.sleep(0.01)

    def one(base):
        s = Sent()
        begun = time.monotonic()
        s.at = begun - base()
        s.status, s.server, s.error = get_once(port, path, timeout)
        s.took = time.monotonic() - begun
        sent.append(s)

    start = time.monotonic()
    base = lambda: silent_at if silent_at is not None else start + warmup
    poller = None
    for i in range(1_000_000):
        tick = start + i / rate
        time.sleep(max(0.0, tick - time.monotonic()))
        now = time.monotonic()
        if silent_at is None and now - start >= warmup:
            os.kill(relay_pid, signal.SIGUSR1)
            silent_at = time.monotonic()
            poller = threading.Thread(target=poll_ejection, daemon=True)
            poller.start()
        if silent_at is not None and now - silent_at >= after:
            break
        t = threading.Thread(target=one, args=(base,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout + 10)
    poller.join(timeout + 10)
    if len(sent) != len(threads):
        sys.exit(f"{case} run {run_no}: {len(threads) - len(sent)} requests never returned")

    sent.sort(key=lambda s: s.at)
    before = [s for s in sent if s.at < 0]
    if not any(s.server == silent_name for s in before) or not any(s.server == other_name for s in before):
        servers = sorted({s.server for s in before})
        log(f"WARNING: not both endpoints served before the silence (servers {servers})")
    failed = [s for s in sent if s.status != 200 or s.took > timeout]
    took = sorted(s.took for s in sent)
    worst = took[-1]
    p99 = took[max(0, math.ceil(0.99 * len(took)) - 1)]
    late = [s for s in sent if s.at >= LATE_S]
    late_other = sum(1 for s in late if s.status == 200 and s.server == other_name)
    moved = sum(1 for s in sent if s.at >= 0 and s.status == 200 and s.server == other_name and s.took > 0.5)
    eject = ejected.get("after")
    for s in failed:
        log(f"failed: sent at {s.at:+.2f} s, {s.took:.2f} s, status {s.status} {s.error}")
    for s in late:
        if s.server != other_name and s.status == 200:
            log(f"answered by {s.server!r} at {s.at:+.2f} s ({s.took:.2f} s)")
    log(f"{len(sent)} requests, {len(failed)} failed, worst {worst:.2f} s, p99 {p99:.2f} s, "
        f"{late_other}/{len(late)} from {LATE_S:g} s answered by {other_name}, {moved} waited on the "
        f"silent endpoint and moved, ejected {'after %.2f s' % eject if eject is not None else 'never'}")
    new = not os.path.exists(out)
    with open(out, "a") as f:
        if new:
            f.write("case\trun\trequests\tfailed\tworst_s\tp99_s\tlate\tlate_other\tmoved\teject_s\n")
        f.write(f"{case}\t{run_no}\t{len(sent)}\t{len(failed)}\t{worst:.3f}\t{p99:.3f}\t{len(late)}\t"
                f"{late_other}\t{moved}\t{'-' if eject is None else '%.3f' % eject}\n")


# ---------------------------------------------------------------------------------------------
def report(path):
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f]
    print()
    print(f"{'case':<5} {'run':>3} | {'requests':>8} {'failed':>6} {'worst':>8} {'p99':>8} | "
          f"{'from 3 s to other':>17} | {'moved':>5} | {'ejected after':>13} | goal")
    missed = 0
    for r in rows:
        late, late_other = int(r["late"]), int(r["late_other"])
        share = late_other / late if late else 0.0
        ok = int(r["failed"]) == 0 and float(r["worst_s"]) <= GOAL_WORST_S and late and late_other == late
        missed += not ok
        eject = "never" if r["eject_s"] == "-" else f"{float(r['eject_s']):.2f} s"
        print(f"{r['case']:<5} {r['run']:>3} | {r['requests']:>8} {r['failed']:>6} {float(r['worst_s']):>6.2f} s "
              f"{float(r['p99_s']):>6.2f} s | {share * 100:>5.1f}% ({late_other:>3}/{late:<3}) | "
              f"{r['moved']:>5} | {eject:>13} | {'met' if ok else 'MISSED'}")
    print(
        f"  failed: not 200, or no answer within the client timeout. worst, p99: latency of all\n"
        f"  requests. from 3 s to other: of the requests sent {LATE_S:g} s or more after the silence,\n"
        f"  the share answered (200) by the endpoint that still speaks. moved: requests sent after the\n"
        f"  silence that took over 0.5 s and were answered by the other endpoint (they waited on the\n"
        f"  silent one). ejected after: from the silence until /debug/apiagg/status shows the silent\n"
        f"  endpoint \"healthy\": false.\n"
        f"  Goal: no request fails or waits more than {GOAL_WORST_S:g} s, and from {LATE_S:g} s on every\n"
        f"  request is answered by the other endpoint.\n"
        f"  Anchors: on the pingora-proxy path (commit 7ba07b3) the same scenario measured \"8 of 197\n"
        f"  failed, worst 6.95 s\" (not rebuilt in this run); kube-aggregator keeps such an HTTP/2\n"
        f"  connection pinned for ~45 s (kubernetes#141318)."
    )
    if missed:
        print(f"  {missed} of {len(rows)} runs MISSED the goal.")
        sys.exit(1)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {
        "relay": lambda: relay(*args),
        "run": lambda: run(*args),
        "report": lambda: report(args[0]),
    }[cmd]()


if __name__ == "__main__":
    main()
