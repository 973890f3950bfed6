//! The backend a forwarded request goes to, and its attempts there: which endpoint, which were
//! tried, whether the next attempt reuses the endpoint, the place taken in its bound.

use std::sync::Arc;

use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorType, Result};

use crate::backends::{IdleConnections, Slot, Upstream, UpstreamEndpoint};

/// Why no endpoint was picked when every healthy one holds its bound of requests.
const ENDPOINTS_FULL: &str = "every endpoint has --max-requests-inflight-per-endpoint requests";

/// The backend a forwarded request goes to, and its attempts there.
pub(super) struct Attempts {
    /// The backend (a remote APIService's or the delegate).
    pub(super) upstream: Arc<Upstream>,
    /// The endpoint of the current attempt.
    pub(super) endpoint: usize,
    /// Endpoints already tried (bit per index): a retry goes elsewhere.
    tried: u64,
    /// The next attempt reuses the endpoint (its pooled connection was stale).
    pub(super) retry_same: bool,
    /// The request goes on apiagg's own connections (impersonation at the delegate).
    pub(super) own_connection: bool,
    /// The request's place in its endpoint's bound (when its backend is bounded).
    endpoint_slot: Option<Slot>,
    /// The current attempt got the answer's head.
    pub(super) answered: bool,
}

impl Attempts {
    /// No attempt yet at `upstream`; `own_connection`: on apiagg's own connections
    /// (impersonation at the delegate).
    pub(super) fn new(upstream: Arc<Upstream>, own_connection: bool) -> Attempts {
        Attempts {
            upstream,
            endpoint: 0,
            tried: 0,
            retry_same: false,
            own_connection,
            endpoint_slot: None,
            answered: false,
        }
    }

    /// The endpoint of the current attempt.
    pub(super) fn current(&self) -> Option<&UpstreamEndpoint> {
        self.upstream.endpoints.get(self.endpoint)
    }

    /// Picks the endpoint of the next attempt: the same one again when its pooled connection
    /// was stale, else a healthy one not tried yet, with room in its bound `cap` when the
    /// backend is bounded (the place is taken).
    pub(super) fn pick(&mut self, cap: Option<usize>) -> Result<&UpstreamEndpoint> {
        let upstream = &self.upstream;
        let picked = if std::mem::take(&mut self.retry_same) {
            Some(self.endpoint)
        } else {
            self.endpoint_slot = None;
            upstream.pick_untried(self.tried, cap)
        };
        let Some(index) = picked else {
            return Error::e_explain(ErrorType::ConnectNoRoute, "upstream has no endpoints");
        };
        if let (Some(cap), None) = (cap, &self.endpoint_slot) {
            match upstream.endpoints[index].health.slots.try_take(cap) {
                Some(slot) => self.endpoint_slot = Some(slot),
                None => return Error::e_explain(ErrorType::ConnectNoRoute, ENDPOINTS_FULL),
            }
        }
        self.endpoint = index;
        self.answered = false;
        if index < 64 {
            self.tried |= 1 << index;
        }
        Ok(&upstream.endpoints[index])
    }

    /// Whether a healthy endpoint is left that no attempt tried.
    pub(super) fn has_untried(&self) -> bool {
        self.upstream.has_untried(self.tried)
    }

    /// The peer template of the current endpoint, for the request's identity.
    pub(super) fn peer(&self) -> Option<&HttpPeer> {
        let endpoint = self.current()?;
        Some(if self.own_connection {
            &endpoint.own_peer
        } else {
            &endpoint.peer
        })
    }

    /// The idle HTTP/1.1 connections of the current endpoint, for the request's identity.
    pub(super) fn idle_pool(&self) -> Option<&IdleConnections> {
        let endpoint = self.current()?;
        Some(if self.own_connection {
            &endpoint.own_idle
        } else {
            &endpoint.idle
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::fixtures::{index, table, CONFIG};

    /// The attempts of a request to wardle's two endpoints (`https://10.0.0.1`, `…2`).
    fn wardle() -> Attempts {
        let routes = table(CONFIG, &[]);
        let upstream = routes.upstreams[index(&routes, "v1.wardle.example.com")].clone();
        Attempts::new(upstream.expect("wardle's upstream"), false)
    }

    fn url(attempts: &mut Attempts, cap: Option<usize>) -> Result<String> {
        attempts.pick(cap).map(|e| e.url.to_string())
    }

    #[test]
    fn a_retry_goes_to_an_endpoint_not_tried_and_never_back() {
        let mut attempts = wardle();
        let first = url(&mut attempts, None).expect("first");
        assert!(attempts.has_untried());
        let second = url(&mut attempts, None).expect("second");
        assert_ne!(first, second, "the retry went back to {first}");
        assert!(!attempts.has_untried());
        let third = attempts
            .pick(None)
            .map(|e| e.url.clone())
            .expect_err("none left");
        assert_eq!(third.etype(), &ErrorType::ConnectNoRoute);
    }

    #[test]
    fn a_stale_pooled_connection_retries_the_same_endpoint_once() {
        let mut attempts = wardle();
        let first = url(&mut attempts, None).expect("first");
        attempts.retry_same = true;
        assert_eq!(url(&mut attempts, None).expect("again"), first);
        // The flag is spent: the next retry goes elsewhere.
        assert_ne!(url(&mut attempts, None).expect("other"), first);
    }

    #[test]
    fn an_ejected_endpoint_is_not_picked() {
        let upstream = wardle().upstream;
        upstream.endpoints[0].health.mark_failed("refused".into());
        for _ in 0..4 {
            let mut fresh = Attempts::new(upstream.clone(), false);
            assert_eq!(
                fresh.pick(None).expect("picked").url,
                upstream.endpoints[1].url
            );
            assert!(
                !fresh.has_untried(),
                "the ejected endpoint counts as untried"
            );
        }
    }

    #[test]
    fn a_bounded_backend_takes_a_place_and_refuses_when_every_endpoint_is_full() {
        let mut holder = wardle();
        let upstream = holder.upstream.clone();
        // A cap of one: two requests hold both endpoints' places.
        url(&mut holder, Some(1)).expect("one");
        let mut other = Attempts::new(upstream.clone(), false);
        url(&mut other, Some(1)).expect("two");
        let mut third = Attempts::new(upstream, false);
        let full = third
            .pick(Some(1))
            .map(|e| e.url.clone())
            .expect_err("full");
        assert_eq!(full.etype(), &ErrorType::ConnectNoRoute);
        // A place is given back when its holder goes.
        drop(holder);
        url(&mut third, Some(1)).expect("a place again");
    }
}
