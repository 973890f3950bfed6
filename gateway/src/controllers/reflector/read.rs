//! The reflector's I/O: a list page by page, and an open watch read event by event. What each
//! read found goes back to the step as a [`Seen`]; nothing here decides what follows.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::step::Seen;
use super::url_escape;
use crate::backends::{Client, FetchError, Lines};

/// Objects per list page.
const PAGE: usize = 500;
/// Upper bound of one list page.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// A watch that brings nothing, not even a bookmark, for this long is watched again.
const WATCH_SILENCE: Duration = Duration::from_secs(90);

/// Lists every object of a collection, page by page (`path_of(query)` is the path of a page),
/// handing each page's items to `each`; returns the list's resourceVersion.
pub(super) async fn list(
    client: &Client,
    path_of: impl Fn(&str) -> String,
    mut each: impl FnMut(&[Value]),
) -> Result<String, FetchError> {
    let mut next: Option<String> = None;
    loop {
        let mut query = format!("limit={PAGE}");
        if let Some(token) = &next {
            query.push_str("&continue=");
            query.push_str(&url_escape(token));
        }
        let page: Value = client
            .get(&path_of(&query), "application/json", None, LIST_TIMEOUT)
            .await?
            .json()?;
        if let Some(items) = page["items"].as_array() {
            each(items);
        }
        let meta = &page["metadata"];
        match meta["continue"].as_str().filter(|t| !t.is_empty()) {
            Some(token) => next = Some(token.to_string()),
            None => return Ok(meta["resourceVersion"].as_str().unwrap_or("").to_string()),
        }
    }
}

/// An open watch.
pub(super) struct Watch {
    lines: Lines,
    path: String,
    started: Instant,
}

impl Watch {
    /// Watches the collection from `from` (`path_of(query)` as for [`list`]); `Err(seen)` when
    /// it cannot: [`Seen::Gone`] for a version already too old, [`Seen::Failed`] otherwise.
    pub(super) async fn open(
        client: &Client,
        path_of: impl Fn(&str) -> String,
        from: &str,
    ) -> Result<Watch, Seen<'static>> {
        // Spread re-watches of many replicas over five minutes, as client-go does.
        let seconds = 300 + u64::from(jitter()) % 300;
        let path = path_of(&format!(
            "watch=1&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={seconds}",
            url_escape(from)
        ));
        match client
            .stream(&path, Duration::from_secs(seconds + 30))
            .await
        {
            Ok(Ok(lines)) => Ok(Watch {
                lines,
                path,
                started: Instant::now(),
            }),
            Ok(Err(refused)) if refused.status == 410 => Err(Seen::Gone),
            Ok(Err(refused)) => Err(Seen::Failed(refused.unexpected())),
            Err(e) => Err(Seen::Failed(e)),
        }
    }

    /// What the watch brings next: an event, its end, its silence or a failure.
    pub(super) async fn next(&mut self) -> Seen<'_> {
        // kube-apiserver sends a bookmark at least every minute: a watch silent for longer is
        // taken as a lost connection (a black hole keeps no FIN), and watched again from the
        // last version on a new one. Stale objects (RBAC grants) last at most this long.
        let Ok(line) = tokio::time::timeout(WATCH_SILENCE, self.lines.next()).await else {
            tracing::debug!(path = %self.path, "watch silent for {WATCH_SILENCE:?}: watching again");
            return Seen::Silent;
        };
        match line {
            Err(e) => Seen::Failed(e),
            Ok(None) => Seen::Closed {
                path: &self.path,
                lasted: self.started.elapsed(),
            },
            Ok(Some(line)) => match serde_json::from_slice(&line) {
                Ok(event) => Seen::Event {
                    path: &self.path,
                    event,
                },
                Err(e) => Seen::Failed(FetchError::Invalid {
                    url: self.path.clone(),
                    message: format!("watch event: {e}"),
                }),
            },
        }
    }
}

/// A few bits of the clock, to spread re-watches.
fn jitter() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}
