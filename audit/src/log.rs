//! The log backend (`--audit-log-path`): one event per line, as JSON (kube-apiserver's default
//! `--audit-log-format=json`) or the legacy one-line text, to a rotated file or to standard
//! output (`-`). Lines are buffered and flushed at least every second and at shutdown. A failed
//! write is counted (`apiserver_audit_error_total{plugin="log"}`) and logged when the error
//! changes; it never stops the writer or the gateway.

use std::io::{BufWriter, Stdout, Write};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::event::{Event, Json};
use super::rotate::{RotatingFile, Rotation};
use super::settings::{LogFormat, LogSettings};
use super::sink::{next_event, poll_clock, spawn_writer, stopped, AuditMetrics, Stop, Writer};
use super::AuditError;
use apiagg_observe::Repeats;

/// Buffered lines reach the file at least this often.
const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// The same write error is logged at most this often.
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(60);
/// The name in metrics.
const PLUGIN: &str = "log";

/// Where lines go.
enum Output {
    Stdout(BufWriter<Stdout>),
    File(RotatingFile),
}

impl Output {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Output::Stdout(out) => out.write_all(line),
            Output::File(file) => file.write_line(line),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(out) => out.flush(),
            Output::File(file) => file.flush(),
        }
    }
}

/// Opens the log (errors now, before serving, as upstream) and starts its writer.
pub(super) fn start(
    settings: &LogSettings,
    events: mpsc::Receiver<Arc<Event>>,
    metrics: AuditMetrics,
) -> Result<Writer, AuditError> {
    let output = if settings.path.as_os_str() == "-" {
        Output::Stdout(BufWriter::new(std::io::stdout()))
    } else {
        let days = u64::from(settings.max_age_days);
        let rotation = Rotation {
            max_size: settings.max_size_mb.saturating_mul(1 << 20),
            max_backups: settings.max_backups as usize,
            max_age: (days > 0).then(|| Duration::from_secs(days * 86_400)),
        };
        let file =
            RotatingFile::open(&settings.path, rotation).map_err(|source| AuditError::LogFile {
                path: settings.path.clone(),
                source,
            })?;
        Output::File(file)
    };
    let mut log = Log {
        output,
        format: settings.format,
        metrics,
        line: Vec::with_capacity(4096),
        repeats: Repeats::new(ERROR_LOG_INTERVAL),
        path: settings.path.display().to_string(),
    };
    spawn_writer(
        PLUGIN,
        move |stop| async move { log.run(events, stop).await },
    )
}

struct Log {
    output: Output,
    format: LogFormat,
    metrics: AuditMetrics,
    /// The line being written (reused).
    line: Vec<u8>,
    repeats: Repeats,
    path: String,
}

impl Log {
    async fn run(&mut self, mut events: mpsc::Receiver<Arc<Event>>, mut stop: Stop) {
        let mut clock = poll_clock();
        let mut tick = tokio::time::interval(FLUSH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                deadline = stopped(&mut stop) => {
                    events.close();
                    while let Some(event) = events.recv().await {
                        if Instant::now() > deadline {
                            let left = 1 + events.len() as u64;
                            self.metrics.failed(PLUGIN, PLUGIN, "shutdown", left);
                            break;
                        }
                        self.write(&event);
                    }
                    break;
                }
                event = next_event(&mut events, &mut clock) => match event {
                    Some(event) => {
                        self.write(&event);
                        // Everything else already queued, without going round the select.
                        while let Ok(event) = events.try_recv() {
                            self.write(&event);
                        }
                    }
                    None => break,
                },
                _ = tick.tick() => self.flush(),
            }
        }
        self.flush();
    }

    fn write(&mut self, event: &Event) {
        self.line.clear();
        let encoded = match self.format {
            LogFormat::Json => {
                Json { event, typed: true }.write_to(&mut self.line);
                Ok(())
            }
            LogFormat::Legacy => legacy(&mut self.line, event),
        };
        self.line.push(b'\n');
        if let Err(e) = encoded.and_then(|()| self.output.write_line(&self.line)) {
            self.failed(e);
        }
    }

    fn flush(&mut self) {
        if let Err(e) = self.output.flush() {
            self.failed(e);
        }
    }

    fn failed(&mut self, error: std::io::Error) {
        self.metrics.failed(PLUGIN, PLUGIN, "write_failed", 1);
        let message = error.to_string();
        if let Some(suppressed) = self.repeats.admit(PLUGIN, &message) {
            tracing::error!(path = %self.path, error = %message, suppressed, "cannot write the audit log");
        }
    }
}

/// kube-apiserver's legacy line (`audit.EventString`).
fn legacy(out: &mut Vec<u8>, e: &Event) -> std::io::Result<()> {
    let c = &*e.common;
    let quoted = |items: &[String]| {
        items
            .iter()
            .map(|g| format!("{g:?}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (user, groups) = match c.user.username() {
        "" => ("<none>".to_string(), "<none>".to_string()),
        name if c.user.groups().is_empty() => (name.to_string(), "<none>".to_string()),
        name => (name.to_string(), quoted(c.user.groups())),
    };
    let (as_user, as_groups) = match &e.impersonated {
        None => ("<self>".to_string(), "<lookup>".to_string()),
        Some(user) => (user.username().to_string(), quoted(user.groups())),
    };
    let namespace = match e.namespace() {
        "" => "<none>",
        namespace => namespace,
    };
    let response = e
        .status
        .as_ref()
        .map_or("<deferred>".to_string(), |s| s.code.to_string());
    let ip = c
        .source_ips
        .first()
        .map_or("<unknown>".to_string(), |ip| ip.to_string());
    let received = jiff::Timestamp::try_from(c.received).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    write!(
        out,
        "{received} AUDIT: id={:?} stage={:?} ip={ip:?} method={:?} user={user:?} groups={groups:?} as={as_user:?} asgroups={as_groups:?} user-agent={:?} namespace={namespace:?} uri={:?} response=\"{response}\"",
        c.id.as_str(),
        e.stage.as_str(),
        &*c.verb,
        e.user_agent(),
        e.request_uri(),
    )
}

#[cfg(test)]
mod tests;
