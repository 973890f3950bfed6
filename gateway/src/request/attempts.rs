//! The backend a forwarded request goes to, and its attempts there: which endpoint, which were
//! tried, whether the next attempt reuses the endpoint, the place taken in its bound.

use std::sync::Arc;

use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorType, Result};

use crate::backends::{IdleConnections, Slot, Upstream, UpstreamEndpoint};

/// Why no endpoint was picked when every healthy one holds its bound of requests.
const ENDPOINTS_FULL: &str = "every endpoint has --max-requests-inflight-per-endpoint requests";

/// The backend a forwarded request goes to, and its attempts there.
#[derive(Default)]
pub(super) struct Attempts {
    /// The backend (a remote APIService's or the delegate).
    pub(super) upstream: Option<Arc<Upstream>>,
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
    /// The endpoint of the current attempt.
    pub(super) fn current(&self) -> Option<&UpstreamEndpoint> {
        self.upstream.as_ref()?.endpoints.get(self.endpoint)
    }

    /// Picks the endpoint of the next attempt: the same one again when its pooled connection
    /// was stale, else a healthy one not tried yet, with room in its bound `cap` when the
    /// backend is bounded (the place is taken).
    pub(super) fn pick(&mut self, cap: Option<usize>) -> Result<&UpstreamEndpoint> {
        let Some(upstream) = &self.upstream else {
            return Error::e_explain(ErrorType::InternalError, "no upstream selected");
        };
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
        self.upstream
            .as_ref()
            .is_some_and(|u| u.has_untried(self.tried))
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
