//! Bounds a request gets on its way to a backend: a watch's lifetime, and a place in its
//! backend's bound of requests in flight.

use apiagg_requestinfo::RequestInfo;

use super::reply::{self, Reply};
use super::{ApiaggProxy, RequestCtx};
use crate::backends::Upstream;
use apiagg_observe::RouteKind;

impl ApiaggProxy {
    /// A watch ends, as kube-apiserver ends it, after the `timeoutSeconds` the client asked for
    /// or else after a random time between `--min-request-timeout` and twice it, passed to
    /// the backend as `timeoutSeconds` so that it ends the watch cleanly; apiagg cuts it a
    /// little later if the backend does not.
    pub(super) fn bound_watch(&self, ctx: &mut RequestCtx, info: &RequestInfo<'_>) {
        /// How long after its lifetime, at most, apiagg cuts a watch the backend did not end.
        const CUT_AFTER: std::time::Duration = std::time::Duration::from_secs(15);
        let watches = &self.gateway.watches;
        let asked = info
            .query
            .timeout_seconds
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|&t| t > 0);
        let lifetime = match asked {
            Some(seconds) => Some(std::time::Duration::from_secs(seconds)),
            None => {
                let lifetime = watches.lifetime();
                ctx.watch_timeout = lifetime.map(|l| l.as_secs());
                lifetime
            }
        };
        ctx.deadline = lifetime.and_then(|l| ctx.started.checked_add(l + l.min(CUT_AFTER)));
        ctx.watch = Some(watches.open());
    }

    /// One slow backend holds at most its share of the gateway: a request to a remote
    /// APIService takes a place in its bound once it holds its flow-control seat and was
    /// authorized, just before it is sent (a request waiting in a queue holds no place, so one
    /// caller's queued requests never lock others out of the backend). Long-running requests
    /// are bounded by the connection bound instead. `Err`: the 429 to answer.
    pub(super) fn reserve_backend(
        &self,
        ctx: &mut RequestCtx,
        upstream: &Upstream,
        info: &RequestInfo<'_>,
    ) -> Result<(), Reply> {
        if info.is_long_running() || !upstream.remote {
            return Ok(());
        }
        let cap = self.gateway.options.max_requests_per_apiservice;
        match upstream.slots.try_take(cap) {
            Some(slot) => {
                ctx.backend_slot = Some(slot);
                Ok(())
            }
            None => {
                ctx.kind = RouteKind::Proxy;
                Err(reply::backend_full(&upstream.label, cap))
            }
        }
    }
}
