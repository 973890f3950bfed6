//! Shared harness of the end-to-end tests: starts the real `apiagg` and `sample-apiserver`
//! binaries on loopback and waits for them.

// Every test file includes this module and uses a different part of it.
#![allow(dead_code, unused_imports)]

pub mod api;
pub mod audit;
mod backends;
mod gateway;
pub mod openapi;
pub mod pki;
pub mod trust;
pub mod wire;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use backends::*;
pub use gateway::*;

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
        let profile: &[&str] = if cfg!(debug_assertions) {
            &[]
        } else {
            &["--release"]
        };
        let status = Command::new(env!("CARGO"))
            .args(["build", "--bins", "-p", package])
            .args(profile)
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

/// The body of a GET as text (the test fails when the request does).
pub async fn get_text(url: &str) -> String {
    let response = client().get(url).send().await;
    let response = response.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    response.text().await.expect("body")
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

/// The kubectl 1.32 binary itself (`kubectl` on the PATH picks one by the server's version).
pub const KUBECTL_132_BIN: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32";

/// The kubectl 1.27 binary (it asks only for v2beta1 discovery and protobuf OpenAPI v2).
pub const KUBECTL_127_BIN: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.27";

/// Runs a kubectl command with `args` and a fresh cache dir (so kubectl's disk cache never
/// answers for the server); returns success, stdout and stderr.
pub fn kubectl_output(mut command: Command, args: &[&str]) -> (bool, String, String) {
    let cache = tempfile::tempdir().expect("cache dir");
    let out = command
        .arg("--cache-dir")
        .arg(cache.path())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run kubectl: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// [`kubectl_output`] that must succeed; returns stdout.
pub fn kubectl_ok(command: Command, args: &[&str]) -> String {
    let (ok, stdout, stderr) = kubectl_output(command, args);
    assert!(ok, "kubectl {args:?}: {stderr}\n{stdout}");
    stdout
}

/// Runs kubectl against a gateway on loopback; returns success, stdout and stderr.
pub fn kubectl(binary: &str, port: u16, args: &[&str]) -> (bool, String, String) {
    let mut command = Command::new(binary);
    command.args(["--server", &format!("http://127.0.0.1:{port}")]);
    kubectl_output(command, args)
}

/// The body of a response as JSON (the text in the panic when it is not).
pub async fn json_of(r: reqwest::Response) -> serde_json::Value {
    let text = r.text().await.expect("body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}
