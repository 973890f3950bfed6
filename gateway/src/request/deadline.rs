//! How long a forwarded request may take (k8s.io/apiserver's `pkg/server/filters/timeout.go`
//! and, for discovery, `pkg/util/proxy/proxy.go`): long-running requests (watch, proxy,
//! attach, exec, log, portforward) are unbounded; a backend's discovery document
//! (`/apis/<g>/<v>`) gets 5 s; everything else `--request-timeout`, or a shorter `?timeout=`.
//! All of it is read from the request's one parse ([`RequestInfo`]).

use std::time::{Duration, Instant};

use apiagg_requestinfo::{go_quote, QueryParams, RequestInfo};

/// What bounds a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Watches, proxies, exec and friends: no deadline.
    LongRunning,
    /// `/apis/<g>/<v>`: expiry is a 503, as the aggregator's discovery context.
    Discovery(Duration),
    /// Any other request: expiry is a 504 Timeout Status.
    Request(Duration),
}

/// Why a request's limit cannot be read: a 400 `BadRequest`, as upstream. Not retryable: the
/// request must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// `?timeout=` is not a Go duration, with Go's `time.ParseDuration` error (upstream's
    /// wording). Not retryable.
    #[error("invalid timeout specified in the request URL - {0}")]
    InvalidTimeout(String),
}

/// The deadline result.
type Result<T, E = LimitError> = std::result::Result<T, E>;

/// The discovery bound kube-aggregator gives `/apis/<g>/<v>`.
pub const DISCOVERY: Duration = Duration::from_secs(5);

/// The limit of a request, from its one parse; `Err` for an unreadable `?timeout=` (a 400, as
/// upstream).
pub fn limit(info: &RequestInfo<'_>, default: Duration) -> Result<Limit> {
    if info.segment(0) == "apis" && info.total_segments() == 3 {
        return Ok(Limit::Discovery(DISCOVERY));
    }
    if info.is_long_running() {
        return Ok(Limit::LongRunning);
    }
    let asked = match QueryParams::decoded(info.query.timeout).filter(|t| !t.is_empty()) {
        None => None,
        Some(text) => {
            let parsed = go_duration(&text);
            Some(parsed.ok_or_else(|| LimitError::InvalidTimeout(go_duration_error(&text)))?)
        }
    };
    Ok(Limit::Request(asked.map_or(default, |t| t.min(default))))
}

/// The time left to `deadline` (`None` without one); an error once it passed.
pub fn left(deadline: Option<Instant>) -> pingora_error::Result<Option<Duration>> {
    let Some(deadline) = deadline else {
        return Ok(None);
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return pingora_error::Error::e_explain(
            pingora_error::ErrorType::ReadTimedout,
            "the request deadline passed",
        );
    }
    Ok(Some(left))
}

/// Bounds a peer's connect by `connect` and, when the request has time `left`, its connect,
/// reads and writes by it.
pub fn bound(
    options: &mut pingora_core::upstreams::peer::PeerOptions,
    connect: Duration,
    left: Option<Duration>,
) {
    options.connection_timeout = Some(connect);
    options.total_connection_timeout = Some(connect);
    if let Some(left) = left {
        options.connection_timeout = Some(connect.min(left));
        options.total_connection_timeout = Some(connect.min(left));
        options.read_timeout = Some(left);
        options.write_timeout = Some(left);
    }
}

/// The limit that ended a failed request: `Some` when `e` is a timeout and the deadline passed.
pub fn expired(deadline: Option<Instant>, limit: Limit, e: &pingora_error::Error) -> Option<Limit> {
    use pingora_error::ErrorType::{
        ConnectTimedout, ReadTimedout, TLSHandshakeTimedout, WriteTimedout,
    };
    let timed_out = matches!(
        e.etype(),
        ReadTimedout | WriteTimedout | ConnectTimedout | TLSHandshakeTimedout
    );
    (timed_out && deadline.is_some_and(|d| Instant::now() >= d)).then_some(limit)
}

/// Parses a Go duration (`30s`, `1m30s`, `1.5h`, `250ms`), as `?timeout=` carries it.
pub fn go_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    (total.is_finite() && total < 1e9).then(|| Duration::from_secs_f64(total))
}

/// Go's `time.ParseDuration` error for `text`, which [`go_duration`] refused.
fn go_duration_error(text: &str) -> String {
    let quoted = go_quote(text);
    let invalid = || format!("time: invalid duration {quoted}");
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if rest[..number_len].parse::<f64>().is_err() {
            return invalid();
        }
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        if unit.is_empty() {
            return format!("time: missing unit in duration {quoted}");
        }
        if !["ns", "us", "µs", "μs", "ms", "s", "m", "h"].contains(&unit) {
            return format!("time: unknown unit {} in duration {quoted}", go_quote(unit));
        }
        rest = &rest[unit_len..];
    }
    invalid()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn long_running_discovery_and_bounded_requests() {
        let request = Limit::Request(MINUTE);
        let cases = [
            ("/apis/a.io/v1", None, Limit::Discovery(DISCOVERY)),
            ("/apis/a.io/v1/", None, Limit::Discovery(DISCOVERY)),
            ("/apis/a.io/v1/foos", None, request),
            ("/apis/a.io/v1/foos", Some("watch=true"), Limit::LongRunning),
            (
                "/apis/a.io/v1/foos",
                Some("watch=1&x=y"),
                Limit::LongRunning,
            ),
            ("/apis/a.io/v1/foos", Some("watch=false"), request),
            ("/apis/a.io/v1/watch/foos", None, Limit::LongRunning),
            ("/api/v1/namespaces/x/pods/p/exec", None, Limit::LongRunning),
            ("/api/v1/namespaces/x/pods/p/log", None, Limit::LongRunning),
            ("/api/v1/namespaces/x/pods/p/status", None, request),
            (
                "/api/v1/namespaces/x/services/s/proxy",
                None,
                Limit::LongRunning,
            ),
            ("/api/v1/nodes/n/proxy", None, Limit::LongRunning),
            ("/api/v1/namespaces/exec", None, request),
            ("/api/v1/pods", None, request),
            ("/version", None, request),
            (
                "/apis/a.io/v1/foos",
                Some("timeout=5s"),
                Limit::Request(Duration::from_secs(5)),
            ),
            ("/apis/a.io/v1/foos", Some("timeout=5m"), request),
        ];
        let limit_of = |path, query| {
            let info = RequestInfo::new("GET", path, query).expect("request info");
            limit(&info, MINUTE)
        };
        for (path, query, expected) in cases {
            assert_eq!(limit_of(path, query), Ok(expected), "{path}?{query:?}");
        }
        assert_eq!(
            limit_of("/api/v1/pods", Some("timeout=soon")),
            Err(LimitError::InvalidTimeout(
                "time: invalid duration \"soon\"".into()
            ))
        );
        // Go's own words for each way a duration fails, as kube-apiserver appends them.
        for (text, go) in [
            ("soon", r#"time: invalid duration "soon""#),
            ("5", r#"time: missing unit in duration "5""#),
            ("5x", r#"time: unknown unit "x" in duration "5x""#),
        ] {
            assert_eq!(go_duration_error(text), go, "{text}");
        }
    }

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(go_duration("30s"), Some(ms(30_000)));
        assert_eq!(go_duration("1m30s"), Some(ms(90_000)));
        assert_eq!(go_duration("1.5h"), Some(ms(5_400_000)));
        assert_eq!(go_duration("250ms"), Some(ms(250)));
        for bad in ["", "5", "s", "5x", "-1s", "1e3s"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }
}
