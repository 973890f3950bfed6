//! Steps 8 and 9 of the request path, for a request to a backend: it takes its places (a
//! remote APIService's bound of requests in flight, a descriptor of the open-file budget), and
//! its [`Dispatch`] is decided once: how the caller is stated to the backend, whether its head
//! fits what the backend accepts, and whether it is tunnelled (an upgrade), emulated (a
//! streaming list the backend does not honour) or forwarded.

use std::sync::Arc;

use apiagg_apis::Reason;
use apiagg_requestinfo::RequestInfo;
use pingora_error::Result;

use super::ctx::{Dispatch, RequestCtx, Session, Step, To};
use super::forward::{self, Forwarding, Identity};
use super::refusal::Refusal;
use super::service::ApiaggProxy;
use super::watch_position::WatchPosition;
use super::{upgrade, watch_list};
use crate::auth::Authenticated;
use crate::backends::Upstream;
use apiagg_observe::RouteKind;

impl ApiaggProxy {
    /// Steps 8 and 9 for a request to `upstream` (a remote APIService's backend, or the
    /// delegate).
    pub(super) async fn dispatch(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        upstream: Arc<Upstream>,
        info: &RequestInfo<'_>,
    ) -> Result<Step> {
        let delegate_authenticates = ctx
            .caller
            .as_ref()
            .is_none_or(Authenticated::delegate_authenticates);
        let to = match (upstream.remote, delegate_authenticates) {
            (true, _) => To::Remote,
            (false, true) => To::DelegateAsCaller,
            (false, false) => To::DelegateImpersonating,
        };
        let dispatch = Dispatch { upstream, to };
        ctx.outcome.kind = dispatch.kind();

        // 8. Places, taken only by a request about to be sent: one in a remote APIService's
        // bound (its 429s count as the APIService's answers), and a descriptor.
        if to == To::Remote {
            let cap = self.gateway.options.max_requests_per_apiservice;
            if let Err(full) = ctx.bounds.reserve_backend(cap, &dispatch.upstream, info) {
                ctx.outcome.sent_to(&dispatch.upstream);
                return Ok(Step::Answer(RouteKind::Proxy, full.into()));
            }
        }
        if let Err(out_of_files) = ctx.bounds.take_file(&self.open_files) {
            return Ok(Step::refused(out_of_files));
        }

        // 9. Dispatch. A remote backend learns the caller as `X-Remote-*` only: an
        // impersonation apiagg did not honour cannot reach it (step 4 refused it already for a
        // caller whose credentials the delegate cannot see).
        let asks_impersonation = forward::asks_impersonation(session.req_header());
        if to == To::Remote && asks_impersonation {
            return Ok(Step::refused(impersonation_refused()));
        }
        // Nothing is sent that kube-apiserver would refuse for its size: a caller in too many
        // groups gets 431 naming the limit (forward/size.rs).
        let (identity, token) = Identity::of(to, ctx.user(), &dispatch.upstream).size();
        if let Err(too_large) = forward::check_size(session, identity, token) {
            let refusal = Refusal::new(Reason::RequestHeaderFieldsTooLarge, too_large.to_string());
            return Ok(Step::refused(refusal));
        }
        if let (true, Some(audit)) = (asks_impersonation, ctx.audit.ongoing()) {
            // `Impersonate-*` apiagg did not honour goes to the delegate, which acts as that
            // user once it allowed it: the audit names whom the request asks to be.
            if let Some(user) = crate::auth::requested_impersonation(&session.req_header().headers)
            {
                audit.impersonating(Arc::new(user));
            }
        }
        // Only WebSocket and SPDY/3.1 upgrades are tunnelled; any other mention of an upgrade
        // is refused (and the connection closes: the client may follow up in the protocol it
        // asked for), so no forwarded request carries an `Upgrade` header.
        match upgrade::is_upgrade(session.req_header()) {
            Ok(true) => return Ok(Step::Tunnel(dispatch)),
            Ok(false) => {}
            Err(refused) => {
                return Ok(Step::refused(
                    Refusal::bad_request(refused.to_string()).closing(),
                ))
            }
        }
        if info.verb == "watch" {
            let ends = ctx
                .bounds
                .bound_watch(&self.gateway.watches, ctx.started, info);
            if to != To::Remote && dispatch.upstream.endpoints.len() > 1 && session.is_body_empty()
            {
                // A watch to an HA control plane resumes on another API server when its own
                // dies (resume.rs); no other request carries this.
                ctx.resume = Some(Box::new(WatchPosition::for_watch(&info.query, ends)));
            }
            if to == To::Remote && watch_list::asked(info) {
                // Boxed: the emulation's state stays out of every request's future.
                let served = Box::pin(self.watch_list(session, ctx, &dispatch, info)).await?;
                if served {
                    return Ok(Step::Served);
                }
                ctx.outcome.streaming_list = true;
            }
            // Handed to the backend or the delegate, which holds the watch's initial phase:
            // the seat goes back now, not when (or if) the backend sends the head.
            ctx.flow.delegated();
        }
        Ok(Step::Forward(dispatch))
    }

    /// The header policy of this request to `dispatch`'s backend (forward.rs).
    pub(super) fn forwarding<'a>(
        &'a self,
        session: &Session,
        ctx: &'a RequestCtx,
        dispatch: &'a Dispatch,
    ) -> Forwarding<'a> {
        Forwarding {
            client_ip: session
                .client_addr()
                .and_then(|a| a.as_inet())
                .map(|a| a.ip()),
            proto: if self.gateway.options.serving_tls {
                "https"
            } else {
                "http"
            },
            identity: Identity::of(dispatch.to, ctx.user(), &dispatch.upstream),
            auth: &self.auth,
            trace: ctx.trace.headers(),
        }
    }
}

/// 403 for `Impersonate-*` apiagg did not honour, on a request the delegate cannot decide it
/// for (a remote APIService's, or a caller whose credentials the delegate cannot see).
pub(super) fn impersonation_refused() -> Refusal {
    Refusal::new(
        Reason::Forbidden,
        "impersonation is honoured by apiagg only when an authorizer that decides it (a webhook \
         or RBAC) allows it, and otherwise only by the delegate, for callers it authenticates \
         itself (bearer tokens); send the request without Impersonate-* headers",
    )
}
