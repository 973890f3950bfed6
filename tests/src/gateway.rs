//! The apiagg process under test.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{answer_code, binary, client, read_listening, wait_until, wait_until_blocking, Proc};

/// What tests of everything but access control run with: without an authorizer apiagg lets only
/// `system:masters` change APIServices and only `system:masters` / `system:monitoring` read
/// `/metrics` and `/debug`, while these tests call as `system:anonymous`. A config without
/// `authorization:` gets these two options first; access-control tests start apiagg with
/// `Apiagg::start_secure` (or an `authorization:` of their own) and run without them.
pub const OPEN_FOR_TESTS: &str =
    "authorization: {allowAnyoneToChangeAPIServices: true, allowAnyoneToReadMetrics: true}\n";

/// A running apiagg, killed when dropped.
pub struct Apiagg {
    /// The process.
    pub proc: Proc,
    /// The loopback port it listens on.
    pub port: u16,
    /// Its folder: `apiagg.yaml`, `apiagg.log` and whatever the test puts beside them.
    pub dir: tempfile::TempDir,
}

impl Apiagg {
    /// Writes `config` and starts `apiagg serve` on a port it picks itself (`--listen
    /// 127.0.0.1:0`, unless `extra` has `--listen`), read from its first stdout line.
    pub fn start(config: &str, extra: &[&str]) -> Apiagg {
        Self::start_in(tempfile::tempdir().expect("tempdir"), config, extra, &[])
    }

    /// [`Apiagg::start`] with `config` exactly as given: apiagg's secure defaults apply (see
    /// [`OPEN_FOR_TESTS`]).
    pub fn start_secure(config: &str, extra: &[&str]) -> Apiagg {
        Self::start_in_secure(tempfile::tempdir().expect("tempdir"), config, extra)
    }

    /// [`Apiagg::start_secure`] with the config in `dir` (beside files it names), logged.
    pub fn start_in_secure(dir: tempfile::TempDir, config: &str, extra: &[&str]) -> Apiagg {
        Self::spawn(dir, config, extra, &[], true, false)
    }

    /// [`Apiagg::start`] with the config in `dir` (beside files it names) and `env` set.
    pub fn start_in(
        dir: tempfile::TempDir,
        config: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Apiagg {
        Self::spawn(dir, config, extra, env, false, true)
    }

    /// [`Apiagg::start`] with its log written to `apiagg.log` in its folder (see
    /// [`Apiagg::log`]) instead of the test's stderr.
    pub fn start_logged(config: &str, extra: &[&str]) -> Apiagg {
        Self::spawn(
            tempfile::tempdir().expect("tempdir"),
            config,
            extra,
            &[],
            true,
            true,
        )
    }

    /// [`Apiagg::start_logged`] with the config in `dir`, under an open-file limit of
    /// `open_files` (soft and hard, set by `prlimit`, which apiagg cannot raise).
    pub fn start_with_open_files(
        dir: tempfile::TempDir,
        config: &str,
        extra: &[&str],
        open_files: u64,
    ) -> Apiagg {
        let limit = format!("--nofile={open_files}:{open_files}");
        Self::spawn_in(
            dir,
            config,
            extra,
            &[],
            (true, true),
            &["prlimit", &limit, "--"],
        )
    }

    /// The log so far of an apiagg started with [`Apiagg::start_logged`].
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("apiagg.log")).unwrap_or_default()
    }

    fn spawn(
        dir: tempfile::TempDir,
        config: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        logged: bool,
        open: bool,
    ) -> Apiagg {
        Self::spawn_in(dir, config, extra, env, (logged, open), &[])
    }

    /// Starts apiagg (through `wrapper`, a command that runs it, when not empty).
    fn spawn_in(
        dir: tempfile::TempDir,
        config: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        (logged, open): (bool, bool),
        wrapper: &[&str],
    ) -> Apiagg {
        let config = if open && !config.contains("authorization:") {
            format!("{OPEN_FOR_TESTS}{config}")
        } else {
            config.to_string()
        };
        std::fs::write(dir.path().join("apiagg.yaml"), config).expect("write config");
        let apiagg = binary("apiagg", "apiagg-gateway");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(&apiagg);
                cmd
            }
            None => Command::new(&apiagg),
        };
        cmd.arg("serve")
            .arg("--config")
            .arg(dir.path().join("apiagg.yaml"))
            .args(["--reload-interval", "200ms", "--threads", "2"])
            .args(extra)
            // APIAGG_TEST_LOG (say `debug`) raises the level when a test is being debugged.
            .env(
                "RUST_LOG",
                std::env::var("APIAGG_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::piped());
        if logged {
            let log = std::fs::File::create(dir.path().join("apiagg.log")).expect("log file");
            cmd.stderr(log).env("NO_COLOR", "1");
        } else {
            cmd.stderr(Stdio::inherit());
        }
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child = cmd.spawn().expect("spawn apiagg");
        let stdout = child.stdout.take().expect("stdout");
        let mut proc = Proc { child };
        let (tls, port) = match read_listening(stdout) {
            Some(listening) => (listening.tls, listening.port),
            None => {
                eprintln!("apiagg did not say where it listens: waiting for its exit status");
                let status = proc.wait_exit(Duration::from_secs(5));
                panic!("apiagg did not say where it listens (exit status {status:?})");
            }
        };
        let mut gw = Apiagg { proc, port, dir };
        gw.wait_listening(tls);
        gw
    }

    /// `http://127.0.0.1:PORT` + `path`.
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
        let port = self.port;
        let child = &mut self.proc.child;
        wait_until_blocking(
            &format!("apiagg to answer /livez on port {port} (over TLS: to accept connections)"),
            Duration::from_secs(20),
            || {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("apiagg exited before listening: {status}");
                }
                if tls {
                    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                } else {
                    livez(port)
                }
            },
            |up| *up,
        );
    }

    /// The value of one series of `/metrics` (`name` or `name{labels}` exactly as exposed);
    /// `None` when it is not there.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        metric_at(&client(), &self.url("/metrics"), series).await
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self) {
        let client = client();
        wait_until(
            "apiagg to answer /readyz with 200",
            Duration::from_secs(20),
            || answer_code(client.get(self.url("/readyz"))),
            |code| *code == 200,
        )
        .await;
    }
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

/// The value of one series (`name` or `name{labels}` exactly as exposed) of the `/metrics` at
/// `url`, read with `client` (a TLS or HTTP/2 one); `None` when it is not there.
pub async fn metric_at(client: &reqwest::Client, url: &str, series: &str) -> Option<f64> {
    let text = client.get(url).send().await.ok()?.text().await.ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix(series))
        .find_map(|rest| rest.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The value of the first sample of `family` at the `/metrics` of `url`, read with `client`,
/// whose labels include every one of `labels` (`name="value"` each), whatever their order.
pub async fn metric_labelled(
    client: &reqwest::Client,
    url: &str,
    family: &str,
    labels: &[&str],
) -> Option<f64> {
    let text = client.get(url).send().await.ok()?.text().await.ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix(family)?.strip_prefix('{'))
        .filter_map(|rest| rest.split_once("} "))
        .find(|(set, _)| labels.iter().all(|l| set.split(',').any(|p| p == *l)))
        .and_then(|(_, value)| value.trim().parse().ok())
}
