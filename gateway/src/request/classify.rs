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
    fn shutdown_exemptions_are_exact() {
        assert!(exempt_from_shutdown(&classify("/readyz")));
        assert!(exempt_from_shutdown(&classify("/livez/ping")));
        assert!(exempt_from_shutdown(&classify("/metrics")));
        assert!(!exempt_from_shutdown(&classify("/metrics/x")));
        assert!(!exempt_from_shutdown(&classify("/healthzfoo")));
        assert!(!exempt_from_shutdown(&classify("/apis")));
    }
}
