//! Shared harness of the end-to-end tests: starts the real `apiagg` and `sample-apiserver`
//! binaries on loopback and waits for them.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
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

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
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

    /// `ca.crt` of a TLS sample, base64 for an APIService `caBundle`.
    pub fn ca_bundle(&self) -> String {
        let dir = self.cert_dir.as_ref().expect("a TLS sample");
        let pem = std::fs::read(dir.path().join("ca.crt")).expect("ca.crt");
        base64::engine::general_purpose::STANDARD.encode(pem)
    }
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
    /// Writes `config` and starts `apiagg serve` on a free port.
    pub fn start(config: &str, extra: &[&str]) -> Apiagg {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("apiagg.yaml"), config).expect("write config");
        let port = free_port();
        let mut cmd = Command::new(binary("apiagg", "apiagg-gateway"));
        cmd.arg("serve")
            .arg("--config")
            .arg(dir.path().join("apiagg.yaml"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(["--reload-interval", "200ms", "--threads", "2"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = cmd.spawn().expect("spawn apiagg");
        let gw = Apiagg {
            proc: Proc { child },
            port,
            dir,
        };
        gw.wait_listening();
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

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("apiagg did not listen on {}", self.port);
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
