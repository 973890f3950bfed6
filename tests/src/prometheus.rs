//! A real Prometheus (Debian's `prometheus` package) scraping apiagg, and its HTTP query API.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::process::Proc;

/// A running Prometheus on loopback, stopped when dropped.
pub struct Prometheus {
    /// Where its HTTP API listens.
    pub port: u16,
    _proc: Proc,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (`host:port`) every second as job `apiagg`, over
    /// plain HTTP (with `token` as its bearer token, if any), evaluating `rule_files` (absolute
    /// paths) every second.
    pub fn start(
        targets: &[String],
        token: Option<&str>,
        rule_files: &[std::path::PathBuf],
    ) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let rules: Vec<String> = rule_files
            .iter()
            .map(|r| format!("\"{}\"", r.display()))
            .collect();
        let authorization = token.map_or_else(String::new, |t| {
            format!("    authorization: {{credentials: \"{t}\"}}\n")
        });
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [{}]\n\
             scrape_configs:\n  - job_name: apiagg\n{authorization}    \
             static_configs: [{{targets: [{}]}}]\n",
            rules.join(", "),
            targets.join(", ")
        );
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, config).expect("prometheus.yml");
        let mut child = Command::new("prometheus")
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("prometheus (scripts/need.sh prometheus: Debian's prometheus package)");
        let port = listening_port(&mut child);
        Prometheus {
            port,
            _proc: Proc { child },
            _dir: dir,
        }
    }

    /// The result of the instant query `expr` (`data.result`), or Prometheus' error.
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let url = format!("http://127.0.0.1:{}/api/v1/query", self.port);
        let answer = crate::client()
            .get(&url)
            .query(&[("query", expr)])
            .send()
            .await
            .map_err(|e| format!("query: {e}"))?;
        let body: Value = answer.json().await.map_err(|e| format!("answer: {e}"))?;
        if body["status"] != "success" {
            return Err(format!("{}: {}", body["errorType"], body["error"]));
        }
        Ok(body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The value of the first series `expr` returns, if any.
    pub async fn value(&self, expr: &str) -> Option<f64> {
        let result = self.query(expr).await.ok()?;
        result.first()?["value"][1].as_str()?.parse().ok()
    }
}

/// The port a Prometheus started with `--web.listen-address=127.0.0.1:0` picked, from its
/// `msg="Listening on" address=…` log line (its log keeps being drained afterwards).
fn listening_port(prometheus: &mut std::process::Child) -> u16 {
    use std::io::BufRead;
    let stderr = prometheus.stderr.take().expect("prometheus stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let port = line
                .contains("msg=\"Listening on\"")
                .then(|| {
                    line.rsplit(':')
                        .next()
                        .and_then(|p| p.trim().parse::<u16>().ok())
                })
                .flatten();
            if let Some(port) = port {
                let _ = tx.send(port);
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("Prometheus did not say where it listens within 30 s")
}
