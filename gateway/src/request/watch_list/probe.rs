//! The probe that learns whether a backend honours streaming lists: apiagg asks the backend,
//! in its own name, which resources its group-version serves (`GET /apis/<g>/<v>`), picks a
//! collection that can be listed and watched, and sends a streaming list of it that selects
//! nothing (`metadata.name` no object can have) and ends after a second. A backend that
//! honours it answers at once with the annotated BOOKMARK. Nothing of a caller's request (its
//! path, options or headers) goes into the probe: what one caller asks never decides the mode
//! of an APIService for everyone.

use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use super::protocol;
use crate::backends::{Client, Verdict};

/// How long the probe reads the answer before it concludes the BOOKMARK is not coming (the
/// probe asks the backend to end after one second).
const LISTEN: Duration = Duration::from_secs(3);

/// The part of an `APIResourceList` the probe reads.
#[derive(Deserialize)]
struct Resources {
    #[serde(default)]
    resources: Vec<Resource>,
}

#[derive(Deserialize)]
struct Resource {
    name: String,
    #[serde(default)]
    verbs: Vec<String>,
}

/// The first collection of an `APIResourceList` that can be listed and watched (not a
/// subresource).
fn collection(list: &[u8]) -> Option<String> {
    let list: Resources = serde_json::from_slice(list).ok()?;
    list.resources
        .into_iter()
        .find(|r| {
            !r.name.contains('/')
                && ["list", "watch"]
                    .iter()
                    .all(|verb| r.verbs.iter().any(|v| v == verb))
        })
        .map(|r| r.name)
}

/// What the backend at `client` does with a streaming list of a collection of
/// `group_version` (`/apis/<g>/<v>`); `None` when its answers say nothing (no collection to
/// watch, the backend failed): nothing is learned.
pub async fn run(client: &Client, group_version: &str, connect: Duration) -> Option<Verdict> {
    let listed = client
        .get(group_version, "application/json", None, connect + LISTEN)
        .await;
    let resource = match listed {
        Ok(fetched) if fetched.status == 200 => collection(&fetched.body),
        Ok(fetched) => {
            tracing::debug!(group_version, code = fetched.status, "streaming-list probe");
            None
        }
        Err(e) => {
            tracing::debug!("streaming-list probe: {e}");
            None
        }
    }?;
    let target = format!("{group_version}/{resource}?{}", protocol::probe_query());
    let (url, response) = match client.open_own(&target, connect + LISTEN).await {
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

#[cfg(test)]
mod tests {
    use super::collection;

    #[test]
    fn the_probe_watches_the_first_collection_that_can_be_listed_and_watched() {
        let list = br#"{"kind":"APIResourceList","resources":[
            {"name":"flunders/status","verbs":["get","list","watch"]},
            {"name":"reviews","verbs":["create"]},
            {"name":"fischers","verbs":["get","list","watch","create"]},
            {"name":"flunders","verbs":["list","watch"]}]}"#;
        assert_eq!(collection(list).as_deref(), Some("fischers"));
        assert_eq!(
            collection(br#"{"resources":[{"name":"x","verbs":["get"]}]}"#),
            None
        );
        assert_eq!(collection(b"not json"), None);
    }
}
