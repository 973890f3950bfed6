//! Impersonation and authorization, in kube-apiserver's order around flow control: the
//! caller's `Impersonate-*` headers are authorized (webhook) and, once allowed, replace the
//! caller before flow control classifies the request (the headers are removed: the
//! impersonated user is what flow control, backends and the delegate see); the request itself
//! is authorized after flow control admitted it, so a flood is throttled before it costs
//! SubjectAccessReviews. Without an authorizer, apiagg's built-in rule guards what it serves
//! itself (`auth::Builtin`) and `Impersonate-*` goes to the delegate, which decides (the audit
//! records whom it asks for). Refusals are kube-apiserver's Status: 403 `Forbidden`, or 500
//! `InternalError` when the delegate could not decide.

use apiagg_apis::Reason;
use apiagg_requestinfo::RequestInfo;
use http::HeaderName;

use super::ctx::{RequestCtx, Session};
use super::refusal::Refusal;
use super::service::ApiaggProxy;
use crate::auth::{self, AuthzRequest, Reviewer, ACCESS_CHECKS, IMPERSONATE_PREFIX};
use crate::backends::RouteTable;

impl ApiaggProxy {
    /// Authorizes and applies the impersonation `ctx.caller` asks for. `Ok`: it goes on (as
    /// the impersonated user when it asked for one); `Err(reply)`: the answer instead.
    pub(super) async fn impersonate(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        info: &RequestInfo<'_>,
    ) -> Result<(), Refusal> {
        let authorizer = self.auth.authorizer();
        let Some(caller) = ctx.caller.as_ref().filter(|_| authorizer.enabled()) else {
            return Ok(());
        };
        let routes = self.gateway.routes.load();
        let outcome = {
            let (request, reviewer) = self.review(session, info, &routes, ctx.started);
            // Boxed: the webhook's state stays out of every request's future (pingora moves
            // that future by value, so its size is paid on every request).
            Box::pin(authorizer.impersonate(&request, caller, reviewer)).await
        };
        match outcome {
            Ok(None) => Ok(()),
            Err(refusal) => Err(self.refused(session, refusal)),
            Ok(Some(impersonated)) => {
                let header = session.req_header_mut();
                let honoured: Vec<HeaderName> = header
                    .headers
                    .keys()
                    .filter(|n| n.as_str().starts_with(IMPERSONATE_PREFIX))
                    .cloned()
                    .collect();
                for name in honoured {
                    header.remove_header(&name);
                }
                ctx.caller = Some(impersonated);
                Ok(())
            }
        }
    }

    /// Authorizes the request of `ctx.caller` and notes the decision and its reason in its
    /// audit. `Ok`: it goes on; `Err(reply)`: the answer instead.
    pub(super) async fn authorize(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        info: &RequestInfo<'_>,
    ) -> Result<(), Refusal> {
        let authorizer = self.auth.authorizer();
        let Some(caller) = ctx.caller.as_ref() else {
            return Ok(());
        };
        if !authorizer.enabled() {
            // No authorizer: apiagg's built-in rule for what it serves itself (a few compares).
            let header = session.req_header();
            let request = AuthzRequest {
                info,
                headers: &header.headers,
            };
            let checked = authorizer.check_builtin(&request, caller);
            return self.decided(session, ctx, checked.map(|()| String::new()));
        }
        let routes = self.gateway.routes.load();
        let outcome = {
            let (request, reviewer) = self.review(session, info, &routes, ctx.started);
            // Boxed, as above.
            Box::pin(authorizer.authorize(&request, caller, reviewer)).await
        };
        self.decided(session, ctx, outcome)
    }

    /// Notes `outcome` in the audit (kube-apiserver's annotations: `allow` or `forbid` with the
    /// authorizer's reason, or for an error only the reason `internal error`) and answers a
    /// refusal.
    fn decided(
        &self,
        session: &Session,
        ctx: &mut RequestCtx,
        outcome: Result<String, auth::Refusal>,
    ) -> Result<(), Refusal> {
        match outcome {
            Ok(reason) => {
                ctx.audit_authorized(Some(true), &reason);
                Ok(())
            }
            Err(refusal) => {
                match &refusal {
                    auth::Refusal::Forbidden { reason, .. } => {
                        ctx.audit_authorized(Some(false), reason)
                    }
                    auth::Refusal::Internal(_) => ctx.audit_authorized(None, ""),
                    auth::Refusal::TooManyValues(_) => ctx.audit_authorized(Some(false), ""),
                }
                Err(self.refused(session, refusal))
            }
        }
    }

    /// The request in `session` as the authorizer sees it, and where its reviews go (the
    /// delegate of `routes`, with apiagg's own clients) until when (the request `started`).
    fn review<'a>(
        &'a self,
        session: &'a Session,
        info: &'a RequestInfo<'a>,
        routes: &'a RouteTable,
        started: std::time::Instant,
    ) -> (AuthzRequest<'a>, Reviewer<'a>) {
        let request = AuthzRequest {
            info,
            headers: &session.req_header().headers,
        };
        let reviewer = Reviewer {
            delegate: routes.delegate.as_deref(),
            clients: &self.gateway.clients,
            metrics: &self.gateway.metrics,
            until: started + ACCESS_CHECKS,
        };
        (request, reviewer)
    }

    /// The answer to a refusal: 403 `Forbidden`, or 500 when nobody could decide.
    fn refused(&self, session: &Session, refusal: auth::Refusal) -> Refusal {
        match refusal {
            auth::Refusal::Forbidden {
                message, details, ..
            } => {
                tracing::debug!(
                    path = session.req_header().uri.path(),
                    "forbidden: {message}"
                );
                Refusal::new(Reason::Forbidden, message).details(details)
            }
            auth::Refusal::Internal(message) => {
                tracing::warn!("authorization failed: {message}");
                Refusal::internal(message)
            }
            auth::Refusal::TooManyValues(message) => {
                Refusal::new(Reason::RequestHeaderFieldsTooLarge, message)
            }
        }
    }
}
