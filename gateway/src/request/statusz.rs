//! apiagg's own z-pages, `/statusz` and `/flagz` (beta and on by default since Kubernetes 1.36),
//! as k8s.io/apiserver serves them (`pkg/server/statusz`, `pkg/server/flagz`): plain text for
//! people by default (no `Accept`, `text/plain`, `*/*`), with a separator picked at random so
//! that nobody parses it; the structured `config.k8s.io` object (`v1beta1`, or the deprecated
//! `v1alpha1` with a `Warning`) only for an `Accept` that names it exactly
//! (`application/json;g=config.k8s.io;v=v1beta1;as=Statusz`, YAML and CBOR likewise); 406 for
//! anything else (plain `application/json` included). They describe apiagg, never the delegate:
//! kube-apiserver's own z-pages are reached on kube-apiserver.

use std::time::{Duration, SystemTime};

use apiagg_apis::Reason;
use apiagg_discovery::media_ranges;
use bytes::Bytes;
use pingora_http::RequestHeader;
use serde_json::{json, Value};

use super::refusal::Refusal;
use super::reply::Reply;

/// The name apiagg gives itself in z-pages (kube-apiserver writes `kube-apiserver`).
const COMPONENT: &str = "apiagg";
/// The group of the structured forms.
const GROUP: &str = "config.k8s.io";
/// The paths `/statusz` lists: apiagg's own read-only debugging endpoints (upstream lists its
/// mux's top-level paths without `/api`, `/apis`, `/openapi`, `/openid`, `/.well-known`).
const PATHS: [&str; 8] = [
    "/debug", "/flagz", "/healthz", "/livez", "/metrics", "/readyz", "/statusz", "/version",
];
/// Upstream's separators between a name and its value in the text form, one picked per answer.
const SEPARATORS: [&str; 4] = [":", ": ", "=", " "];
/// The first lines of the text form (after `<component> <page>`).
const WARNING: &str = "Warning: This endpoint is not meant to be machine parseable, has no \
    formatting compatibility guarantees and is for debugging purposes only.";
/// The 406 message: the media types upstream's z-pages accept, in its order.
const ACCEPTED: &str = "only the following media types are accepted: application/json, \
    application/yaml, text/plain, application/cbor";

/// Which z-page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zpage {
    /// `/statusz`: start time, uptime, versions, paths.
    Statusz,
    /// `/flagz`: the command-line flags.
    Flagz,
}

impl Zpage {
    fn kind(self) -> &'static str {
        match self {
            Zpage::Statusz => "Statusz",
            Zpage::Flagz => "Flagz",
        }
    }

    fn page(self) -> &'static str {
        match self {
            Zpage::Statusz => "statusz",
            Zpage::Flagz => "flagz",
        }
    }
}

/// What the gateway knows that the z-pages show.
pub struct Facts<'a> {
    /// When the gateway started.
    pub started: SystemTime,
    /// The flags and their values, sorted by name.
    pub flags: &'a [(String, String)],
}

/// The encodings of the structured form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Json,
    Yaml,
    Cbor,
}

/// What an `Accept` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Negotiated {
    Text,
    /// The structured object; `true`: `v1beta1`, `false`: the deprecated `v1alpha1`.
    Structured(Encoding, bool),
}

/// The `Content-Type` of a structured answer: the media type with the group, version and kind,
/// as upstream writes it (`WriteObjectNegotiated` with `listGVKInContentType`).
fn content_type(page: Zpage, encoding: Encoding, beta: bool) -> &'static str {
    macro_rules! table {
        ($($page:ident $enc:ident $beta:literal => $media:literal, $v:literal, $kind:literal;)*) => {
            match (page, encoding, beta) {
                $((Zpage::$page, Encoding::$enc, $beta) =>
                    concat!($media, ";g=config.k8s.io;v=", $v, ";as=", $kind),)*
            }
        };
    }
    table! {
        Statusz Json true => "application/json", "v1beta1", "Statusz";
        Statusz Json false => "application/json", "v1alpha1", "Statusz";
        Statusz Yaml true => "application/yaml", "v1beta1", "Statusz";
        Statusz Yaml false => "application/yaml", "v1alpha1", "Statusz";
        Statusz Cbor true => "application/cbor", "v1beta1", "Statusz";
        Statusz Cbor false => "application/cbor", "v1alpha1", "Statusz";
        Flagz Json true => "application/json", "v1beta1", "Flagz";
        Flagz Json false => "application/json", "v1alpha1", "Flagz";
        Flagz Yaml true => "application/yaml", "v1beta1", "Flagz";
        Flagz Yaml false => "application/yaml", "v1alpha1", "Flagz";
        Flagz Cbor true => "application/cbor", "v1beta1", "Flagz";
        Flagz Cbor false => "application/cbor", "v1alpha1", "Flagz";
    }
}

/// What `accept` asks of `page`, as apimachinery's negotiation with the z-pages' restrictions
/// decides: clauses by preference; text for `text/plain`, `text/*` or `*/*` without a
/// conversion; the structured form for a JSON, YAML or CBOR range (or a wildcard) whose `as`,
/// `g` and `v` name it; `None` (406) when no clause fits.
fn negotiate(accept: Option<&str>, page: Zpage) -> Option<Negotiated> {
    let accept = accept.map_or("", str::trim);
    if accept.is_empty() {
        return Some(Negotiated::Text);
    }
    for clause in media_ranges(accept) {
        let (kind, group, version) = (clause.param("as"), clause.param("g"), clause.param("v"));
        let any = clause.kind == "*" && clause.subtype == "*";
        if kind.is_none() && group.is_none() && version.is_none() {
            let text = clause.kind.eq_ignore_ascii_case("text")
                && (clause.subtype.eq_ignore_ascii_case("plain") || clause.subtype == "*");
            if any || text {
                return Some(Negotiated::Text);
            }
            continue;
        }
        if kind != Some(page.kind()) || group != Some(GROUP) {
            continue;
        }
        let beta = match version {
            Some("v1beta1") => true,
            Some("v1alpha1") => false,
            _ => continue,
        };
        let application = clause.kind.eq_ignore_ascii_case("application") && clause.subtype == "*";
        let encoding = if any || application || clause.is("application/json") {
            Encoding::Json
        } else if clause.is("application/yaml") {
            Encoding::Yaml
        } else if clause.is("application/cbor") {
            Encoding::Cbor
        } else {
            continue;
        };
        return Some(Negotiated::Structured(encoding, beta));
    }
    None
}

/// The answer to `/statusz` or `/flagz`.
pub fn answer(req: &RequestHeader, page: Zpage, facts: &Facts<'_>) -> Reply {
    let accept = req.headers.get(http::header::ACCEPT);
    let accept = accept.and_then(|v| v.to_str().ok());
    let separator = SEPARATORS[fastrand::usize(..SEPARATORS.len())];
    match negotiate(accept, page) {
        None => Refusal::new(Reason::NotAcceptable, ACCEPTED).into(),
        Some(Negotiated::Text) => Reply::text(200, text(page, facts, separator)),
        Some(Negotiated::Structured(encoding, beta)) => structured(page, facts, encoding, beta),
    }
}

fn structured(page: Zpage, facts: &Facts<'_>, encoding: Encoding, beta: bool) -> Reply {
    let version = if beta { "v1beta1" } else { "v1alpha1" };
    let head = json!({
        "kind": page.kind(),
        "apiVersion": format!("{GROUP}/{version}"),
        "metadata": {"name": COMPONENT},
    });
    let mut object = match head {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    match page {
        Zpage::Statusz => {
            object.insert("startTime".into(), json!(rfc3339(facts.started)));
            object.insert(
                "uptimeSeconds".into(),
                json!(uptime(facts.started).as_secs()),
            );
            // Not a Go binary; the field has no `omitempty` upstream.
            object.insert("goVersion".into(), json!(""));
            object.insert("binaryVersion".into(), json!(env!("CARGO_PKG_VERSION")));
            object.insert("emulationVersion".into(), json!(emulation_version()));
            object.insert("paths".into(), json!(PATHS));
        }
        Zpage::Flagz => {
            let flags: serde_json::Map<String, Value> = facts
                .flags
                .iter()
                .map(|(name, value)| (name.clone(), Value::String(value.clone())))
                .collect();
            if !flags.is_empty() {
                object.insert("flags".into(), Value::Object(flags));
            }
        }
    }
    let object = Value::Object(object);
    let body = match encoding {
        Encoding::Json => Ok(Bytes::from(object.to_string())),
        Encoding::Yaml => serde_yaml_ng::to_string(&object)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
        Encoding::Cbor => apiagg_apis::to_cbor(&object)
            .map(Bytes::from)
            .map_err(|e| e.to_string()),
    };
    let body = match body {
        Ok(body) => body,
        Err(e) => return Refusal::internal(format!("cannot encode /{}: {e}", page.page())).into(),
    };
    let reply = Reply::new(200, content_type(page, encoding, beta), body);
    if beta {
        return reply;
    }
    let warning = match page {
        Zpage::Statusz => {
            r#"299 - "This version of the statusz endpoint is deprecated. Please use a newer version.""#
        }
        Zpage::Flagz => {
            r#"299 - "This version of the flagz endpoint is deprecated. Please use a newer version.""#
        }
    };
    reply.header(http::header::WARNING, warning)
}

/// The text form, as upstream's text serializers write it.
fn text(page: Zpage, facts: &Facts<'_>, sep: &str) -> String {
    let mut out = format!("\n{COMPONENT} {}\n{WARNING}\n", page.page());
    match page {
        Zpage::Statusz => {
            let up = uptime(facts.started).as_secs();
            let (hours, minutes, seconds) = (up / 3600, (up / 60) % 60, up % 60);
            out.push_str(&format!(
                "\nStarted{sep} {}\nUp{sep} {hours} hr {minutes:02} min {seconds:02} sec\n\
                 Binary version{sep} {}\nEmulation version{sep} {}\nPaths{sep} {}\n",
                unix_date(facts.started),
                env!("CARGO_PKG_VERSION"),
                emulation_version(),
                PATHS.join(" "),
            ));
        }
        Zpage::Flagz => {
            for (name, value) in facts.flags {
                out.push_str(&format!("{name}{sep}{value}\n"));
            }
        }
    }
    out
}

/// The Kubernetes minor whose API apiagg serves, as `<major>.<minor>` (`/version`'s emulation).
fn emulation_version() -> String {
    format!("1.{}", apiagg_apis::KUBERNETES_MINOR)
}

fn uptime(started: SystemTime) -> Duration {
    started.elapsed().unwrap_or_default()
}

/// `metav1.Time`: RFC 3339 in UTC, whole seconds.
fn rfc3339(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at).map_or_else(
        |_| String::new(),
        |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// Go's `time.UnixDate` in UTC (`Wed Oct 16 21:03:43 UTC 2024`).
fn unix_date(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at).map_or_else(
        |_| String::new(),
        |t| t.strftime("%a %b %e %H:%M:%S UTC %Y").to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_negotiate_as_upstream() {
        use Encoding::*;
        use Negotiated::*;
        let cases: [(Option<&str>, Option<Negotiated>); 14] = [
            (None, Some(Text)),
            (Some("  "), Some(Text)),
            (Some("text/plain"), Some(Text)),
            (Some("*/*"), Some(Text)),
            (
                Some("application/json;v=foo;g=config.k8s.io;as=Statusz,*/*"),
                Some(Text),
            ),
            (
                Some("application/json;v=v1beta1;g=config.k8s.io;as=Statusz"),
                Some(Structured(Json, true)),
            ),
            (
                Some("application/json;as=Statusz;v=v1alpha1;g=config.k8s.io"),
                Some(Structured(Json, false)),
            ),
            (
                Some("application/yaml;v=v1beta1;g=config.k8s.io;as=Statusz"),
                Some(Structured(Yaml, true)),
            ),
            (
                Some("application/cbor;v=v1beta1;g=config.k8s.io;as=Statusz"),
                Some(Structured(Cbor, true)),
            ),
            (Some("application/xml"), None),
            (Some("application/json"), None),
            (Some("application/json;v=v1beta1;g=config.k8s.io"), None),
            (
                Some("application/json;v=v1beta1;g=config.k8s.io;as=Flagz"),
                None,
            ),
            (
                Some("text/plain;v=v1beta1;g=config.k8s.io;as=Statusz"),
                None,
            ),
        ];
        for (accept, want) in cases {
            assert_eq!(negotiate(accept, Zpage::Statusz), want, "{accept:?}");
        }
    }

    #[test]
    fn text_and_structured_forms() {
        let flags = [
            ("config".to_string(), "/etc/apiagg.yaml".to_string()),
            ("threads".to_string(), "2".to_string()),
        ];
        let started = SystemTime::UNIX_EPOCH + Duration::from_secs(1_729_112_623);
        let facts = Facts {
            started,
            flags: &flags,
        };
        let text = text(Zpage::Flagz, &facts, "=");
        assert!(
            text.starts_with("\napiagg flagz\nWarning: This endpoint"),
            "{text}"
        );
        assert!(
            text.ends_with("\nconfig=/etc/apiagg.yaml\nthreads=2\n"),
            "{text}"
        );
        let status = super::text(Zpage::Statusz, &facts, ": ");
        assert!(
            status.contains("\nStarted:  Wed Oct 16 21:03:43 UTC 2024\n"),
            "{status}"
        );
        assert!(status.contains("\nEmulation version:  1."), "{status}");
        let reply = structured(Zpage::Flagz, &facts, Encoding::Json, false);
        let (code, content_type, body) = reply.into_parts();
        assert_eq!(code, 200);
        assert_eq!(
            content_type,
            "application/json;g=config.k8s.io;v=v1alpha1;as=Flagz"
        );
        let object: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(object["apiVersion"], "config.k8s.io/v1alpha1");
        assert_eq!(object["flags"]["threads"], "2");
        let reply = structured(Zpage::Statusz, &facts, Encoding::Json, true);
        let object: Value = serde_json::from_slice(reply.body()).expect("json");
        assert_eq!(object["startTime"], "2024-10-16T21:03:43Z");
        assert_eq!(object["metadata"]["name"], "apiagg");
        assert!(object["uptimeSeconds"].as_u64().is_some_and(|s| s > 0));
    }
}
