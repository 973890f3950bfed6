//! What a failure on the proxy path means: which endpoint to eject, whether pingora may retry,
//! which upstream answers apiagg replaces, and the Status a client gets instead of an empty 502.

use pingora_error::{Error, ErrorSource, ErrorType};

use super::reply::{self, Reply};
use crate::backends::{own_exhaustion, Failure, HealthBook, Upstream};
use apiagg_observe::RouteKind;

/// Passive failure detection: the failure goes to the availability controller, which ejects the
/// endpoint and publishes it without waiting for its next probe. An endpoint already out is not
/// reported again.
pub fn eject(health: &HealthBook, upstream: &Upstream, index: usize, e: &Error) {
    let Some(endpoint) = upstream.endpoints.get(index) else {
        return;
    };
    if !endpoint.health.is_healthy() {
        return;
    }
    health.report(Failure {
        health: endpoint.health.clone(),
        backend: upstream.label.clone(),
        url: endpoint.url.clone(),
        message: format!("failing or missing response from {}: {e}", endpoint.url),
    });
}

/// What apiagg itself ran out of, when that is why connecting failed (then no endpoint is to
/// blame).
pub fn exhausted(e: &Error) -> Option<&'static str> {
    own_exhaustion(e.root_cause()).or_else(|| own_exhaustion(e))
}

/// Whether an error on an established upstream connection shows the endpoint is broken.
pub fn endpoint_broken(e: &Error, client_reused: bool) -> bool {
    !client_reused
        && e.esource() == &ErrorSource::Upstream
        && matches!(
            e.etype(),
            ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
        )
}

/// The Status apiagg writes for an upstream answer it must not pass on: a redirect from a
/// remote backend (502), or a 404 from the delegate before mux completion (503, as
/// k8s.io/apiserver's `pkg/util/notfoundhandler/not_found_handler.go`). Negotiated by the
/// caller (JSON or CBOR), as every `Status` apiagg writes.
pub fn replacement(
    kind: RouteKind,
    code: u16,
    redirects: bool,
    arrived_complete: bool,
) -> Option<Reply> {
    if kind == RouteKind::Proxy {
        let redirect = (300..400).contains(&code) && redirects;
        return redirect.then(|| {
            let message = "the backend attempted to redirect this request, which is not permitted";
            reply::failure_reply(502, "BadGateway", message)
        });
    }
    (code == 404 && !arrived_complete).then(reply::mux_incomplete_reply)
}

/// The answer to a request whose backend could not be reached; `target` names it.
pub fn unreachable(kind: RouteKind, arrived_complete: bool, target: &str, e: &Error) -> Reply {
    let message = format!("error trying to reach service {target}: {e}");
    // Before mux completion the delegate may simply not be there yet: say so, with
    // Retry-After, exactly like an unknown path at that time.
    if kind == RouteKind::Delegate && !arrived_complete {
        reply::mux_incomplete_reply()
    } else {
        reply::failure_reply(503, "ServiceUnavailable", &message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_remote_redirects_and_early_delegate_404s_are_replaced() {
        let proxied_redirect = replacement(RouteKind::Proxy, 302, true, true);
        assert_eq!(proxied_redirect.map(|r| r.code()), Some(502));
        assert!(replacement(RouteKind::Proxy, 304, false, true).is_none());
        assert!(replacement(RouteKind::Proxy, 404, false, false).is_none());
        let early = replacement(RouteKind::Delegate, 404, false, false);
        assert_eq!(early.map(|r| r.code()), Some(503));
        assert!(replacement(RouteKind::Delegate, 404, false, true).is_none());
    }

    #[test]
    fn broken_endpoints_are_upstream_io_failures_on_fresh_connections() {
        let closed = Error::explain(ErrorType::ConnectionClosed, "x").into_up();
        assert!(endpoint_broken(&closed, false));
        assert!(!endpoint_broken(&closed, true));
        let downstream = Error::explain(ErrorType::ReadError, "x").into_down();
        assert!(!endpoint_broken(&downstream, false));
    }
}
