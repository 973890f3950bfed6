//! What a failure on the proxy path means: which endpoint to eject, whether pingora may retry,
//! which upstream answers apiagg replaces, and the Status a client gets instead of an empty 502.

use pingora_error::{Error, ErrorSource, ErrorType};

use super::refusal::Refusal;
use crate::backends::{own_exhaustion, Failure, HealthBook, Upstream};
use apiagg_apis::Reason;
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

/// Whether `e` says the connection (or the HTTP/2 stream) died, rather than timed out or
/// carried something malformed.
pub fn connection_died(e: &Error) -> bool {
    matches!(
        e.etype(),
        ErrorType::ConnectionClosed
            | ErrorType::ReadError
            | ErrorType::WriteError
            | ErrorType::H2Error
    )
}

/// Whether the backend refused the request's HTTP/2 stream unprocessed: a graceful GOAWAY that
/// left the stream above its last stream ID, or `RST_STREAM(REFUSED_STREAM)` (RFC 9113 §8.7).
/// Such a request never ran, so sending it again is safe for any method, and Go's transport
/// retries it on another connection more than once.
pub fn refused_unprocessed(e: &Error) -> bool {
    e.root_cause()
        .downcast_ref::<h2::Error>()
        .is_some_and(|h2| {
            h2.is_remote()
                && ((h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR))
                    || (h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM)))
        })
}

/// What is known of an exchange with a backend that failed after connecting.
#[derive(Clone, Copy, Debug)]
pub struct Exchanged {
    /// The request may be sent again: idempotent, its body kept whole for a replay.
    pub movable: bool,
    /// The failure is the backend's side (not the client's).
    pub from_backend: bool,
    /// pingora's verdict on the error, for a pooled (`reused`) or a new connection.
    pub retryable: bool,
    /// The connection or stream died (or the endpoint was ejected) before the answer's head.
    pub lost_unanswered: bool,
    /// The connection came from a pool.
    pub reused: bool,
    /// A healthy endpoint is left that no attempt tried.
    pub untried: bool,
}

/// Whether a failed exchange is sent again, and to the same endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Next {
    pub again: bool,
    pub same_endpoint: bool,
}

/// The retry rule after connecting: only a request that may move, failed on the backend's
/// side, goes again, when pingora says so (a stale pooled connection) or when its connection
/// was lost before the answer's head (a GOAWAY's refused stream, a backend gone mid-request,
/// an endpoint ejected while it waited) and there is somewhere to go: another endpoint, or a
/// new connection to this one when the dead one was pooled. Another endpoint is preferred (this
/// one may be going away).
pub fn after_exchange(x: &Exchanged) -> Next {
    if !x.movable || !x.from_backend {
        return Next {
            again: false,
            same_endpoint: false,
        };
    }
    let again = x.retryable || (x.lost_unanswered && (x.reused || x.untried));
    Next {
        again,
        same_endpoint: again && !x.untried,
    }
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
) -> Option<Refusal> {
    if kind == RouteKind::Proxy {
        let redirect = (300..400).contains(&code) && redirects;
        return redirect.then(|| {
            let message = "the backend attempted to redirect this request, which is not permitted";
            Refusal::new(Reason::BadGateway, message)
        });
    }
    (code == 404 && !arrived_complete).then(Refusal::mux_incomplete)
}

/// The answer to a request whose backend could not be reached; `target` names it.
pub fn unreachable(kind: RouteKind, arrived_complete: bool, target: &str, e: &Error) -> Refusal {
    let message = format!("error trying to reach service {target}: {e}");
    // Before mux completion the delegate may simply not be there yet: say so, with
    // Retry-After, exactly like an unknown path at that time.
    if kind == RouteKind::Delegate && !arrived_complete {
        Refusal::mux_incomplete()
    } else {
        Refusal::unavailable(message)
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
    fn only_movable_backend_failures_go_again_and_elsewhere_when_they_can() {
        let base = Exchanged {
            movable: true,
            from_backend: true,
            retryable: false,
            lost_unanswered: false,
            reused: false,
            untried: true,
        };
        let next = |x: Exchanged| {
            let n = after_exchange(&x);
            (n.again, n.same_endpoint)
        };
        // (the exchange, sent again, to the same endpoint)
        let rows = [
            // A timeout or a malformed answer on a fresh connection: never again.
            (base, (false, false)),
            // pingora's verdict (a stale pooled connection): another endpoint first…
            (
                Exchanged {
                    retryable: true,
                    reused: true,
                    ..base
                },
                (true, false),
            ),
            // …the same one when none is left.
            (
                Exchanged {
                    retryable: true,
                    reused: true,
                    untried: false,
                    ..base
                },
                (true, true),
            ),
            // Lost before the head: elsewhere, or on a new connection when the dead one was
            // pooled; a fresh connection to the only endpoint is not tried twice.
            (
                Exchanged {
                    lost_unanswered: true,
                    ..base
                },
                (true, false),
            ),
            (
                Exchanged {
                    lost_unanswered: true,
                    untried: false,
                    reused: true,
                    ..base
                },
                (true, true),
            ),
            (
                Exchanged {
                    lost_unanswered: true,
                    untried: false,
                    ..base
                },
                (false, false),
            ),
            // A POST, or a body too large to replay, or the client's own failure: never.
            (
                Exchanged {
                    movable: false,
                    retryable: true,
                    lost_unanswered: true,
                    ..base
                },
                (false, false),
            ),
            (
                Exchanged {
                    from_backend: false,
                    retryable: true,
                    ..base
                },
                (false, false),
            ),
        ];
        for (exchanged, expected) in rows {
            assert_eq!(next(exchanged), expected, "{exchanged:?}");
        }
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
