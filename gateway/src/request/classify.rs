//! Where a path goes, decided from the path alone (pure).

use super::openapi::OpenApiPath;
use crate::observe::HealthEndpoint;

/// The route of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// `/healthz`, `/livez`, `/readyz`, with the check name after it (empty for all).
    Health(HealthEndpoint, &'a str),
    /// `/metrics`
    Metrics,
    /// `/debug/apiagg/status`
    Status,
    /// `/version`
    Version,
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

/// Classifies a request path.
pub fn classify(path: &str) -> Route<'_> {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    let (first, rest) = trimmed.split_once('/').unwrap_or((trimmed, ""));
    if let Some(endpoint) = HealthEndpoint::from_segment(first) {
        return Route::Health(endpoint, rest);
    }
    match first {
        "metrics" if rest.is_empty() => Route::Metrics,
        "debug" if rest == "apiagg/status" => Route::Status,
        "version" if rest.is_empty() => Route::Version,
        "api" => Route::GroupVersion("/v1"),
        "openapi" => OpenApiPath::parse(rest).map_or(Route::Other, Route::OpenApi),
        "apis" => {
            if rest.is_empty() {
                return Route::Apis {
                    slash: trimmed.len() > 4,
                };
            }
            let mut parts = rest.splitn(3, '/');
            match (parts.next(), parts.next()) {
                (Some(g), Some(v)) if !g.is_empty() && !v.is_empty() => {
                    Route::GroupVersion(&rest[..g.len() + 1 + v.len()])
                }
                (Some(g), None | Some("")) if !g.is_empty() => Route::Group(g),
                _ => Route::Other,
            }
        }
        _ => Route::Other,
    }
}

/// Why a request path is refused before routing: apiagg routes and forwards only canonical
/// paths, so the route it picks is the path every backend sees (no `..`, `//` or `%2F` can
/// make the two differ).
pub fn non_canonical(path: &str) -> Option<&'static str> {
    let Some(rest) = path.strip_prefix('/') else {
        return Some("it does not start with \"/\"");
    };
    let bytes = path.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b < 0x20 || b == 0x7f || b == b'\\' {
            return Some("it contains a control character or a backslash");
        }
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                None => return Some("it contains an invalid percent-encoding"),
                Some(b'/' | b'\\') => return Some("it contains an encoded \"/\" or \"\\\""),
                Some(c) if c < 0x20 || c == 0x7f => {
                    return Some("it contains an encoded control character")
                }
                Some(_) => {}
            }
        }
    }
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        // One trailing slash is a real path (`/apis/`); an empty segment elsewhere is `//`.
        if segment.is_empty() && i != last {
            return Some("it contains an empty segment (\"//\")");
        }
        let dots = segment.to_ascii_lowercase().replace("%2e", ".");
        if dots == "." || dots == ".." {
            return Some("it contains a \".\" or \"..\" segment");
        }
    }
    None
}

/// Whether a route is still served while shutting down (spec §11.3): health and metrics.
pub fn exempt_from_shutdown(route: &Route<'_>) -> bool {
    matches!(route, Route::Health(..) | Route::Metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("/openapi/v2", Route::OpenApi(OpenApiPath::V2)),
            (
                "/openapi/v3/api/v1",
                Route::OpenApi(OpenApiPath::V3Document("api/v1")),
            ),
            ("/openapi/v1", Route::Other),
        ];
        for (path, expected) in cases {
            assert_eq!(classify(path), expected, "{path}");
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
            "/apis/a.io/v1/foos/a%2eb",
            "/openapi/v3/apis/a.io/v1",
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
    fn shutdown_exemptions_are_exact() {
        assert!(exempt_from_shutdown(&classify("/readyz")));
        assert!(exempt_from_shutdown(&classify("/livez/ping")));
        assert!(exempt_from_shutdown(&classify("/metrics")));
        assert!(!exempt_from_shutdown(&classify("/metrics/x")));
        assert!(!exempt_from_shutdown(&classify("/healthzfoo")));
        assert!(!exempt_from_shutdown(&classify("/apis")));
    }
}
