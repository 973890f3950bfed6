//! The file watcher: re-reads certificates, CA bundles and token files when they change, so
//! rotations need no restart. A file that turns bad is reported once and the last good value
//! keeps serving.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

use crate::backends::Reload;

/// Re-reads every item each interval.
pub struct FileWatcher {
    items: Vec<Arc<dyn Reload>>,
    interval: Duration,
}

impl FileWatcher {
    /// A watcher over `items`.
    pub fn new(items: Vec<Arc<dyn Reload>>, interval: Duration) -> FileWatcher {
        FileWatcher { items, interval }
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
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            for (item, problem) in self.items.iter().zip(problems.iter_mut()) {
                match item.reload() {
                    Ok(changed) => {
                        if changed {
                            tracing::info!("{} reloaded", item.name());
                        } else if problem.is_some() {
                            tracing::info!("{} is readable again", item.name());
                        }
                        *problem = None;
                    }
                    Err(e) => {
                        if problem.as_deref() != Some(e.as_str()) {
                            tracing::warn!(
                                "{} not reloaded, the previous one serves: {e}",
                                item.name()
                            );
                        }
                        *problem = Some(e);
                    }
                }
            }
        }
    }
}
