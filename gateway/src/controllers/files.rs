//! The file watcher: re-reads certificates, CA bundles and token files when they change, so
//! rotations need no restart. A file that turns bad is reported once and the last good value
//! keeps serving. The expiry of the certificates in use is published at the first round and
//! after every change.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

use crate::backends::Reloadable;
use apiagg_observe::Metrics;

/// Re-reads every item each interval.
pub struct FileWatcher {
    items: Vec<Reloadable>,
    interval: Duration,
    metrics: Arc<Metrics>,
}

impl FileWatcher {
    /// A watcher over `items`, every `reload_interval` of the gateway's options.
    pub fn new(items: Vec<Reloadable>, interval: Duration, metrics: Arc<Metrics>) -> FileWatcher {
        FileWatcher {
            items,
            interval,
            metrics,
        }
    }

    /// Publishes the expiry of the certificates `item` serves with.
    fn report_expiry(&self, item: &Reloadable) {
        if let Some((kind, not_after)) = item.expiry() {
            self.metrics.certificate_expiry(kind, Some(not_after));
        }
    }
}

#[async_trait]
impl BackgroundService for FileWatcher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if self.items.is_empty() {
            return;
        }
        let mut problems: Vec<Option<String>> = vec![None; self.items.len()];
        let mut tick = tokio::time::interval(self.interval);
        let mut first = true;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            for (item, problem) in self.items.iter().zip(problems.iter_mut()) {
                let result = item.reload();
                if first || matches!(result, Ok(true)) {
                    self.report_expiry(item);
                }
                match result {
                    Ok(changed) => {
                        if changed {
                            tracing::info!("{} reloaded", item.name());
                        } else if problem.is_some() {
                            tracing::info!("{} is readable again", item.name());
                        }
                        *problem = None;
                    }
                    Err(e) => {
                        // Said once per distinct problem, not every round.
                        let text = e.to_string();
                        if problem.as_deref() != Some(text.as_str()) {
                            tracing::warn!(
                                "{} not reloaded, the previous one serves: {text}",
                                item.name()
                            );
                        }
                        *problem = Some(text);
                    }
                }
            }
            first = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

    use super::*;
    use crate::backends::Reload;
    use apiagg_observe::CertificateKind;

    /// A certificate file whose next reload reports a change when told so.
    struct Fake {
        not_after: AtomicI64,
        changed: AtomicBool,
    }

    impl Reload for Fake {
        type Error = std::convert::Infallible;
        fn name(&self) -> String {
            "fake".into()
        }
        fn reload(&self) -> Result<bool, Self::Error> {
            Ok(self.changed.swap(false, Ordering::SeqCst))
        }
        fn expiry(&self) -> Option<(CertificateKind, i64)> {
            Some((
                CertificateKind::Serving,
                self.not_after.load(Ordering::SeqCst),
            ))
        }
    }

    fn serving(metrics: &Metrics) -> Option<String> {
        let text = String::from_utf8(metrics.render()).expect("utf-8");
        text.lines()
            .find_map(|l| {
                l.strip_prefix(
                    "apiagg_certificate_expiration_timestamp_seconds{certificate=\"serving\"} ",
                )
            })
            .map(str::to_string)
    }

    async fn until(metrics: &Metrics, want: &str) {
        for _ in 0..500 {
            if serving(metrics).as_deref() == Some(want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("never {want}: {:?}", serving(metrics));
    }

    #[tokio::test]
    async fn expiry_is_published_at_the_first_round_and_after_each_change() {
        let metrics = Arc::new(Metrics::new().expect("metrics"));
        let fake = Arc::new(Fake {
            not_after: AtomicI64::new(100),
            changed: AtomicBool::new(false),
        });
        let watcher = FileWatcher::new(
            vec![Reloadable::from(fake.clone())],
            Duration::from_millis(5),
            metrics.clone(),
        );
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move { watcher.start(shutdown).await });
        until(&metrics, "100").await;
        fake.not_after.store(200, Ordering::SeqCst);
        fake.changed.store(true, Ordering::SeqCst);
        until(&metrics, "200").await;
        stop.send(true).expect("stop");
        task.await.expect("watcher");
    }
}
