//! Step 3a of `route` (phases.rs): auditing, as kube-apiserver's audit filter wraps the
//! aggregator.
//! Every request gets an audit ID (the caller's valid `Audit-ID`, or a new one) returned in the
//! `Audit-ID` response header and passed to backends and the delegate; the policy decides the
//! level once the caller is known (401s are audited with an empty user), the authorization
//! decision and impersonation are noted, bodies are captured as the level asks, and the
//! `ResponseComplete` event is written when the request ends (`record`, serve.rs). Events leave
//! through bounded queues: auditing never waits.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use super::Session;
use apiagg_requestinfo::RequestInfo;

use super::reply::Reply;
use super::{ApiaggProxy, RequestCtx};
use crate::auth::User;
use apiagg_audit::{AuditId, Begin, Identity, RequestAudit, StatusSummary, AUDIT_ID_HEADER};

/// The request headers the audit reads, parsed once (a `&str` name is parsed at every lookup).
const X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: http::HeaderName = http::HeaderName::from_static("x-real-ip");

impl Identity for User {
    fn username(&self) -> &str {
        &self.name
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn groups(&self) -> &[String] {
        &self.groups
    }
    fn extra(&self) -> &[(String, Vec<String>)] {
        &self.extra
    }
}

/// The user of a request whose credentials were refused (an empty `user` in the event).
struct Nobody;

impl Identity for Nobody {
    fn username(&self) -> &str {
        ""
    }
    fn uid(&self) -> &str {
        ""
    }
    fn groups(&self) -> &[String] {
        &[]
    }
    fn extra(&self) -> &[(String, Vec<String>)] {
        &[]
    }
}

impl ApiaggProxy {
    /// Starts the audit of a request once its caller is known (`None`: refused credentials).
    pub(super) fn audit_begin(
        &self,
        session: &Session,
        ctx: &mut RequestCtx,
        info: &RequestInfo<'_>,
        user: Option<Arc<User>>,
    ) {
        if !self.audit.is_enabled() {
            return;
        }
        let header = session.req_header();
        let id = header
            .headers
            .get(&AUDIT_ID_HEADER)
            .and_then(|v| AuditId::from_header(v.as_bytes()))
            .unwrap_or_else(AuditId::new);
        let user: Arc<dyn Identity> = match user {
            Some(user) => user,
            None => Arc::new(Nobody),
        };
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let source_ips = source_ips(header, peer);
        let request_uri = header
            .uri
            .path_and_query()
            .map_or_else(|| header.uri.path(), |pq| pq.as_str());
        let received = SystemTime::now()
            .checked_sub(ctx.started.elapsed())
            .unwrap_or_else(SystemTime::now);
        let begin = Begin {
            id: id.clone(),
            user,
            impersonated: None,
            info,
            request_uri,
            source_ips: &source_ips,
            user_agent: header
                .headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
            received,
        };
        ctx.audit.event = self.audit.begin(begin);
        // Formatted once: the backend and the caller both get it.
        ctx.audit.id = Some(Box::new(id.header_value()));
    }
}

/// A request's audit: its event while the policy's level is not None, its ID, and the Status
/// of an answer apiagg wrote itself.
#[derive(Default)]
pub(super) struct AuditState {
    event: Option<Box<RequestAudit>>,
    id: Option<Box<http::HeaderValue>>,
    status: Option<Box<StatusSummary>>,
}

impl AuditState {
    /// The audit event being written, when the request is audited.
    pub(super) fn ongoing(&mut self) -> Option<&mut RequestAudit> {
        self.event.as_deref_mut()
    }

    /// Notes the authorization decision with its reason (none: nobody could decide, an error),
    /// and the impersonated user.
    fn authorized(&mut self, allowed: Option<bool>, reason: &str, impersonated: Option<Arc<User>>) {
        if let Some(audit) = self.event.as_mut() {
            match allowed {
                Some(allowed) => audit.authorized(if allowed { "allow" } else { "forbid" }, reason),
                None => audit.authorization_failed(),
            }
            if let Some(user) = impersonated {
                audit.impersonating(user);
            }
        }
    }

    /// Notes an answer of the APIService API: its body when the level asks for it, and the
    /// Status it carries (read from the body the API rendered).
    pub(super) fn reply(&mut self, code: u16, body: &[u8]) {
        let Some(audit) = self.event.as_mut() else {
            return;
        };
        if audit.wants_response_body() {
            audit.response_body(body);
        }
        if code >= 400 {
            self.status = super::reply::status_of(body).map(Box::new);
        }
    }

    /// Notes an answer apiagg writes itself: its body when the level asks, and its Status.
    fn own_answer(&mut self, reply: &Reply) {
        if let Some(audit) = self.event.as_mut() {
            if audit.wants_response_body() {
                audit.response_body(reply.body());
            }
            self.status = reply.status().cloned().map(Box::new);
        }
    }

    /// Notes a request body, when the level asks.
    pub(super) fn request_body(&mut self, body: &[u8]) {
        if let Some(audit) = self.event.as_mut() {
            if audit.wants_request_body() {
                audit.request_body(body);
            }
        }
    }

    /// Writes the `ResponseComplete` event.
    fn complete(&mut self, code: u16) {
        if let Some(audit) = self.event.take() {
            audit.complete(code, self.status.take().map(|s| *s));
        }
    }

    /// The `Audit-ID` header value, when the request is audited.
    pub(super) fn id_header(&self) -> Option<http::HeaderValue> {
        self.id.as_deref().cloned()
    }
}

impl RequestCtx {
    /// Notes the authorization decision (none: an error) and its reason, and the impersonated
    /// user, in the request's audit, as kube-apiserver's `WithAuthorization` annotates it.
    pub(super) fn audit_authorized(&mut self, allowed: Option<bool>, reason: &str) {
        let impersonated = self
            .caller
            .as_ref()
            .filter(|c| c.method == crate::auth::Method::Impersonation)
            .map(|c| c.user.clone());
        self.audit.authorized(allowed, reason, impersonated);
    }

    /// The headers every answer apiagg writes itself carries: the audit ID and flow control's
    /// classification.
    pub(super) fn answer_headers(&self) -> Vec<(http::HeaderName, http::HeaderValue)> {
        let mut headers = Vec::new();
        if let Some(decision) = self.flow.classified() {
            for (name, value) in super::flow::reply_headers(decision) {
                headers.push((name, value.clone()));
            }
        }
        if let Some(id) = self.audit.id_header() {
            headers.push((AUDIT_ID_HEADER, id));
        }
        headers
    }

    /// An answer apiagg writes itself, noted in the audit and given the audit and flow-control
    /// headers.
    pub(super) fn own_answer(&mut self, reply: Reply) -> Reply {
        self.audit.own_answer(&reply);
        self.answer_headers()
            .into_iter()
            .fold(reply, |r, (name, value)| r.header(name, value))
    }

    /// Writes the `ResponseComplete` event (when the request ends).
    pub(super) fn audit_complete(&mut self, code: u16) {
        self.audit.complete(code);
    }
}

/// The client's addresses as kube-apiserver lists them: `X-Forwarded-For`, `X-Real-Ip`, then
/// the peer when it is not listed yet.
fn source_ips(header: &pingora_http::RequestHeader, peer: Option<IpAddr>) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = header
        .headers
        .get_all(&X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|ip| ip.trim().parse().ok())
        .collect();
    if ips.is_empty() {
        let real = header.headers.get(&X_REAL_IP).and_then(|v| v.to_str().ok());
        ips.extend(real.and_then(|ip| ip.trim().parse::<IpAddr>().ok()));
    }
    if let Some(peer) = peer.filter(|p| !ips.contains(p)) {
        ips.push(peer);
    }
    ips
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ips_list_forwarded_addresses_then_the_peer() {
        let mut header = pingora_http::RequestHeader::build("GET", b"/", None).expect("header");
        let peer: IpAddr = "10.0.0.9".parse().expect("ip");
        assert_eq!(source_ips(&header, Some(peer)), vec![peer]);
        header
            .insert_header("x-forwarded-for", "1.2.3.4, 10.0.0.9")
            .expect("xff");
        let listed: Vec<IpAddr> = vec!["1.2.3.4".parse().expect("ip"), peer];
        assert_eq!(source_ips(&header, Some(peer)), listed);
    }
}
