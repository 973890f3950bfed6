//! The probe that learns whether a backend honours streaming lists: a streaming list that
//! selects nothing (`metadata.name` no object can have) and ends after a second, in the
//! caller's name. A backend that honours it answers at once with the annotated BOOKMARK.

use std::time::Duration;

use tokio::time::Instant;

use super::protocol;
use crate::backends::{Client, Verdict};

/// How long the probe reads the answer before it concludes the BOOKMARK is not coming (the
/// probe asks the backend to end after one second).
const LISTEN: Duration = Duration::from_secs(3);

/// What the backend at `client` does with a streaming list of `path`; `None` when its answer
/// says nothing (the caller may not watch there, the backend failed): nothing is learned.
pub async fn run(
    client: &Client,
    path: &str,
    headers: http::HeaderMap,
    connect: Duration,
) -> Option<Verdict> {
    let target = format!("{path}?{}", protocol::probe_query());
    let (url, response) = match client.open_as(&target, headers, connect + LISTEN).await {
        Ok(opened) => opened,
        Err(e) => {
            tracing::debug!("streaming-list probe: {e}");
            return None;
        }
    };
    match response.status().as_u16() {
        200 => {}
        // A server without the feature refuses the options (422), some with a 400.
        code @ (400 | 422) => return Some(Verdict::Refuses(code)),
        code => {
            tracing::debug!(url, code, "streaming-list probe: no verdict");
            return None;
        }
    }
    let mut lines = client.lines(url, response, Instant::now() + LISTEN);
    loop {
        match lines.next().await {
            Ok(Some(line)) if protocol::ends_initial_events(&line) => {
                return Some(Verdict::Honours)
            }
            Ok(Some(_)) => {}
            Ok(None) => return Some(Verdict::Ignores),
            Err(e) => {
                tracing::debug!("streaming-list probe: {e}");
                return None;
            }
        }
    }
}
