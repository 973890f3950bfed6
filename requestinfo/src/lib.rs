//! One parse of a request: the attributes kube-apiserver's `requestinfo.go` derives from the
//! method, the path and the query (verb, API prefix, group, version, namespace, resource,
//! subresource, name, parts) and the query parameters read once with upstream's first-value rule.
//! Routing, authorization, deadlines, the APIService API and metrics all read this value, so they
//! can never disagree about what a request asks for. Pure and allocation-free for the common
//! request: every field borrows from the request line.

mod go_text;
mod labels;
mod query;
mod selector;

use std::borrow::Cow;

pub use self::go_text::go_quote;
pub use self::labels::{
    label_key_errors, label_value_errors, regex_error, subdomain_errors, FieldError, LabelOperator,
    LabelRequirement, LabelSelector, LabelSelectorError, RequirementError,
};
pub use self::query::{decode_value, QueryParams};
pub use self::selector::{FieldSelector, FieldTerm, SelectorError};

/// How many leading path segments are kept for routing (the subresource of
/// `/apis/<g>/<v>/namespaces/<ns>/<resource>/<name>/<subresource>` is the eighth).
pub const KEPT_SEGMENTS: usize = 8;

/// Verbs that take a path segment of their own (`/api/v1/watch/pods`).
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
/// Subresources of a namespace that are not resources of their own.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];
/// Subresources kube-apiserver treats as long-running (`BasicLongRunningRequestCheck`).
const LONG_RUNNING_SUBRESOURCES: [&str; 5] = ["attach", "exec", "log", "portforward", "proxy"];

/// Why a path cannot be described. kube-apiserver answers these with 500 from its
/// `WithRequestInfo` filter; apiagg answers 400 (the client sent it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InfoError {
    /// `/api/v1/watch` or `/apis/<g>/<v>/proxy` with nothing after the verb. Not retryable:
    /// the path must change.
    #[error("unable to determine kind and namespace from url {0}")]
    NoKind(String),
    /// The query has a pair Go's servers skip (a `;` or an invalid `%` escape): apiagg and a
    /// backend would read different values. Not retryable: the query must change.
    #[error("the query has a parameter with ';' or an invalid '%' escape, which servers read differently; send it without")]
    AmbiguousQuery,
}

/// The result of describing a request.
type Result<T, E = InfoError> = std::result::Result<T, E>;

/// The attributes of one request (k8s.io/apiserver `request.RequestInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo<'a> {
    /// The path as sent (canonical: checked before this parse).
    pub path: &'a str,
    /// Whether the path names a resource (`/api/<v>/…` or `/apis/<g>/<v>/…` with a resource).
    pub resource_request: bool,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// `proxy` for resource requests; the lower-case method otherwise.
    pub verb: Cow<'static, str>,
    /// `api` or `apis` (empty for other paths).
    pub api_prefix: &'a str,
    /// API group (empty for the core group and non-resource paths).
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// Namespace (empty when cluster-scoped).
    pub namespace: &'a str,
    /// Resource.
    pub resource: &'a str,
    /// Subresource.
    pub subresource: &'a str,
    /// Object name: from the path, or from an exact `metadata.name` field selector of a list.
    pub name: Cow<'a, str>,
    /// The path after the prefix, group, version, special verb and namespace, as upstream's
    /// `Parts` (`resource/name/subresource/…`).
    pub parts: &'a str,
    /// The query parameters, first value of each.
    pub query: QueryParams<'a>,
    segments: [&'a str; KEPT_SEGMENTS],
    /// Segments kept in `segments`.
    count: usize,
    /// Segments in the path.
    total: usize,
}

impl<'a> RequestInfo<'a> {
    /// Parses a request. `path` must already be canonical (no empty, dot or encoded-slash
    /// segments); `query` is the raw query string.
    pub fn new(method: &str, path: &'a str, query: Option<&'a str>) -> Result<Self> {
        let query = QueryParams::parse(query.unwrap_or(""));
        if query.ambiguous {
            return Err(InfoError::AmbiguousQuery);
        }
        let trimmed = path.trim_start_matches('/');
        let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
        let mut segments = [""; KEPT_SEGMENTS];
        let mut total = 0;
        if !trimmed.is_empty() {
            // A plain byte scan: request paths are short, and `str::split`'s searcher costs
            // more than it saves here (this runs for every request).
            let mut start = 0;
            for (i, byte) in trimmed.bytes().enumerate().chain([(trimmed.len(), b'/')]) {
                if byte == b'/' {
                    if let Some(slot) = segments.get_mut(total) {
                        *slot = &trimmed[start..i];
                    }
                    total += 1;
                    start = i + 1;
                }
            }
        }
        let count = total.min(KEPT_SEGMENTS);
        let mut info = RequestInfo {
            path,
            resource_request: false,
            verb: lower_method(method),
            api_prefix: "",
            group: "",
            version: "",
            namespace: "",
            resource: "",
            subresource: "",
            name: Cow::Borrowed(""),
            parts: "",
            query,
            segments,
            count,
            total,
        };
        info.describe(method, trimmed)?;
        Ok(info)
    }

    /// Fills in the resource attributes, as `RequestInfoFactory.NewRequestInfo` does.
    fn describe(&mut self, method: &str, trimmed: &'a str) -> Result<()> {
        let prefix = self.segment(0);
        let grouped = match prefix {
            "apis" => true,
            "api" => false,
            _ => return Ok(()),
        };
        // At least prefix, version and resource; `apis` also needs the group.
        let needed = if grouped { 4 } else { 3 };
        if self.total_segments() < needed {
            return Ok(());
        }
        self.api_prefix = prefix;
        let mut at = 1;
        if grouped {
            self.group = self.segment(1);
            at = 2;
        }
        self.resource_request = true;
        self.version = self.segment(at);
        at += 1;
        let mut verb: Cow<'static, str> = Cow::Borrowed(match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        });
        let first = self.segment(at);
        if SPECIAL_VERBS.contains(&first) {
            if self.total_segments() < at + 2 {
                return Err(InfoError::NoKind(self.path.to_string()));
            }
            verb = Cow::Borrowed(if first == "proxy" { "proxy" } else { "watch" });
            at += 1;
        }
        if self.segment(at) == "namespaces" && self.total_segments() > at + 1 {
            self.namespace = self.segment(at + 1);
            let third = self.total_segments() > at + 2;
            if third && !NAMESPACE_SUBRESOURCES.contains(&self.segment(at + 2)) {
                at += 2;
            }
        }
        self.parts = self.after_in(trimmed, at);
        let mut parts = self.parts.splitn(4, '/');
        self.resource = parts.next().unwrap_or("");
        let name = parts.next().unwrap_or("");
        if verb != "proxy" {
            self.subresource = parts.next().unwrap_or("");
        }
        self.name = Cow::Borrowed(name);
        if name.is_empty() && verb == "get" {
            let watch = self.query.watch();
            verb = Cow::Borrowed(if watch { "watch" } else { "list" });
            if let Some(selected) = self.query.selected_name() {
                self.name = selected;
            }
        }
        if self.name.is_empty() && verb == "delete" {
            verb = Cow::Borrowed("deletecollection");
        }
        self.verb = verb;
        Ok(())
    }

    /// Segment `i` of the path (`""` past the end or past [`KEPT_SEGMENTS`]).
    pub fn segment(&self, i: usize) -> &'a str {
        if i < self.count {
            self.segments[i]
        } else {
            ""
        }
    }

    /// How many segments the path has (a trailing slash adds none).
    pub fn total_segments(&self) -> usize {
        self.total
    }

    /// The path from segment `i` on (without its leading `/`); `""` past the end.
    pub fn after(&self, i: usize) -> &'a str {
        if i >= self.count {
            return "";
        }
        &self.path[self.offset_of(i)..]
    }

    fn after_in(&self, trimmed: &'a str, i: usize) -> &'a str {
        if i >= self.count {
            return "";
        }
        let start = self.offset_of(i) - (trimmed.as_ptr() as usize - self.path.as_ptr() as usize);
        &trimmed[start..]
    }

    /// Byte offset of segment `i` in `path`.
    fn offset_of(&self, i: usize) -> usize {
        self.segments[i].as_ptr() as usize - self.path.as_ptr() as usize
    }

    /// Whether kube-apiserver treats the request as long-running (watch, proxy, attach, exec,
    /// log, portforward): no request deadline applies.
    pub fn is_long_running(&self) -> bool {
        matches!(&*self.verb, "watch" | "proxy")
            || (self.resource_request && LONG_RUNNING_SUBRESOURCES.contains(&self.subresource))
    }

    /// Whether the request changes state (`create`, `update`, `patch`, `delete`,
    /// `deletecollection`; for non-resource paths any method but GET, HEAD and OPTIONS).
    pub fn is_write(&self) -> bool {
        if self.resource_request {
            !matches!(&*self.verb, "get" | "list" | "watch" | "proxy")
        } else {
            !matches!(&*self.verb, "get" | "head" | "options")
        }
    }

    /// The route key `<group>/<version>` of a grouped path (`"<g>/<v>"`), `"/v1"`-style for the
    /// core group (`"/<v>"`), from the path even when it names no resource (`/apis/<g>/<v>`).
    pub fn group_version_key(&self) -> Option<&'a str> {
        match (self.segment(0), self.segment(1), self.segment(2)) {
            ("apis", g, v) if !g.is_empty() && !v.is_empty() => {
                let start = self.offset_of(1);
                Some(&self.path[start..start + g.len() + 1 + v.len()])
            }
            _ => None,
        }
    }
}

/// The lower-case method (upstream's non-resource verb); no allocation for the standard ones.
fn lower_method(method: &str) -> Cow<'static, str> {
    const STANDARD: [(&str, &str); 9] = [
        ("GET", "get"),
        ("POST", "post"),
        ("PUT", "put"),
        ("PATCH", "patch"),
        ("DELETE", "delete"),
        ("HEAD", "head"),
        ("OPTIONS", "options"),
        ("CONNECT", "connect"),
        ("TRACE", "trace"),
    ];
    STANDARD.iter().find(|(m, _)| *m == method).map_or_else(
        || Cow::Owned(method.to_ascii_lowercase()),
        |(_, v)| Cow::Borrowed(*v),
    )
}

/// `%XX` sequences of a path segment decoded (Go's `URL.Path`); invalid UTF-8 is replaced.
pub fn decode_segment(segment: &str) -> Cow<'_, str> {
    percent_encoding::percent_decode_str(segment).decode_utf8_lossy()
}

#[cfg(test)]
mod tests;
