//! Lists and watches of the in-memory resource as a genericapiserver answers them: lists in
//! pages (`limit`, `continue`), `labelSelector` and the `metadata.name` / `metadata.namespace`
//! field selectors, watches from a `resourceVersion` (410 `Expired` once the history no longer
//! holds it), and streaming lists (`sendInitialEvents`) honoured, ignored or refused as
//! `--watch-list` says. `POST /debug/hold-lists` makes lists wait (their state is taken when
//! they arrive) until `POST /debug/release-lists`, so tests can change objects during a list.

use std::time::Duration;

use base64::Engine;
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use crate::args::WatchListMode;
use crate::cbor::Format;
use crate::debug::query_param;
use crate::resource::ResourceInfo;
use crate::response::{json, status, Body, JSON};
use crate::selector::Selector;
use crate::store::Store;
use crate::watch::WatchParams;

/// The field selectors every genericapiserver resource supports.
#[derive(Debug, Default, Clone)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses a decoded `fieldSelector`: `field=value`, `field==value` or `field!=value`.
    pub fn parse(text: &str) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!("invalid field selector term {term:?}"));
            };
            if field != "metadata.name" && field != "metadata.namespace" {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), equal, value.to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether an object matches every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let actual = match field.as_str() {
                "metadata.name" => object["metadata"]["name"].as_str(),
                _ => object["metadata"]["namespace"].as_str(),
            };
            (actual.unwrap_or_default() == value) == *equal
        })
    }
}

/// `labelSelector` and `fieldSelector` of a list or watch.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub labels: Selector,
    pub fields: FieldSelector,
}

impl Filter {
    /// Reads both selectors of a query; `Err` is the 400 message.
    pub fn from_query(query: Option<&str>) -> Result<Filter, String> {
        let labels = match decoded(query, "labelSelector")? {
            Some(text) => Selector::parse(&text).map_err(|e| format!("labelSelector: {e}"))?,
            None => Selector::default(),
        };
        let fields = match decoded(query, "fieldSelector")? {
            Some(text) => FieldSelector::parse(&text)?,
            None => FieldSelector::default(),
        };
        Ok(Filter { labels, fields })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}

/// A query parameter, `+` as space and percent-decoded.
fn decoded(query: Option<&str>, name: &str) -> Result<Option<String>, String> {
    let Some(raw) = query_param(query, name) else {
        return Ok(None);
    };
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map(|t| Some(t.into_owned()))
        .map_err(|e| format!("{name}: {e}"))
}

/// A list answer: one page of at most `limit` objects, in key order.
pub async fn list(
    info: &ResourceInfo,
    store: &Store,
    namespace: Option<&str>,
    query: Option<&str>,
    filter: &Filter,
) -> Response<Body> {
    let limit = match query_param(query, "limit").filter(|l| !l.is_empty()) {
        None => usize::MAX,
        Some(l) => match l.parse::<usize>() {
            Ok(0) => usize::MAX,
            Ok(n) => n,
            Err(_) => return invalid(&format!("limit: invalid value {l:?}")),
        },
    };
    let from = match query_param(query, "continue").filter(|c| !c.is_empty()) {
        None => None,
        Some(token) => match read_continue(token) {
            Some(from) => Some(from),
            None => return invalid("continue: the continue token is not valid"),
        },
    };
    let (current, mut items) = store.list(namespace);
    store.lists_released().await;
    let snapshot = from.as_ref().map_or(current, |(rv, _)| *rv);
    items.retain(|o| filter.matches(o) && resource_version(o) <= snapshot);
    if let Some((_, after)) = &from {
        items.retain(|o| key(o).as_str() > after.as_str());
    }
    let more = items.len() > limit;
    items.truncate(limit);
    let mut metadata = json!({"resourceVersion": snapshot.to_string()});
    if more {
        if let Some(last) = items.last() {
            metadata["continue"] = json!(write_continue(snapshot, &key(last)));
        }
    }
    json(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", info.kind),
            "apiVersion": format!("{}/{}", info.group, info.version),
            "metadata": metadata,
            "items": items,
        }),
    )
}

/// The sort key of an object: `namespace/name`.
fn key(object: &Value) -> String {
    format!(
        "{}/{}",
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn resource_version(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

fn write_continue(resource_version: u64, after: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{resource_version}|{after}"))
}

fn read_continue(token: &str) -> Option<(u64, String)> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (rv, after) = text.split_once('|')?;
    Some((rv.parse().ok()?, after.to_string()))
}

/// kube-apiserver's answer to list options it refuses: 422 `Invalid` of `ListOptions`.
fn invalid(message: &str) -> Response<Body> {
    status(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &format!("ListOptions.meta.k8s.io \"\" is invalid: {message}"),
        json!({"group": "meta.k8s.io", "kind": "ListOptions"}),
    )
}

/// `Ok(Some)` when the query asks for a watch (`watch=true|1`); `Err` is the answer refusing it.
pub fn watch_params(
    query: Option<&str>,
    mode: WatchListMode,
    filter: Filter,
    format: Format,
) -> Result<Option<WatchParams>, Box<Response<Body>>> {
    let bad = |m: String| Box::new(crate::response::bad_request(&m));
    let watching = match query_param(query, "watch") {
        None | Some("" | "false" | "0" | "f" | "False" | "FALSE") => false,
        Some("true" | "1" | "t" | "True" | "TRUE") => true,
        Some(other) => return Err(bad(format!("invalid value for watch: {other:?}"))),
    };
    if !watching {
        return Ok(None);
    }
    let resource_version = match query_param(query, "resourceVersion") {
        None | Some("") => 0,
        Some(rv) => rv
            .parse()
            .map_err(|_| bad(format!("invalid resourceVersion: {rv:?}")))?,
    };
    let timeout = match query_param(query, "timeoutSeconds") {
        None | Some("") => None,
        Some(t) => {
            Some(Duration::from_secs(t.parse().map_err(|_| {
                bad(format!("invalid timeoutSeconds: {t:?}"))
            })?))
        }
    };
    let send_initial = query_param(query, "sendInitialEvents");
    let bookmarks = query_param(query, "allowWatchBookmarks") == Some("true");
    let refuse = |message: &str| Err(Box::new(invalid(message)));
    let initial_events =
        match (mode, send_initial) {
            (_, None) | (WatchListMode::Ignore, _) => false,
            (WatchListMode::Reject, Some(_)) => return refuse(
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless \
                 the WatchList feature gate is enabled",
            ),
            (WatchListMode::Native, Some(value)) => {
                let exact = query_param(query, "resourceVersionMatch") == Some("NotOlderThan");
                if value == "true" && (!exact || !bookmarks) {
                    return refuse(
                        "sendInitialEvents: Forbidden: sendInitialEvents requires \
                     resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true",
                    );
                }
                value == "true"
            }
        };
    Ok(Some(WatchParams {
        resource_version: if initial_events { 0 } else { resource_version },
        timeout,
        filter,
        format,
        initial_events,
        bookmarks,
        gzip: false,
        expired_status: false,
    }))
}

/// Bytes a gzip bomb decompresses to: four times apiagg's default backend body limit.
const BOMB_SIZE: usize = 256 << 20;

/// A list answer that is a gzip bomb: a list's opening, then 256 MiB of spaces, about 250 KiB
/// on the wire (`/debug/gzip-bomb-lists`). Built once.
pub fn gzip_bomb(info: &ResourceInfo) -> Response<Body> {
    use std::io::Write;
    static BOMB: std::sync::OnceLock<bytes::Bytes> = std::sync::OnceLock::new();
    let bomb = BOMB.get_or_init(|| {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let opening = format!(
            r#"{{"kind":"{}List","apiVersion":"v1","metadata":{{"resourceVersion":"1"}},"items":["#,
            info.kind
        );
        let _ = encoder.write_all(opening.as_bytes());
        let spaces = vec![b' '; 1 << 20];
        for _ in 0..BOMB_SIZE / spaces.len() {
            let _ = encoder.write_all(&spaces);
        }
        bytes::Bytes::from(encoder.finish().unwrap_or_default())
    });
    let mut resp = crate::response::bytes(StatusCode::OK, JSON, bomb.clone());
    resp.headers_mut().insert(
        hyper::header::CONTENT_ENCODING,
        hyper::header::HeaderValue::from_static("gzip"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = write_continue(42, "ns/a|b");
        assert_eq!(read_continue(&token), Some((42, "ns/a|b".to_string())));
        assert_eq!(read_continue("!!"), None);
    }

    #[test]
    fn field_selectors_of_metadata() {
        let object = json!({"metadata": {"name": "a", "namespace": "n"}});
        assert!(FieldSelector::parse("metadata.name=a")
            .expect("parse")
            .matches(&object));
        assert!(!FieldSelector::parse("metadata.name!=a")
            .expect("parse")
            .matches(&object));
        assert!(
            FieldSelector::parse("metadata.namespace==n,metadata.name!=b")
                .expect("parse")
                .matches(&object)
        );
        assert!(FieldSelector::parse("spec.x=1").is_err());
    }
}
