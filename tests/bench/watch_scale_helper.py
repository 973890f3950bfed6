#!/usr/bin/env python3
"""Helpers for watch-scale.sh (Python 3 standard library; `--client h2` also needs the `h2`
package from PyPI, which watch-scale.sh installs).

Subcommands:
  config DIR PORT BACKEND_URL [CA_FILE [CERT_FILE KEY_FILE]]
      write DIR/apiagg.yaml: one Service `test/wardle` at BACKEND_URL and the APIService
      v1alpha1.wardle.example.com on it (verified against CA_FILE when the backend is https);
      with CERT_FILE and KEY_FILE apiagg serves TLS (HTTP/2 offered in ALPN) with that pair
  wait-ready URL SECONDS [CA_FILE]
      poll URL until it answers 200 (an https URL is verified against CA_FILE)
  run --host H --port P --pid PID --n N --backend-port BP [--sample 100] [--batch 250]
      [--create-port CP] [--client h1|h2 --ca CA_FILE --streams-per-conn 100]
      open N watches (`GET …/flunders?watch=true`, kept open) through apiagg at H:P, measure the
      RSS of PID before, with them open, and after one event reached them all; create one object
      (POST through apiagg, or to port CP with --create-port CP) and check that SAMPLE watchers
      spread over the N receive its ADDED event. `--client h1` (the default): raw HTTP/1.1 over
      plain TCP, one connection per watch. `--client h2`: HTTP/2 over TLS (verified against
      CA_FILE), each watch a stream, up to --streams-per-conn streams on one connection (fewer
      when the server's SETTINGS_MAX_CONCURRENT_STREAMS is lower), as client-go holds them.
      Prints one `RESULT key=value …` line; exit status 1 when a watch failed to open or a
      sampled watcher missed the event.
"""

import argparse
import asyncio
import base64
import json
import os
import resource
import ssl
import sys
import time
import urllib.request

try:  # only `run --client h2` needs it
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions
except ImportError:
    h2 = None

PATH = "/apis/wardle.example.com/v1alpha1/flunders"
# The watch's query: a plain watch by default; WATCH_QUERY sets another (a streaming list:
# "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true").
QUERY = os.environ.get("WATCH_QUERY", "watch=true")
EVENT_TIMEOUT_S = 20
OPEN_TIMEOUT_S = 30


def config(d, port, backend_url, ca_file=None, cert_file=None, key_file=None):
    tls = ""
    if backend_url.startswith("https://"):
        with open(ca_file, "rb") as f:
            tls = f", caBundle: {base64.b64encode(f.read()).decode()}"
    serving = f"tls: {{certFile: {cert_file}, keyFile: {key_file}}}\n" if cert_file else ""
    with open(os.path.join(d, "apiagg.yaml"), "w") as f:
        f.write(
            f"listen: 127.0.0.1:{port}\n"
            f"{serving}"
            "services:\n"
            f'  - {{namespace: test, name: wardle, port: 443, endpoints: ["{backend_url}"]}}\n'
            "apiServices:\n"
            "  - apiVersion: apiregistration.k8s.io/v1\n"
            "    kind: APIService\n"
            "    metadata: {name: v1alpha1.wardle.example.com}\n"
            "    spec: {group: wardle.example.com, version: v1alpha1, groupPriorityMinimum: 1000,"
            f" versionPriority: 15, service: {{namespace: test, name: wardle, port: 443}}{tls}}}\n"
        )


def tls_context(ca_file, alpn=None):
    """A client context trusting CA_FILE only (None: no TLS)."""
    if not ca_file:
        return None
    ctx = ssl.create_default_context(cafile=ca_file)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


def wait_ready(url, seconds, ca_file=None):
    deadline = time.time() + float(seconds)
    ctx = tls_context(ca_file)
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
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


def count_error(errors, what):
    key = (f"{type(what).__name__}: {what}" if isinstance(what, BaseException) else what)[:120]
    errors[key] = errors.get(key, 0) + 1


class H1Watch:
    """A watch on a connection of its own: raw HTTP/1.1 over plain TCP."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.needle = b""

    @classmethod
    async def open(cls, host, port):
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
        return cls(r, w)

    def expect(self, needle):
        """Set before the event is created; what arrives first waits in the reader."""
        self.needle = needle

    async def got(self):
        """True once the expected bytes arrived; False when the watch ended or timed out."""
        seen = b""
        try:
            async with asyncio.timeout(EVENT_TIMEOUT_S):
                while self.needle not in seen:
                    chunk = await self.reader.read(65536)
                    if not chunk:
                        return False
                    seen = seen[-len(self.needle) :] + chunk
            return True
        except (TimeoutError, OSError):
            return False


class H2Watch:
    """A watch held as one stream of an `H2Client`'s connection."""

    def __init__(self):
        loop = asyncio.get_running_loop()
        self.head = loop.create_future()  # "200", another status, or why the stream ended
        self.found = loop.create_future()  # True: the expected bytes came; False: the stream ended
        self.needle, self.tail = None, b""

    def on_head(self, status):
        if not self.head.done():
            self.head.set_result(status)

    def on_data(self, data):
        if self.needle is None or self.found.done():
            return
        seen = self.tail + data
        if self.needle in seen:
            self.found.set_result(True)
        else:
            self.tail = seen[-len(self.needle) :]

    def on_end(self, why):
        self.on_head(f"stream ended before its response head ({why})")
        if not self.found.done():
            self.found.set_result(False)

    def expect(self, needle):
        """Set before the event is created: data is matched as it arrives, not kept."""
        self.needle = needle

    async def got(self):
        try:
            async with asyncio.timeout(EVENT_TIMEOUT_S):
                return await asyncio.shield(self.found)
        except TimeoutError:
            return False


class H2Client:
    """One TLS connection speaking HTTP/2 (the `h2` package): many watches, each a stream, as
    client-go holds them. One task reads the connection, hands flow-control window back for
    everything it reads and answers pings (`h2` queues the ACK itself)."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.streams = {}
        self.settings = asyncio.get_running_loop().create_future()  # the server's first SETTINGS
        self.reading = None

    @classmethod
    async def connect(cls, host, port, ctx):
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ctx), OPEN_TIMEOUT_S)
        alpn = w.get_extra_info("ssl_object").selected_alpn_protocol()
        if alpn != "h2":
            w.close()
            raise RuntimeError(f"the server chose ALPN {alpn!r}, not h2")
        client = cls(r, w)
        client.conn.initiate_connection()
        client.flush()
        client.reading = asyncio.create_task(client.read())
        await asyncio.wait_for(asyncio.shield(client.settings), OPEN_TIMEOUT_S)
        return client

    @property
    def max_streams(self):
        """The server's SETTINGS_MAX_CONCURRENT_STREAMS (2**32 + 1 when it sets none)."""
        return self.conn.remote_settings.max_concurrent_streams

    def open(self, authority):
        """Sends one watch's HEADERS (END_STREAM: no body); `flush` sends them on their way."""
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            stream_id,
            [
                (":method", "GET"),
                (":scheme", "https"),
                (":authority", authority),
                (":path", f"{PATH}?{QUERY}"),
                ("accept", "application/json"),
                ("user-agent", "watch-scale"),
            ],
            end_stream=True,
        )
        watch = self.streams[stream_id] = H2Watch()
        return watch

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.writer.write(data)

    async def read(self):
        why = "connection closed"
        try:
            while chunk := await self.reader.read(65536):
                for event in self.conn.receive_data(chunk):
                    self.on_event(event)
                self.flush()
        except (OSError, h2.exceptions.ProtocolError) as e:
            why = f"{type(e).__name__}: {e}"
        finally:
            if not self.settings.done():
                self.settings.set_exception(ConnectionError(f"no SETTINGS from the server: {why}"))
            for watch in self.streams.values():
                watch.on_end(why)

    def on_event(self, event):
        if isinstance(event, h2.events.RemoteSettingsChanged):
            if not self.settings.done():
                self.settings.set_result(None)
            return
        watch = self.streams.get(getattr(event, "stream_id", None))
        if watch is None:
            return
        if isinstance(event, h2.events.ResponseReceived):
            watch.on_head(dict(event.headers).get(":status", "no :status"))
        elif isinstance(event, h2.events.DataReceived):
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            watch.on_data(event.data)
        elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
            watch.on_end(type(event).__name__)

    def close(self):
        self.writer.close()
        if self.reading:
            self.reading.cancel()


async def open_h1(a, errors):
    """N watches, one plain TCP connection each, opened `--batch` at a time."""
    watches = []
    for i in range(0, a.n, a.batch):
        batch = [H1Watch.open(a.host, a.port) for _ in range(min(a.batch, a.n - i))]
        for res in await asyncio.gather(*batch, return_exceptions=True):
            if isinstance(res, BaseException):
                count_error(errors, res)
            else:
                watches.append(res)
    return watches, [w.writer for w in watches], {"client_conns": len(watches)}


async def open_h2(a, errors):
    """N watches as HTTP/2 streams: as many TLS connections as needed at `--streams-per-conn`
    streams each (fewer when the server allows fewer), streams opened about `--batch` at a time."""
    ctx = tls_context(a.ca, ["h2"])
    authority = f"{a.host}:{a.port}"
    first = await H2Client.connect(a.host, a.port, ctx)
    server_max = first.max_streams
    per = min(a.streams_per_conn, server_max)
    clients = [first]
    more = [H2Client.connect(a.host, a.port, ctx) for _ in range(-(-a.n // per) - 1)]
    for res in await asyncio.gather(*more, return_exceptions=True):
        if isinstance(res, BaseException):
            count_error(errors, res)
        else:
            clients.append(res)

    async def head(watch):
        try:
            return await asyncio.wait_for(asyncio.shield(watch.head), OPEN_TIMEOUT_S)
        except TimeoutError:
            return f"no response head within {OPEN_TIMEOUT_S} s"

    watches = []
    group = max(1, a.batch // per)
    for g in range(0, len(clients), group):
        opened = []
        for i, client in enumerate(clients[g : g + group], start=g):
            opened += [client.open(authority) for _ in range(min(per, a.n - i * per))]
            client.flush()
        for watch, status in zip(opened, await asyncio.gather(*map(head, opened))):
            if status == "200":
                watches.append(watch)
            else:
                count_error(errors, f"HTTP/2 stream: {status}")
    shown_max = "none" if server_max > 2**31 else server_max
    extra = {"client_conns": len(clients), "streams_per_conn": per, "server_max_streams": shown_max}
    return watches, clients, extra


def post(host, port, name, ctx=None):
    body = json.dumps({"metadata": {"name": name}}).encode()
    req = urllib.request.Request(
        f"{'https' if ctx else 'http'}://{host}:{port}{PATH}",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        r.read()
        return r.status


async def run(a):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sockets = a.n if a.client == "h1" else -(-a.n // a.streams_per_conn)
    if sockets + 100 > hard:
        sys.exit(f"this process may open {hard} files, not enough for {a.n} watches")
    if a.client == "h2" and h2 is None:
        sys.exit("--client h2 needs the h2 package (python3 -m pip install h2)")
    await asyncio.sleep(1)
    base = status_kib(a.pid, "VmRSS")
    base_fds = fd_count(a.pid)
    errors = {}
    t0 = time.time()
    opener = open_h2 if a.client == "h2" else open_h1
    watches, connections, extra = await opener(a, errors)
    open_s = time.time() - t0
    await asyncio.sleep(3)
    opened = status_kib(a.pid, "VmRSS")
    anon = status_kib(a.pid, "RssAnon")
    fds = fd_count(a.pid)
    backend_conns = connections_to(a.backend_port)

    # One event: every watcher gets it (apiagg forwards it on every stream); a sample proves it.
    name = f"scale-{int(time.time() * 1000)}"
    step = max(1, len(watches) // max(1, a.sample))
    sample = watches[::step][: a.sample]
    for watch in sample:
        watch.expect(name.encode())
    ctx = tls_context(a.ca) if a.create_port is None else None
    status = await asyncio.to_thread(post, a.host, a.create_port or a.port, name, ctx)
    got = await asyncio.gather(*[watch.got() for watch in sample])
    await asyncio.sleep(2)
    evented = status_kib(a.pid, "VmRSS")
    n = len(watches)
    per = (opened - base) / max(1, n)
    per_evented = (evented - base) / max(1, n)
    extra_kv = " ".join(f"{k}={v}" for k, v in extra.items())
    print(
        f"RESULT watches={a.n} open={n} open_s={open_s:.1f} rss_base_kib={base} "
        f"rss_open_kib={opened} rss_anon_open_kib={anon} rss_after_event_kib={evented} "
        f"kib_per_watch={per:.1f} kib_per_watch_after_event={per_evented:.1f} "
        f"fds={fds - base_fds} backend_conns={backend_conns} post_status={status} "
        f"sample_got_event={sum(got)}/{len(sample)} client={a.client} {extra_kv}",
        flush=True,
    )
    for err, count in errors.items():
        print(f"open failure x{count}: {err}", file=sys.stderr)
    for connection in connections:
        connection.close()
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
        ap.add_argument("--client", choices=("h1", "h2"), default="h1")
        # h2: apiagg serves TLS; its certificate is verified against this CA.
        ap.add_argument("--ca")
        ap.add_argument("--streams-per-conn", type=int, default=100)
        a = ap.parse_args(args)
        if a.client == "h2" and not a.ca:
            ap.error("--client h2 needs --ca")
        sys.exit(asyncio.run(run(a)))
    else:
        sys.exit(f"unknown subcommand {cmd}")


if __name__ == "__main__":
    main()
