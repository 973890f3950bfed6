#!/usr/bin/env python3
"""Helpers for watch-scale.sh (Python 3 standard library only).

Subcommands:
  config DIR PORT BACKEND_URL [CA_FILE]
      write DIR/apiagg.yaml: one Service `test/wardle` at BACKEND_URL and the APIService
      v1alpha1.wardle.example.com on it (verified against CA_FILE when the backend is https)
  wait-ready URL SECONDS
      poll URL until it answers 200
  run --host H --port P --pid PID --n N --backend-port BP [--sample 100] [--batch 250]
      [--create-port CP]
      open N watches (raw HTTP/1.1 `GET …/flunders?watch=true`, kept open) through apiagg at
      H:P, measure the RSS of PID before, with them open, and after one event reached them all;
      create one object (POST through apiagg, or to port CP with --create-port CP) and check that
      SAMPLE watchers spread over the N receive its ADDED event. Prints one `RESULT key=value …` line; exit status 1 when a watch
      failed to open or a sampled watcher missed the event.
"""

import argparse
import asyncio
import base64
import json
import os
import resource
import sys
import time
import urllib.request

PATH = "/apis/wardle.example.com/v1alpha1/flunders"
# The watch's query: a plain watch by default; WATCH_QUERY sets another (a streaming list:
# "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true").
QUERY = os.environ.get("WATCH_QUERY", "watch=true")
EVENT_TIMEOUT_S = 20
OPEN_TIMEOUT_S = 30


def config(d, port, backend_url, ca_file=None):
    tls = ""
    if backend_url.startswith("https://"):
        with open(ca_file, "rb") as f:
            tls = f", caBundle: {base64.b64encode(f.read()).decode()}"
    with open(os.path.join(d, "apiagg.yaml"), "w") as f:
        f.write(
            f"listen: 127.0.0.1:{port}\n"
            "services:\n"
            f'  - {{namespace: test, name: wardle, port: 443, endpoints: ["{backend_url}"]}}\n'
            "apiServices:\n"
            "  - apiVersion: apiregistration.k8s.io/v1\n"
            "    kind: APIService\n"
            "    metadata: {name: v1alpha1.wardle.example.com}\n"
            "    spec: {group: wardle.example.com, version: v1alpha1, groupPriorityMinimum: 1000,"
            f" versionPriority: 15, service: {{namespace: test, name: wardle, port: 443}}{tls}}}\n"
        )


def wait_ready(url, seconds):
    deadline = time.time() + float(seconds)
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"{url} did not answer 200 within {seconds}s")


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def connections_to(port):
    """Established TCP connections (IPv4 and IPv6, any process) whose remote port is `port`."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "01" and int(cols[2].rsplit(":", 1)[1], 16) == port:
                        n += 1
        except FileNotFoundError:
            pass
    return n


async def open_watch(host, port):
    r, w = await asyncio.wait_for(asyncio.open_connection(host, port), OPEN_TIMEOUT_S)
    w.write(
        f"GET {PATH}?{QUERY} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Accept: application/json\r\nUser-Agent: watch-scale\r\n\r\n".encode()
    )
    await w.drain()
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), OPEN_TIMEOUT_S)
    if not head.startswith(b"HTTP/1.1 200"):
        w.close()
        raise RuntimeError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
    return r, w


async def wait_for(r, needle):
    seen = b""
    try:
        async with asyncio.timeout(EVENT_TIMEOUT_S):
            while needle not in seen:
                chunk = await r.read(65536)
                if not chunk:
                    return False
                seen = seen[-len(needle) :] + chunk
        return True
    except (TimeoutError, OSError):
        return False


def post(host, port, name):
    body = json.dumps({"metadata": {"name": name}}).encode()
    req = urllib.request.Request(
        f"http://{host}:{port}{PATH}",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
        return r.status


async def run(a):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if a.n + 100 > hard:
        sys.exit(f"this process may open {hard} files, not enough for {a.n} watches")
    await asyncio.sleep(1)
    base = status_kib(a.pid, "VmRSS")
    base_fds = fd_count(a.pid)
    conns, errors = [], {}
    t0 = time.time()
    for i in range(0, a.n, a.batch):
        batch = [open_watch(a.host, a.port) for _ in range(min(a.batch, a.n - i))]
        for res in await asyncio.gather(*batch, return_exceptions=True):
            if isinstance(res, BaseException):
                key = f"{type(res).__name__}: {res}"[:120]
                errors[key] = errors.get(key, 0) + 1
            else:
                conns.append(res)
    open_s = time.time() - t0
    await asyncio.sleep(3)
    opened = status_kib(a.pid, "VmRSS")
    anon = status_kib(a.pid, "RssAnon")
    fds = fd_count(a.pid)
    backend_conns = connections_to(a.backend_port)

    # One event: every watcher gets it (apiagg forwards it on every stream); a sample proves it.
    name = f"scale-{int(time.time() * 1000)}"
    status = await asyncio.to_thread(post, a.host, a.create_port or a.port, name)
    step = max(1, len(conns) // max(1, a.sample))
    sample = conns[::step][: a.sample]
    got = await asyncio.gather(*[wait_for(r, name.encode()) for r, _ in sample])
    await asyncio.sleep(2)
    evented = status_kib(a.pid, "VmRSS")
    n = len(conns)
    per = (opened - base) / max(1, n)
    per_evented = (evented - base) / max(1, n)
    print(
        f"RESULT watches={a.n} open={n} open_s={open_s:.1f} rss_base_kib={base} "
        f"rss_open_kib={opened} rss_anon_open_kib={anon} rss_after_event_kib={evented} "
        f"kib_per_watch={per:.1f} kib_per_watch_after_event={per_evented:.1f} "
        f"fds={fds - base_fds} backend_conns={backend_conns} post_status={status} "
        f"sample_got_event={sum(got)}/{len(sample)}",
        flush=True,
    )
    for err, count in errors.items():
        print(f"open failure x{count}: {err}", file=sys.stderr)
    for _, w in conns:
        w.close()
    # --sample 0: a front that streams nothing (it only holds watches); no event to wait for.
    ok = n == a.n and all(got) and (len(sample) > 0 or a.sample == 0)
    return 0 if ok else 1


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "config":
        config(*args)
    elif cmd == "wait-ready":
        wait_ready(*args)
    elif cmd == "run":
        ap = argparse.ArgumentParser(prog="watch_scale_helper.py run")
        ap.add_argument("--host", default="127.0.0.1")
        ap.add_argument("--port", type=int, required=True)
        ap.add_argument("--pid", type=int, required=True)
        ap.add_argument("--n", type=int, required=True)
        ap.add_argument("--backend-port", type=int, required=True)
        ap.add_argument("--sample", type=int, default=100)
        ap.add_argument("--batch", type=int, default=250)
        # Where the object is created (default --port): a front that does not forward request
        # bodies (core-prototype-watches.sh's prototype) has it created on the backend directly.
        ap.add_argument("--create-port", type=int)
        sys.exit(asyncio.run(run(ap.parse_args(args))))
    else:
        sys.exit(f"unknown subcommand {cmd}")


if __name__ == "__main__":
    main()
