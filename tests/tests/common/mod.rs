//! Shared harness of the end-to-end tests: starts the real `apiagg` and `sample-apiserver`
//! binaries on loopback and waits for them.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;

/// The fixture folder (`APIAGG_FIXTURES`, default `../shared/fixtures` beside the checkout).
pub fn fixtures() -> PathBuf {
    let path = std::env::var_os("APIAGG_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
        PathBuf::from,
    );
    assert!(
        path.is_dir(),
        "fixtures not found at {} (set APIAGG_FIXTURES)",
        path.display()
    );
    path
}

/// Path of a workspace binary. `cargo test --workspace` builds every binary first; when one is
/// missing (a single package was tested) it is built once.
pub fn binary(name: &str, package: &str) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile> folder")
        .to_path_buf();
    let path = dir.join(name);
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--bins", "-p", package])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p {package} failed");
    }
    assert!(path.exists(), "binary {} missing", path.display());
    path
}

/// A loopback port held for a server the test starts (or restarts) later: a socket bound with
/// `SO_REUSEPORT` and never listening, so it takes no connection, nobody else can take the port,
/// and a server that binds with `SO_REUSEPORT` (sample-apiserver does) joins it.
pub struct PortHold {
    _socket: socket2::Socket,
    /// The port.
    pub port: u16,
}

/// Holds a free loopback port until the returned value drops.
pub fn hold_port() -> PortHold {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_reuse_port(true).expect("SO_REUSEPORT");
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().expect("addr");
    socket.bind(&addr.into()).expect("bind a loopback port");
    let port = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map(|a| a.port())
        .expect("bound port");
    PortHold {
        _socket: socket,
        port,
    }
}

/// A child process that is killed when dropped.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    /// Sends a signal (`TERM`, `HUP`, `KILL`).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the exit code, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running sample extension API server.
pub struct Sample {
    pub proc: Proc,
    /// `http://127.0.0.1:PORT` or `https://…`.
    pub url: String,
    pub port: u16,
    pub cert_dir: Option<tempfile::TempDir>,
}

impl Sample {
    /// Starts `sample-apiserver` with `args` (plus `--tls --cert-dir` when `tls`).
    pub fn start(args: &[&str], tls: bool) -> Sample {
        let cert_dir = tls.then(|| tempfile::tempdir().expect("tempdir"));
        let mut cmd = Command::new(binary("sample-apiserver", "apiagg-tests"));
        cmd.args(args);
        if !args.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        if let Some(dir) = &cert_dir {
            cmd.arg("--tls").arg("--cert-dir").arg(dir.path());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn sample-apiserver");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port in url");
        Sample {
            proc: Proc { child },
            url,
            port,
            cert_dir,
        }
    }

    /// How many requests for `path` this backend has served (its `/debug/requests` log).
    pub async fn requests(&self, path: &str) -> u64 {
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .expect("client");
        let log: serde_json::Value = client
            .get(format!("{}/debug/requests", self.url))
            .send()
            .await
            .expect("GET /debug/requests")
            .json()
            .await
            .expect("request log JSON");
        log[path].as_u64().unwrap_or(0)
    }

    /// Waits until this backend has served `path` at least `count` times (at most `limit`).
    pub async fn wait_requests(&self, path: &str, count: u64, limit: Duration) {
        let reached = eventually(limit, || async { self.requests(path).await >= count }).await;
        let seen = self.requests(path).await;
        assert!(
            reached,
            "{path} was asked {seen} times, not {count}, within {limit:?}"
        );
    }

    /// `ca.crt` of a TLS sample, base64 for an APIService `caBundle`.
    pub fn ca_bundle(&self) -> String {
        let dir = self.cert_dir.as_ref().expect("a TLS sample");
        let pem = std::fs::read(dir.path().join("ca.crt")).expect("ca.crt");
        base64::engine::general_purpose::STANDARD.encode(pem)
    }
}

/// The delegate of most tests: a sample-apiserver named `delegate` serving the kube-apiserver
/// discovery fixtures (`apps/v1` deployments as its own resource), with `openapi` the
/// kube-apiserver 1.32 OpenAPI v2 and v3 documents too; `extra` adds arguments (`--listen`).
pub fn kube_delegate(openapi: bool, extra: &[&str]) -> Sample {
    let kube = fixtures().join("kubernetes");
    let path = |p: &str| kube.join(p).to_str().expect("utf8 path").to_string();
    let mut args: Vec<String> = vec!["--fixtures".into(), path("discovery")];
    if openapi {
        args.extend([
            "--openapi-v2".into(),
            path("openapi-v2/swagger-v1.32.json"),
            "--openapi-v3-dir".into(),
            path("openapi-v3"),
        ]);
    }
    for arg in [
        "--group",
        "apps",
        "--version",
        "v1",
        "--resource",
        "deployments",
        "--kind",
        "Deployment",
        "--name",
        "delegate",
    ] {
        args.push(arg.into());
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Sample::start(&args, false)
}

/// One APIService manifest line for a config.
pub fn apiservice(group: &str, version: &str, service: &str, tls: &str) -> String {
    format!(
        "  - apiVersion: apiregistration.k8s.io/v1\n    kind: APIService\n    metadata: {{name: {version}.{group}}}\n    spec: {{group: {group}, version: {version}, groupPriorityMinimum: 1000, versionPriority: 15, service: {{namespace: test, name: {service}, port: 443}}{tls}}}\n"
    )
}

/// One `services` entry.
pub fn service(name: &str, url: &str) -> String {
    format!("  - {{namespace: test, name: {name}, port: 443, endpoints: [\"{url}\"]}}\n")
}

/// A running apiagg.
pub struct Apiagg {
    pub proc: Proc,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Apiagg {
    /// Writes `config` and starts `apiagg serve` on a port it picks itself (`--listen
    /// 127.0.0.1:0`, unless `extra` has `--listen`), read from its first stdout line.
    pub fn start(config: &str, extra: &[&str]) -> Apiagg {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("apiagg.yaml"), config).expect("write config");
        let mut cmd = Command::new(binary("apiagg", "apiagg-gateway"));
        cmd.arg("serve")
            .arg("--config")
            .arg(dir.path().join("apiagg.yaml"))
            .args(["--reload-interval", "200ms", "--threads", "2"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child = cmd.spawn().expect("spawn apiagg");
        let stdout = child.stdout.take().expect("stdout");
        let mut proc = Proc { child };
        let (tls, port) = match listening_port(stdout) {
            Some(found) => found,
            None => {
                let status = proc.wait_exit(Duration::from_secs(5));
                panic!("apiagg did not say where it listens (exit status {status:?})");
            }
        };
        let mut gw = Apiagg { proc, port, dir };
        gw.wait_listening(tls);
        gw
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Rewrites the config file (hot reload).
    pub fn write_config(&self, config: &str) {
        let path = self.dir.path().join("apiagg.yaml");
        let tmp = self.dir.path().join("apiagg.yaml.tmp");
        std::fs::write(&tmp, config).expect("write config");
        std::fs::rename(&tmp, &path).expect("replace config");
    }

    /// Waits until our apiagg answers `/livez` on its port (over TLS: accepts connections): the
    /// process must still run (a crashed one fails at once with its exit status), and the port
    /// it chose is held by it alone.
    fn wait_listening(&mut self, tls: bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.proc.child.try_wait() {
                panic!("apiagg exited before listening: {status}");
            }
            let up = if tls {
                std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            } else {
                livez(self.port)
            };
            if up {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("apiagg did not answer /livez on {} within 20 s", self.port);
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self) {
        let client = client();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(r) = client.get(self.url("/readyz")).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("apiagg never became ready");
    }
}

/// Whether it serves TLS, and the port, from a `listening on http(s)://ADDR:PORT` first line;
/// `None` if the process closed its stdout first.
fn listening_port(stdout: std::process::ChildStdout) -> Option<(bool, u16)> {
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).ok()?;
    let url = line.trim().strip_prefix("listening on ")?;
    let port = url.rsplit(':').next()?.parse().ok()?;
    Some((url.starts_with("https://"), port))
}

/// Whether something answers `GET /livez` with 200 on a loopback port (a blocking check).
fn livez(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = "GET /livez HTTP/1.1\r\nHost: apiagg\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// An HTTP client for the tests.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// Polls `f` until it returns true or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The status code of a GET (0 when the request fails).
pub async fn status_code(url: &str) -> u16 {
    client()
        .get(url)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// A backend that answers every connection with the same bytes, whatever it is asked.
pub async fn fixed_server(response: &'static [u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(response).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    port
}

/// The kubectl 1.27 binary (it asks only for v2beta1 discovery and protobuf OpenAPI v2).
pub const KUBECTL_127_BIN: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.27";

/// Runs kubectl against a gateway on loopback with a fresh cache dir (so kubectl's disk cache
/// never answers for the server); returns success, stdout and stderr.
pub fn kubectl(binary: &str, port: u16, args: &[&str]) -> (bool, String, String) {
    let cache = tempfile::tempdir().expect("cache dir");
    let out = Command::new(binary)
        .args(["--server", &format!("http://127.0.0.1:{port}")])
        .arg("--cache-dir")
        .arg(cache.path())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {binary}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}
