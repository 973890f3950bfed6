//! Where a path goes, decided from the path alone (pure).

use apiagg_requestinfo::RequestInfo;

use super::openapi::OpenApiPath;
use super::statusz::Zpage;
use apiagg_observe::HealthEndpoint;

/// The route of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// `/healthz`, `/livez`, `/readyz`, with the check name after it (empty for all).
    Health(HealthEndpoint, &'a str),
    /// `/metrics`
    Metrics,
    /// `/debug/apiagg/status`
    Status,
    /// `/debug/api_priority_and_fairness/dump_priority_levels` (apiagg's own flow control).
    FlowDump,
    /// `/version`
    Version,
    /// `/statusz` and `/flagz` (apiagg's own z-pages, statusz.rs).
    Zpage(Zpage),
    /// `/apis` (`slash` false) or `/apis/` (`slash` true).
    Apis { slash: bool },
    /// `/apis/<g>` or `/apis/<g>/`.
    Group(&'a str),
    /// `/openapi/v2`, `/openapi/v3[/<key>]`.
    OpenApi(OpenApiPath<'a>),
    /// `/api[/…]` or `/apis/<g>/<v>[/…]`: route key `"<g>/<v>"` (`"/v1"` for the core group).
    GroupVersion(&'a str),
    /// Anything else (the delegate's, or nobody's).
    Other,
}

/// Classifies a request from its one parse (the segments of its canonical path).
pub fn classify<'a>(info: &RequestInfo<'a>) -> Route<'a> {
    let first = info.segment(0);
    if let Some(endpoint) = HealthEndpoint::from_segment(first) {
        return Route::Health(endpoint, info.after(1));
    }
    let alone = info.total_segments() == 1;
    match first {
        "metrics" if alone => Route::Metrics,
        "debug" if info.after(1) == "apiagg/status" => Route::Status,
        "debug" if info.after(1) == "api_priority_and_fairness/dump_priority_levels" => {
            Route::FlowDump
        }
        "version" if alone => Route::Version,
        "statusz" if alone => Route::Zpage(Zpage::Statusz),
        "flagz" if alone => Route::Zpage(Zpage::Flagz),
        "api" => Route::GroupVersion("/v1"),
        "openapi" => match OpenApiPath::parse(info.after(1)) {
            Some(OpenApiPath::V3Document(key, _)) => {
                Route::OpenApi(OpenApiPath::V3Document(key, info.query.hash))
            }
            Some(path) => Route::OpenApi(path),
            None => Route::Other,
        },
        "apis" if alone => Route::Apis {
            slash: info.path.ends_with('/'),
        },
        "apis" => match info.group_version_key() {
            Some(key) => Route::GroupVersion(key),
            None if info.total_segments() == 2 => Route::Group(info.segment(1)),
            None => Route::Other,
        },
        _ => Route::Other,
    }
}

/// Why a request path is refused before routing: apiagg routes and forwards only canonical
/// paths, so the route it picks is the path every backend sees. Refused: no leading `/`, a
/// `.` or `..` segment, an empty segment (`//`), a control character or `\`, an invalid `%`
/// escape, and an escape of what a backend would decode into something that changes the
/// route: `/` and `\` (`%2F`, `%5C`), a control character, and any unreserved character
/// (RFC 3986 §2.3: ALPHA, DIGIT, `-`, `.`, `_`, `~`; e.g. `%2E`, `%61`), whose only canonical
/// form is unencoded (a Go backend decodes the path before routing, apiagg routes the raw
/// one). Hex digits of either case. Other escapes (`%3A`, `%20`, `%25`, ...) stay: they name
/// no separator, and no group, version or fixed path contains them.
pub fn non_canonical(path: &str) -> Option<&'static str> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Some("it does not start with \"/\"");
    }
    // One pass over the bytes (this runs for every request); `start` is where the current
    // segment begins.
    let mut start = 1;
    let mut i = 0;
    while i < bytes.len() {
        i += 1;
        // Most bytes are plain: skip them at a few instructions each.
        while bytes.get(i).is_some_and(|&b| !NOTABLE[usize::from(b)]) {
            i += 1;
        }
        match bytes.get(i).copied() {
            end @ (None | Some(b'/')) => {
                let segment = &bytes[start..i];
                // One trailing slash is a real path (`/apis/`); an empty segment elsewhere
                // is `//`.
                if segment.is_empty() && end.is_some() {
                    return Some("it contains an empty segment (\"//\")");
                }
                if is_dot_segment(segment) {
                    return Some("it contains a \".\" or \"..\" segment");
                }
                start = i + 1;
            }
            Some(b) if b < 0x20 || b == 0x7f || b == b'\\' => {
                return Some("it contains a control character or a backslash");
            }
            Some(b'%') => {
                let decoded = match (bytes.get(i + 1), bytes.get(i + 2)) {
                    (Some(&high), Some(&low)) => hex(high).zip(hex(low)).map(|(h, l)| h << 4 | l),
                    _ => None,
                };
                match decoded {
                    None => return Some("it contains an invalid percent-encoding"),
                    Some(b'/' | b'\\') => return Some("it contains an encoded \"/\" or \"\\\""),
                    Some(c) if c < 0x20 || c == 0x7f => {
                        return Some("it contains an encoded control character")
                    }
                    Some(c)
                        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') =>
                    {
                        return Some(
                            "it contains a percent-encoded unreserved character (such as \
                             \"%2E\" for \".\"); send it unencoded",
                        )
                    }
                    Some(_) => {}
                }
            }
            Some(_) => {}
        }
    }
    None
}

/// The bytes [`non_canonical`] looks at: separators, escapes and what must not appear.
static NOTABLE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[0x7f] = true;
    table[b'/' as usize] = true;
    table[b'%' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// The value of a hexadecimal digit.
fn hex(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).map(|d| d as u8)
}

/// Whether a segment is `.` or `..` (an encoded dot is refused before the segment ends).
fn is_dot_segment(segment: &[u8]) -> bool {
    matches!(segment, b"." | b"..")
}

/// Whether a path is still served while shutting down: health probes and metrics, by
/// k8s.io/apiserver's `pathPrefixesExemptFromRetryAfter` (`pkg/server/filters/
/// with_retry_after.go`), which are prefixes (`/metrics/slis` too).
pub fn exempt_from_shutdown(path: &str) -> bool {
    ["/readyz", "/livez", "/healthz", "/metrics"]
        .iter()
        .any(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(path: &str) -> Route<'_> {
        classify(&RequestInfo::new("GET", path, None).expect("request info"))
    }

    #[test]
    fn classifies_paths() {
        let cases = [
            ("/apis/a.io/v1", Route::GroupVersion("a.io/v1")),
            (
                "/apis/a.io/v1/namespaces/x/foos",
                Route::GroupVersion("a.io/v1"),
            ),
            ("/apis/a.io/v1/", Route::GroupVersion("a.io/v1")),
            ("/apis/a.io", Route::Group("a.io")),
            ("/apis/a.io/", Route::Group("a.io")),
            ("/apis", Route::Apis { slash: false }),
            ("/apis/", Route::Apis { slash: true }),
            ("/api", Route::GroupVersion("/v1")),
            ("/api/v1/pods", Route::GroupVersion("/v1")),
            (
                "/readyz/shutdown",
                Route::Health(HealthEndpoint::Readyz, "shutdown"),
            ),
            ("/metrics", Route::Metrics),
            ("/metricsfoo", Route::Other),
            ("/version", Route::Version),
            ("/statusz", Route::Zpage(Zpage::Statusz)),
            ("/flagz", Route::Zpage(Zpage::Flagz)),
            ("/flagz/x", Route::Other),
            ("/openapi/v2", Route::OpenApi(OpenApiPath::V2)),
            (
                "/openapi/v3/api/v1",
                Route::OpenApi(OpenApiPath::V3Document("api/v1", None)),
            ),
            ("/openapi/v1", Route::Other),
        ];
        for (path, expected) in cases {
            assert_eq!(route(path), expected, "{path}");
        }
    }

    #[test]
    fn only_canonical_paths_are_routed() {
        for path in [
            "/",
            "/apis",
            "/apis/",
            "/apis/a.io/v1/namespaces/x/foos/y",
            "/api/v1/namespaces/x/pods/y%3Az/proxy/",
            "/openapi/v3/apis/a.io/v1",
            // Reserved and other escapes name no separator: kept.
            "/apis/a.io/v1/foos/a%20b%25c%3Fd%23e%3Bf%40g%C3%A9",
            "/apis/a.io/v1/foos/%2a%2B%7B",
        ] {
            assert_eq!(non_canonical(path), None, "{path}");
        }
        for path in [
            "",
            "*",
            "//apis/a.io/v1/x",
            "/apis//a.io/v1",
            "/apis/a.io/v1/../../b.io/v1/x",
            "/apis/a.io/v1/%2e%2E/x",
            "/apis/a.io/./v1",
            "/apis/a.io%2Fv1/x",
            "/apis/a.io/v1%2fx",
            "/apis/a.io/v1/x%5cy",
            "/apis/a.io/v1/x%zz",
            "/apis/a.io/v1/x%2",
            "/apis/a.io/v1/x%00",
            "/apis/a.io/v1/x\\y",
        ] {
            assert!(non_canonical(path).is_some(), "{path}");
        }
    }

    #[test]
    fn encoded_unreserved_characters_are_refused_with_their_cause() {
        let unreserved = "it contains a percent-encoded unreserved character (such as \
                          \"%2E\" for \".\"); send it unencoded";
        let slash = "it contains an encoded \"/\" or \"\\\"";
        let control = "it contains an encoded control character";
        let invalid = "it contains an invalid percent-encoding";
        let dots = "it contains a \".\" or \"..\" segment";
        let cases = [
            // The attack: the delegate decodes the group, apiagg would route the raw one.
            ("/apis/apiregistration%2Ek8s.io/v1/apiservices", unreserved),
            ("/apis/apiregistration%2ek8s.io/v1/apiservices", unreserved),
            // Encoded dot segments, both cases, whole or half encoded.
            ("/apis/a.io/v1/%2E%2E/x", unreserved),
            ("/apis/a.io/v1/%2e%2e/x", unreserved),
            ("/apis/a.io/v1/.%2e/x", unreserved),
            ("/apis/a.io/v1/%2e", unreserved),
            // Letters, digits and the other unreserved marks, at any place.
            ("/%61pis/a.io/v1", unreserved),
            ("/apis/a.io/v%31/x", unreserved),
            ("/apis/a.io/v1/x%41", unreserved),
            ("/apis/a.io/v1/x%7a", unreserved),
            ("/apis/a%2Dio/v1", unreserved),
            ("/apis/a.io/v1/x%5Fy", unreserved),
            ("/apis/a.io/v1/x%7Ey", unreserved),
            ("/metric%73", unreserved),
            // What else a backend would decode into a separator or worse.
            ("/apis/a.io/v1/x%5Cy", slash),
            ("/apis/a.io/v1/x%5cy", slash),
            ("/apis/a.io%2fv1/x", slash),
            ("/apis/a.io/v1/x%0A", control),
            ("/apis/a.io/v1/x%7f", control),
            ("/apis/a.io/v1/x%2", invalid),
            ("/apis/a.io/v1/x%g1", invalid),
            ("/apis/a.io/v1/../x", dots),
            ("/apis/a.io/v1/.", dots),
        ];
        for (path, why) in cases {
            assert_eq!(non_canonical(path), Some(why), "{path}");
        }
    }

    #[test]
    fn shutdown_exemptions_are_upstreams_prefixes() {
        for path in [
            "/readyz",
            "/livez/ping",
            "/metrics",
            "/metrics/slis",
            "/healthzfoo",
        ] {
            assert!(exempt_from_shutdown(path), "{path}");
        }
        for path in ["/apis", "/api/v1/readyz", "/version", "/"] {
            assert!(!exempt_from_shutdown(path), "{path}");
        }
    }
}
