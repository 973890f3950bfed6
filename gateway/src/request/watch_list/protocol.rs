//! The streaming-list protocol (KEP-3157) as apiagg speaks it for a backend that does not,
//! pure: which requests are streaming lists, the list, watch and probe queries built from the
//! client's, list pages turned into `ADDED` events, the BOOKMARK annotated
//! `k8s.io/initial-events-end`, and a backend's failure turned into an `ERROR` event.

use apiagg_apis::{failure_status, Reason};
use apiagg_requestinfo::{QueryParams, RequestInfo};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// Objects asked per list page (client-go's reflector pages by 500 too).
pub const PAGE: u32 = 500;

/// The annotation of the BOOKMARK that ends the initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Whether a request is a streaming list: a watch with `sendInitialEvents=true`.
pub fn asked(info: &RequestInfo<'_>) -> bool {
    info.verb == "watch" && QueryParams::flag(info.query.send_initial_events) == Some(true)
}

/// How the events of an emulated stream can be written for a client's `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// JSON lines (what every client reads; a client that also takes protobuf or CBOR
    /// decodes by the answer's `Content-Type`).
    Json,
    /// A form apiagg does not write (`as=Table`, …): passed through to the backend as it is.
    PassThrough,
    /// Nothing apiagg writes: 406.
    NotAcceptable,
}

/// Reads `Accept` (absent: anything).
pub fn encoding(accept: Option<&str>) -> Encoding {
    let Some(accept) = accept.map(str::trim).filter(|a| !a.is_empty()) else {
        return Encoding::Json;
    };
    let mut json = false;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let base = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut refused = false;
        for param in parts {
            let param = param.trim();
            if param.starts_with("as=") {
                return Encoding::PassThrough;
            }
            if let Some(q) = param.strip_prefix("q=") {
                refused |= q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0);
            }
        }
        json |= !refused && matches!(base.as_str(), "application/json" | "application/*" | "*/*");
    }
    if json {
        Encoding::Json
    } else {
        Encoding::NotAcceptable
    }
}

/// Appends `&name=value`, the value form-encoded (raw values are kept as the client sent them).
fn push(query: &mut String, name: &str, value: &str, encode: bool) {
    if !query.is_empty() {
        query.push('&');
    }
    query.push_str(name);
    query.push('=');
    if encode {
        query.extend(url::form_urlencoded::byte_serialize(value.as_bytes()));
    } else {
        query.push_str(value);
    }
}

/// The parameters the emulation sets itself in its list pages and its watch.
const MANAGED: [&str; 9] = [
    "watch",
    "sendInitialEvents",
    "resourceVersion",
    "resourceVersionMatch",
    "limit",
    "continue",
    "allowWatchBookmarks",
    "timeoutSeconds",
    "timeout",
];

/// Every other parameter of the client's query, as the client sent it: `labelSelector`,
/// `fieldSelector`, `shardSelector` (KEP-5866) and whatever a later release adds reach the
/// backend's list and watch as they would from the client's own reflector.
fn carried(query: &mut String, q: &QueryParams<'_>) {
    for pair in q.raw.split('&').filter(|pair| !pair.is_empty()) {
        let key = pair.split_once('=').map_or(pair, |(key, _)| key);
        let managed = QueryParams::decoded(Some(key)).is_some_and(|key| MANAGED.contains(&&*key));
        if !managed {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str(pair);
        }
    }
}

/// The query of one list page: the client's options ([`carried`]), `limit`, and on the first page its
/// `resourceVersion` and `resourceVersionMatch` (a list with an empty resourceVersion is a
/// consistent read, which `NotOlderThan` may not accompany), on later ones `continue`.
pub fn list_query(q: &QueryParams<'_>, next: Option<&str>) -> String {
    let mut query = String::new();
    carried(&mut query, q);
    push(&mut query, "limit", &PAGE.to_string(), false);
    match next {
        Some(token) => push(&mut query, "continue", token, true),
        None => {
            if let Some(rv) = q.resource_version.filter(|rv| !rv.is_empty()) {
                push(&mut query, "resourceVersion", rv, false);
                if let Some(exact) = q.resource_version_match {
                    push(&mut query, "resourceVersionMatch", exact, false);
                }
            }
        }
    }
    query
}

/// The query of the watch that follows the list: from the list's `resource_version`, with the
/// client's options ([`carried`]), bookmarks and `timeoutSeconds` (or apiagg's, `timeout`).
pub fn watch_query(q: &QueryParams<'_>, resource_version: &str, timeout: Option<u64>) -> String {
    let mut query = String::from("watch=true");
    push(&mut query, "resourceVersion", resource_version, true);
    if QueryParams::flag(q.allow_watch_bookmarks) == Some(true) {
        push(&mut query, "allowWatchBookmarks", "true", false);
    }
    carried(&mut query, q);
    match q.timeout_seconds {
        Some(seconds) => push(&mut query, "timeoutSeconds", seconds, false),
        None => {
            if let Some(seconds) = timeout {
                push(&mut query, "timeoutSeconds", &seconds.to_string(), false);
            }
        }
    }
    query
}

/// The probe's query: a streaming list that selects nothing (no object is named so) and ends
/// after a second, so a backend that honours it answers at once with the BOOKMARK.
pub fn probe_query() -> String {
    "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
     &allowWatchBookmarks=true&timeoutSeconds=1\
     &fieldSelector=metadata.name%3DAPIAGG-WATCH-LIST-PROBE"
        .to_string()
}

/// Whether a line of a watch is the BOOKMARK that ends the initial events.
pub fn ends_initial_events(line: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Event {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        object: Option<Object>,
    }
    #[derive(Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Option<Meta>,
    }
    #[derive(Deserialize)]
    struct Meta {
        #[serde(default)]
        annotations: Option<std::collections::HashMap<String, String>>,
    }
    serde_json::from_slice::<Event>(line).is_ok_and(|e| {
        e.kind == "BOOKMARK"
            && e.object
                .and_then(|o| o.metadata)
                .and_then(|m| m.annotations)
                .and_then(|a| a.get(INITIAL_EVENTS_END).cloned())
                .is_some_and(|v| v == "true")
    })
}

/// The type of the objects a list carries: `kind` (the list's without `List`) and
/// `apiVersion`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemType {
    pub kind: String,
    pub api_version: String,
}

/// One list page, its items still raw.
#[derive(Debug, Deserialize)]
pub struct Page<'a> {
    #[serde(default)]
    kind: Option<String>,
    #[serde(rename = "apiVersion", default)]
    api_version: Option<String>,
    #[serde(default)]
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
}

#[derive(Debug, Default, Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
    #[serde(rename = "continue", default)]
    next: Option<String>,
}

impl<'a> Page<'a> {
    /// Parses a list answer.
    pub fn parse(body: &'a [u8]) -> Result<Page<'a>, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// The list's resourceVersion (empty when it has none).
    pub fn resource_version(&self) -> &str {
        self.metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    }

    /// The `continue` token of the next page, if any.
    pub fn next(&self) -> Option<&str> {
        self.metadata.next.as_deref().filter(|t| !t.is_empty())
    }

    /// The type of its items; `api_version` is the request's group/version when the list
    /// does not say.
    pub fn item_type(&self, api_version: &str) -> ItemType {
        let kind = self.kind.as_deref().unwrap_or_default();
        ItemType {
            kind: kind.strip_suffix("List").unwrap_or(kind).to_string(),
            api_version: self
                .api_version
                .clone()
                .unwrap_or_else(|| api_version.to_string()),
        }
    }

    /// Its items as `ADDED` events, one JSON line each, appended to `out`; items without
    /// `kind` or `apiVersion` (typed lists leave them out) get those of `item`.
    pub fn added_events(&self, item: &ItemType, out: &mut Vec<u8>) {
        #[derive(Deserialize)]
        struct TypeMeta {
            #[serde(default)]
            kind: Option<IgnoredAny>,
            #[serde(rename = "apiVersion", default)]
            api_version: Option<IgnoredAny>,
        }
        for raw in self.items.iter().flatten() {
            let text = raw.get().trim();
            let typed = serde_json::from_str::<TypeMeta>(text).ok();
            let (has_kind, has_version) = typed.map_or((true, true), |t| {
                (t.kind.is_some(), t.api_version.is_some())
            });
            out.extend_from_slice(b"{\"type\":\"ADDED\",\"object\":");
            match text.strip_prefix('{') {
                Some(rest) if !(has_kind && has_version) => {
                    out.push(b'{');
                    let mut fields = Vec::new();
                    if !has_kind {
                        fields.push(format!("\"kind\":{}", json!(item.kind)));
                    }
                    if !has_version {
                        fields.push(format!("\"apiVersion\":{}", json!(item.api_version)));
                    }
                    out.extend_from_slice(fields.join(",").as_bytes());
                    if !rest.trim_start().starts_with('}') {
                        out.push(b',');
                    }
                    out.extend_from_slice(rest.as_bytes());
                }
                _ => out.extend_from_slice(text.as_bytes()),
            }
            out.extend_from_slice(b"}\n");
        }
    }
}

/// The BOOKMARK that ends the initial events, at the list's `resource_version`.
pub fn initial_events_end(item: &ItemType, resource_version: &str) -> Vec<u8> {
    let event = json!({
        "type": "BOOKMARK",
        "object": {
            "kind": item.kind,
            "apiVersion": item.api_version,
            "metadata": {
                "resourceVersion": resource_version,
                "annotations": { INITIAL_EVENTS_END: "true" },
            },
        },
    });
    let mut line = event.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// An `ERROR` event for a backend's answer `code` with `body`: its Status when it sent one,
/// else a Status saying what happened.
pub fn error_event(code: u16, body: &[u8], what: &str) -> Vec<u8> {
    let status = serde_json::from_slice::<Value>(body)
        .ok()
        .filter(|v| v["kind"] == "Status")
        .unwrap_or_else(|| {
            let excerpt = String::from_utf8_lossy(&body[..body.len().min(256)]);
            let message = format!("{what}: the backend answered {code}: {excerpt}");
            failure_status(code, Reason::for_code(code), &message, None)
        });
    let mut line = json!({"type": "ERROR", "object": status})
        .to_string()
        .into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests;
