//! Child processes: finding the workspace binaries, reading where a server listens, killing it
//! when the test ends, and holding loopback ports for servers started later.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command};
use std::sync::OnceLock;
use std::time::Duration;

use crate::wait_until_blocking;

/// Path of a workspace binary in the test's own `target/<profile>` folder, brought up to date
/// by `cargo build` the first time this process asks for it (a single suite run after an edit
/// of the gateway tests the edited gateway).
pub fn binary(name: &str, package: &str) -> PathBuf {
    // Built once per test process (see `build_binaries`); cargo does nothing when they are up
    // to date. A failed build is remembered too: every later test fails at once with the same
    // message instead of compiling again (a full disk once made each test retry for minutes).
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile> folder")
        .to_path_buf();
    let path = dir.join(name);
    if let Err(e) = BUILT.get_or_init(build_binaries) {
        panic!("{e} (building {package})");
    }
    assert!(path.exists(), "binary {} missing", path.display());
    path
}

/// `cargo build --bins` of the gateway and the test servers, in this test's profile. A debug
/// build asks for what `cargo test --workspace` builds (every package's bins and tests, so the
/// same features): after it, this build finds everything up to date instead of compiling the
/// workspace a second time with other features. A release build (the instruction budget) asks
/// for exactly what the Makefile builds.
fn build_binaries() -> Result<(), String> {
    let selection: &[&str] = if cfg!(debug_assertions) {
        &["--workspace", "--tests"]
    } else {
        &["--release", "-p", "apiagg-gateway", "-p", "apiagg-tests"]
    };
    let mut cargo = Command::new(env!("CARGO"));
    // The variables cargo sets for this test process, removed so that the build sees the
    // environment of a plain `cargo build`: build scripts that watch them (ring's) would
    // otherwise run again, here and in the developer's next build.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_for_tests = key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_BIN_EXE_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
            ]
            .contains(&&*key);
        if set_for_tests {
            cargo.env_remove(&*key);
        }
    }
    let status = cargo
        .args(["build", "--bins"])
        .args(selection)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .map_err(|e| format!("running cargo build: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "cargo build --bins of the workspace failed: {status}"
        ))
    }
}

/// Where a server said it listens: the first stdout line of `apiagg` and `sample-apiserver`,
/// `listening on http(s)://ADDR:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listening {
    /// `http://ADDR:PORT` or `https://ADDR:PORT`.
    pub url: String,
    /// The port.
    pub port: u16,
    /// Whether it serves TLS (`https://`).
    pub tls: bool,
}

impl Listening {
    /// Parses one `listening on URL` line; `None` for any other line.
    pub fn parse(line: &str) -> Option<Listening> {
        let url = line.trim().strip_prefix("listening on ")?;
        let port = url.rsplit(':').next()?.parse().ok()?;
        Some(Listening {
            url: url.to_string(),
            port,
            tls: url.starts_with("https://"),
        })
    }
}

/// Reads the first line of a server's stdout as its [`Listening`] line; `None` when the process
/// closed its stdout first or printed something else (the line is dropped with the reader, and
/// nothing else is ever read from that stdout).
pub fn read_listening(stdout: ChildStdout) -> Option<Listening> {
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).ok()?;
    Listening::parse(&line)
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
    /// The process.
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

    /// Waits until the process exits (the test fails when it still runs after `limit`); its
    /// exit code, `None` when a signal ended it.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let pid = self.child.id();
        let exited = wait_until_blocking(
            &format!("process {pid} to exit (Ok(None): still running)"),
            limit,
            || self.child.try_wait().map_err(|e| e.to_string()),
            |status| matches!(status, Ok(Some(_))),
        );
        exited.ok().flatten().and_then(|status| status.code())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::Listening;

    #[test]
    fn listening_lines_parse() {
        let plain = Listening::parse("listening on http://127.0.0.1:8443\n").expect("plain");
        assert_eq!(
            plain,
            Listening {
                url: "http://127.0.0.1:8443".into(),
                port: 8443,
                tls: false
            }
        );
        let tls = Listening::parse("listening on https://[::1]:443").expect("tls");
        assert_eq!((tls.port, tls.tls), (443, true));
        assert_eq!(Listening::parse("starting\n"), None);
        assert_eq!(Listening::parse("listening on http://127.0.0.1:x"), None);
    }
}
