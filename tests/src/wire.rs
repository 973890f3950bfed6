//! Wire-level helpers: an HTTP/1.1 backend that records the exact bytes it receives and every
//! request it parses, and an HTTP/2 client over TLS that frames bodies itself (the `h2` crate).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request the raw backend parsed.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The request target.
    pub path: String,
    /// The `x-test-id` header.
    pub id: Option<String>,
    /// The `x-remote-user` header (`system:kube-aggregator` for apiagg's controllers).
    pub user: Option<String>,
    /// The body, unframed.
    pub body: Vec<u8>,
    /// Which connection it came on (accept order).
    pub connection: usize,
    /// Every header as received, names in lower case.
    pub headers: Vec<(String, String)>,
}

impl Seen {
    /// The values of header `name` (lower case) as received.
    pub fn header(&self, name: &str) -> Vec<&str> {
        let values = self.headers.iter().filter(|(n, _)| n == name);
        values.map(|(_, v)| v.as_str()).collect()
    }
}

#[derive(Default)]
struct Log {
    requests: Vec<Seen>,
    /// Bytes that did not parse as a request where one had to start.
    strays: Vec<String>,
    /// Every byte received, per connection.
    raw: Vec<Vec<u8>>,
    /// Informational heads sent to `/endless-1xx` requests, and how many such connections
    /// the peer closed.
    informational: (usize, usize),
}

/// An HTTP/1.1 backend on loopback (keep-alive, `Content-Length` and chunked request bodies)
/// that answers `GET <gv>` with an empty APIResourceList (so its APIService is available),
/// paths ending in `/smuggle` and `/two-lengths` with broken framing (see `misbehaving`),
/// `/endless-1xx` with a `102 Processing` head every 100 ms until the peer closes, `…/busy`
/// with the 429 of [`BUSY_LIST`], and
/// every other request with `<x-test-id> <method> <path> <body>`. Bytes that do not parse as a
/// request are recorded as strays and answered `400` + close, as a Go server does.
pub struct RawBackend {
    /// Its loopback port.
    pub port: u16,
    log: Arc<Mutex<Log>>,
}

impl RawBackend {
    /// Starts the backend; `gv` is its `/apis/<group>/<version>` path.
    pub async fn start(gv: &'static str) -> RawBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let log = Arc::new(Mutex::new(Log::default()));
        let shared = log.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let connection = {
                    let mut log = shared.lock().expect("log");
                    log.raw.push(Vec::new());
                    log.raw.len() - 1
                };
                let conn = Conn {
                    socket,
                    buf: Vec::new(),
                    log: shared.clone(),
                    connection,
                };
                tokio::spawn(conn.serve(gv));
            }
        });
        RawBackend { port, log }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests parsed so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.log.lock().expect("log").requests.clone()
    }

    /// The requests carrying `x-test-id: id`.
    pub fn with_id(&self, id: &str) -> Vec<Seen> {
        let log = self.log.lock().expect("log");
        let seen = log.requests.iter().filter(|s| s.id.as_deref() == Some(id));
        seen.cloned().collect()
    }

    /// Bytes that were not a request (a second chunked terminator, say).
    pub fn strays(&self) -> Vec<String> {
        self.log.lock().expect("log").strays.clone()
    }

    /// `(informational heads sent, connections closed by the peer meanwhile)` of the
    /// `/endless-1xx` requests.
    pub fn informational(&self) -> (usize, usize) {
        self.log.lock().expect("log").informational
    }

    /// How many connections were accepted.
    pub fn connections(&self) -> usize {
        self.log.lock().expect("log").raw.len()
    }

    /// Every byte received on all connections (lossy text).
    pub fn raw(&self) -> String {
        let log = self.log.lock().expect("log");
        let all: Vec<String> = log
            .raw
            .iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect();
        all.join("\n----\n")
    }
}

/// One accepted connection of the raw backend.
struct Conn {
    socket: TcpStream,
    buf: Vec<u8>,
    log: Arc<Mutex<Log>>,
    connection: usize,
}

impl Conn {
    /// Reads more bytes into the buffer; false at the end of the stream.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match self.socket.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                let mut log = self.log.lock().expect("log");
                log.raw[self.connection].extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Takes `n` bytes from the buffer, reading more as needed.
    async fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill().await {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// Takes one CRLF-terminated line (without the CRLF).
    async fn line(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf.drain(..i + 2).take(i).collect();
                return Some(line);
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    async fn serve(mut self, gv: &'static str) {
        loop {
            if self.buf.is_empty() && !self.fill().await {
                return;
            }
            // The head: method, path, x-test-id, framing.
            let parsed = loop {
                let mut headers = [httparse::EMPTY_HEADER; 64];
                let mut req = httparse::Request::new(&mut headers);
                match req.parse(&self.buf) {
                    Ok(httparse::Status::Complete(end)) => {
                        let header = |name: &str| {
                            req.headers
                                .iter()
                                .find(|h| h.name.eq_ignore_ascii_case(name))
                                .map(|h| String::from_utf8_lossy(h.value).into_owned())
                        };
                        let chunked = header("transfer-encoding")
                            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
                        let length: usize = header("content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        let all = req.headers.iter().map(|h| {
                            let value = String::from_utf8_lossy(h.value).into_owned();
                            (h.name.to_ascii_lowercase(), value)
                        });
                        let head = (
                            req.method.unwrap_or("").to_string(),
                            req.path.unwrap_or("").to_string(),
                            header("x-test-id"),
                            header("x-remote-user"),
                            (chunked, length),
                            all.collect::<Vec<_>>(),
                        );
                        self.buf.drain(..end);
                        break Some(head);
                    }
                    Ok(httparse::Status::Partial) => {
                        if !self.fill().await {
                            break None;
                        }
                    }
                    Err(_) => break None,
                }
            };
            let Some((method, path, id, user, (chunked, length), headers)) = parsed else {
                let stray = String::from_utf8_lossy(&self.buf).into_owned();
                self.log.lock().expect("log").strays.push(stray);
                let _ = self
                    .socket
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\nConnection: close\r\n\r\nstray")
                    .await;
                return;
            };
            let body = if chunked {
                self.chunked().await
            } else {
                self.take(length).await
            };
            let Some(body) = body else { return };
            let answer = if path == gv && method == "GET" {
                format!(
                    "{{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"{}\",\"resources\":[]}}",
                    gv.trim_start_matches("/apis/")
                )
            } else {
                let id = id.clone().unwrap_or_default();
                format!("{id} {method} {path} {}", String::from_utf8_lossy(&body))
            };
            let code = if path.starts_with("/openapi") {
                "404 Not Found"
            } else {
                "200 OK"
            };
            let endless = path.ends_with("/endless-1xx");
            let broken = misbehaving(&path);
            self.log.lock().expect("log").requests.push(Seen {
                method,
                path,
                id,
                user,
                body,
                connection: self.connection,
                headers,
            });
            if endless {
                // A compromised backend: informational heads without end, never a final one.
                while self
                    .socket
                    .write_all(b"HTTP/1.1 102 Processing\r\n\r\n")
                    .await
                    .is_ok()
                {
                    self.log.lock().expect("log").informational.0 += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                self.log.lock().expect("log").informational.1 += 1;
                return;
            }
            let response = broken.unwrap_or_else(|| {
                format!(
                    "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                )
            });
            if self.socket.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    /// A chunked body (trailers skipped); `None` when the connection ends or it is malformed.
    async fn chunked(&mut self) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.line().await?;
            let size = String::from_utf8_lossy(&line);
            let size = size.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16).ok()?;
            if size == 0 {
                while !self.line().await?.is_empty() {}
                return Some(body);
            }
            body.extend(self.take(size).await?);
            if self.take(2).await? != b"\r\n" {
                return None;
            }
        }
    }
}

/// The body of the raw backend's 429 to `GET …/busy` (a LIST the watch cache could not
/// serve, kubernetes#138701), with `Retry-After: 7`.
pub const BUSY_LIST: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":7},"code":429}"#;

/// The answers of a backend that breaks HTTP/1.1 framing, for requests whose path ends so:
/// `/smuggle` answers twice (a second answer nobody asked for follows the first),
/// `/two-lengths` sends two different `Content-Length`s.
fn misbehaving(path: &str) -> Option<String> {
    if path.split('?').next().is_some_and(|p| p.ends_with("/busy")) {
        // A consistent LIST the watch cache could not serve (kubernetes#138701).
        let body = BUSY_LIST;
        return Some(format!(
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 7\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    }
    if path.ends_with("/smuggle") {
        let smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled";
        return Some(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst{smuggled}"
        ));
    }
    if path.ends_with("/two-lengths") {
        let head = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 8\r\n\r\n";
        return Some(format!("{head}smuggled"));
    }
    None
}

/// An HTTP/2 connection over TLS to `127.0.0.1:port`, trusting `ca_pem`.
pub async fn h2_connect(port: u16, ca_pem: &str) -> h2::client::SendRequest<Bytes> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA PEM");
    roots.add(ca).expect("CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    let (send, connection) = h2::client::handshake(tls).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    send
}

/// Sends one request on `h2`: `headers`, then `body` in one DATA frame (when not empty), then
/// an empty DATA frame with END_STREAM (what `curl -T -` sends). Returns the status code and
/// body, or the error (a reset stream).
pub async fn h2_request(
    h2: &h2::client::SendRequest<Bytes>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String), h2::Error> {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(format!("https://127.0.0.1{path}"));
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(()).expect("request");
    let mut send = h2.clone().ready().await?;
    let (response, mut stream) = send.send_request(request, false)?;
    // A server may answer (and close the stream) on the headers alone, before the body is sent:
    // then sending fails (`InactiveStreamId`) while the answer is there to read. What counts is
    // the answer, or the reset that replaced it.
    let mut sent = Ok(());
    if !body.is_empty() {
        sent = stream.send_data(Bytes::copy_from_slice(body), false);
    }
    if sent.is_ok() {
        let _ = stream.send_data(Bytes::new(), true);
    }
    let response = response.await?;
    let code = response.status().as_u16();
    let mut received = response.into_body();
    let mut text = Vec::new();
    while let Some(data) = received.data().await {
        let data = data?;
        let _ = received.flow_control().release_capacity(data.len());
        text.extend_from_slice(&data);
    }
    Ok((code, String::from_utf8_lossy(&text).into_owned()))
}

/// Starts apiagg serving TLS (HTTP/1.1 and HTTP/2) with a certificate for 127.0.0.1 from a fresh
/// CA, with `config` after the `tls:` line; waits until `/readyz` answers. Returns it and the
/// CA's PEM.
pub async fn tls_apiagg(config: &str) -> (crate::Apiagg, String) {
    tls_apiagg_with(config, &[]).await
}

/// [`tls_apiagg`] with extra command-line arguments.
pub async fn tls_apiagg_with(config: &str, extra: &[&str]) -> (crate::Apiagg, String) {
    let served = crate::served_tls::ServedTls::start(config, |dir, config| {
        crate::Apiagg::start_in(dir, config, extra, &[])
    });
    served.wait_ready(&https_client(&served.ca.cert_pem)).await;
    (served.gw, served.ca.cert_pem)
}

/// An HTTP/1.1 client trusting `ca_pem`.
pub fn https_client(ca_pem: &str) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA PEM");
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .http1_only()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("client")
}

/// Sends `bytes` over a fresh TLS connection (HTTP/1.1) and returns the status code of the
/// answer (0 when it closed without one) and the answer's head and body as far as read: up to
/// the end of the body when it has a `Content-Length`, else until the connection closes.
pub async fn raw_tls(port: u16, ca_pem: &str, bytes: &[u8]) -> (u16, String) {
    let mut tls = tls_connect(port, ca_pem).await;
    let _ = tls.write_all(bytes).await;
    status_of(&read_answer(&mut tls, Vec::new()).await)
}

/// Sends `head` (which asks `Expect: 100-continue`) over a fresh TLS connection, reads the
/// interim answer, only then sends `body`, and returns the interim head and the final answer
/// (as [`raw_tls`]).
pub async fn raw_tls_continue(
    port: u16,
    ca_pem: &str,
    head: &[u8],
    body: &[u8],
) -> (String, (u16, String)) {
    let mut tls = tls_connect(port, ca_pem).await;
    let _ = tls.write_all(head).await;
    let mut read = Vec::new();
    let mut chunk = [0u8; 4096];
    let interim_end = loop {
        if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match tls.read(&mut chunk).await {
            Ok(0) | Err(_) => return (String::new(), status_of(&read)),
            Ok(n) => read.extend_from_slice(&chunk[..n]),
        }
    };
    let rest = read.split_off(interim_end);
    let interim = String::from_utf8_lossy(&read).into_owned();
    let _ = tls.write_all(body).await;
    (interim, status_of(&read_answer(&mut tls, rest).await))
}

/// Sends `head` (a request announcing a body of `length` bytes) over a fresh TLS connection,
/// then its body one byte every `every` until an answer arrives or the body is sent: the
/// status code and the answer, and how long after the head it came.
pub async fn trickle_tls(
    port: u16,
    ca_pem: &str,
    head: &str,
    length: usize,
    every: std::time::Duration,
) -> (u16, String, std::time::Duration) {
    let tls = tls_connect(port, ca_pem).await;
    let (mut reader, mut writer) = tokio::io::split(tls);
    writer.write_all(head.as_bytes()).await.expect("head");
    let started = std::time::Instant::now();
    let trickle = async move {
        for _ in 0..length {
            // The pace is the attack: a byte well within each read's timeout.
            tokio::time::sleep(every).await;
            if writer.write_all(b"x").await.is_err() {
                break;
            }
        }
        std::future::pending::<()>().await;
    };
    let answer = async {
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => return answer,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
            let text = String::from_utf8_lossy(&answer);
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .to_ascii_lowercase()
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:").map(str::trim))
                    .and_then(|v| v.parse::<usize>().ok());
                if length.is_some_and(|l| answer.len() >= end + 4 + l) {
                    return answer;
                }
            }
        }
    };
    let answer = tokio::select! {
        answer = answer => answer,
        () = trickle => Vec::new(),
    };
    let (code, text) = status_of(&answer);
    (code, text, started.elapsed())
}

/// A TLS connection to `127.0.0.1:port`, trusting `ca_pem`.
async fn tls_connect(port: u16, ca_pem: &str) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA PEM");
    roots.add(ca).expect("CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake")
}

/// Reads an answer after `answer` (what was read of it already): up to the end of its body when
/// it has a `Content-Length`, else until the connection closes.
async fn read_answer(
    tls: &mut tokio_rustls::client::TlsStream<TcpStream>,
    mut answer: Vec<u8>,
) -> Vec<u8> {
    let mut chunk = [0u8; 4096];
    loop {
        let complete = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .and_then(|end| {
                let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())?;
                Some(answer.len() >= end + 4 + length)
            });
        if complete == Some(true) {
            return answer;
        }
        match tls.read(&mut chunk).await {
            Ok(0) | Err(_) => return answer,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The status code of a raw HTTP/1.1 answer (0 when there is none) and the answer as text.
pub fn status_of(answer: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(answer).into_owned();
    let code = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}
