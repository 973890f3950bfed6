#!/usr/bin/env python3
"""Helpers for the rows of side_by_side_more.sh (Python 3 standard library only).

Subcommands:
  relay HOST PORT BACKEND_PORT         a TCP relay on HOST:PORT to 127.0.0.1:BACKEND_PORT; prints
                                       "relaying ..." once bound. SIGUSR1 makes it silent, as
                                       silent_endpoint_helper.py's relay (whose connection code it
                                       uses): nothing more passes in either direction, nothing
                                       is closed (no FIN, no RST), and the connections it accepts
                                       from then on are held without reaching the backend. On
                                       SIGTERM it prints how many it accepted before and after.
  load --url U --path P --ca CA --cert C --key K --rate R --secs S --silence-at T
       --relay-pid PID --timeout X [--detail FILE]
                                       GET U+P R times a second for S s, each on its own TLS
                                       connection (HTTP/1.1, client certificate) and thread, not
                                       waiting for the one before; SIGUSR1 to PID at T s; prints
                                       JSON: requests, ok, lost (not 200, or no answer within X s),
                                       worst and p99 wait (s), the lost ones by cause; FILE gets
                                       one line per request: sent at (s), status, wait (s), cause
  lines FILE NEEDLE                    "lines matching" of FILE: all its lines, and those that
                                       contain NEEDLE
"""

import argparse
import collections
import http.client
import json
import math
import os
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import silent_endpoint_helper as seh  # noqa: E402  the relay's connection code and its SILENT flag


def relay(host, port, backend_port):
    backend_port = int(backend_port)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen(1024)
    accepted = [0, 0]  # before the silence, after it (held)

    def stop(*_):
        print(f"accepted {accepted[0]} before the silence, {accepted[1]} after (held)", flush=True)
        os._exit(0)

    signal.signal(signal.SIGUSR1, lambda *a: seh.SILENT.set())
    signal.signal(signal.SIGTERM, stop)
    print(f"relaying {host}:{port} -> 127.0.0.1:{backend_port}", flush=True)
    while True:
        client, _ = listener.accept()
        if seh.SILENT.is_set():
            accepted[1] += 1
            seh.HELD.append(client)
            continue
        accepted[0] += 1
        threading.Thread(target=seh.connect, args=(client, backend_port), daemon=True).start()


def get_once(host, port, path, ctx, timeout):
    """One GET on its own TLS connection: (status, cause of a failure)."""
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        if r.status == 200:
            return 200, ""
        try:
            why = json.loads(body).get("message", "")
        except ValueError:
            why = body.decode(errors="replace").strip()
        return r.status, f"{r.status} {why[:120]}"
    except (OSError, http.client.HTTPException) as e:
        kind = "no answer within the client timeout" if isinstance(e, TimeoutError) else type(e).__name__
        return 0, kind
    finally:
        conn.close()


def load(a):
    u = urllib.parse.urlsplit(a.url)
    ctx = ssl.create_default_context(cafile=a.ca)
    ctx.load_cert_chain(a.cert, a.key)
    n = int(a.rate * a.secs)
    results, threads = [], []

    def one(at):
        begun = time.monotonic()
        status, why = get_once(u.hostname, u.port, a.path, ctx, a.timeout)
        results.append((at, status, min(time.monotonic() - begun, a.timeout), why))

    start = time.monotonic()
    silenced = None
    for i in range(n):
        tick = start + i / a.rate
        time.sleep(max(0.0, tick - time.monotonic()))
        if silenced is None and time.monotonic() - start >= a.silence_at:
            os.kill(a.relay_pid, signal.SIGUSR1)
            silenced = time.monotonic() - start
        t = threading.Thread(target=one, args=(time.monotonic() - start,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(a.timeout + 10)
    if a.detail:
        with open(a.detail, "w") as f:
            for at, status, took_s, why in sorted(results):
                f.write(f"{at:.3f}\t{status}\t{took_s:.3f}\t{why}\n")
    took = sorted(r[2] for r in results)
    lost = [r for r in results if r[1] != 200]
    causes = collections.Counter(r[3] for r in lost)
    after = [r for r in results if silenced is not None and r[0] >= silenced]
    print(json.dumps({
        "requests": n,
        "answered": len(results),
        "ok": len(results) - len(lost),
        "lost": n - len(results) + len(lost),
        "worst_s": round(took[-1], 3) if took else None,
        "p99_s": round(took[max(0, math.ceil(0.99 * len(took)) - 1)], 3) if took else None,
        "silenced_at_s": None if silenced is None else round(silenced, 3),
        "sent_after_silence": len(after),
        "over_1s_after_silence": sum(1 for r in after if r[2] > 1.0),
        "lost_by": dict(causes.most_common()),
    }))


def lines(path, needle):
    total = match = 0
    with open(path, errors="replace") as f:
        for line in f:
            total += 1
            match += needle in line
    print(total, match)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "relay":
        relay(*args)
    elif cmd == "load":
        ap = argparse.ArgumentParser()
        for k in ("--url", "--path", "--ca", "--cert", "--key"):
            ap.add_argument(k, required=True)
        for k in ("--rate", "--secs", "--silence-at", "--timeout"):
            ap.add_argument(k, type=float, required=True)
        ap.add_argument("--relay-pid", type=int, required=True)
        ap.add_argument("--detail")
        load(ap.parse_args(args))
    elif cmd == "lines":
        lines(*args)
    else:
        sys.exit(f"unknown subcommand {cmd!r}")


if __name__ == "__main__":
    main()
