//! Step 3a of the request path (phases.rs): auditing, as kube-apiserver's audit filter wraps the
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

use apiagg_requestinfo::RequestInfo;
use pingora_core::protocols::http::ServerSession as Session;

use super::reply::Reply;
use crate::auth::User;
use apiagg_audit::{
    AuditId, Auditor, Begin, Identity, RequestAudit, StatusSummary, AUDIT_ID_HEADER,
};

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

/// A request's audit: its event while the policy's level is not None, its ID, and the Status
/// of an answer apiagg wrote itself.
#[derive(Default)]
pub(super) struct AuditState {
    event: Option<Box<RequestAudit>>,
    id: Option<Box<http::HeaderValue>>,
    status: Option<Box<StatusSummary>>,
}

impl AuditState {
    /// Starts the audit of a request received at `started` once its caller is known (`None`:
    /// refused credentials, or refused before authentication).
    pub(super) fn begin(
        &mut self,
        auditor: &Auditor,
        session: &Session,
        started: std::time::Instant,
        info: &RequestInfo<'_>,
        user: Option<Arc<User>>,
    ) {
        if !auditor.is_enabled() {
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
            .checked_sub(started.elapsed())
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
        self.event = auditor.begin(begin);
        // Read only when the level records the body: CBOR and YAML are transcoded to JSON.
        if let Some(event) = self.event.as_deref_mut().filter(|e| e.wants_request_body()) {
            let content_type = header.headers.get(http::header::CONTENT_TYPE);
            if let Some(content_type) = content_type.and_then(|v| v.to_str().ok()) {
                event.request_content_type(content_type);
            }
        }
        // Formatted once: the backend and the caller both get it.
        self.id = Some(Box::new(id.header_value()));
    }

    /// The audit event being written, when the request is audited.
    pub(super) fn ongoing(&mut self) -> Option<&mut RequestAudit> {
        self.event.as_deref_mut()
    }

    /// Notes the authorization decision with its reason (none: nobody could decide, an error),
    /// and the impersonated user.
    pub(super) fn authorized(
        &mut self,
        allowed: Option<bool>,
        reason: &str,
        impersonated: Option<Arc<User>>,
    ) {
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

    /// Notes an answer apiagg writes itself: its body when the level asks, and its Status.
    pub(super) fn own_answer(&mut self, reply: &Reply) {
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
    pub(super) fn complete(&mut self, code: u16) {
        if let Some(audit) = self.event.take() {
            audit.complete(code, self.status.take().map(|s| *s));
        }
    }

    /// The `Audit-ID` header value, when the request is audited.
    pub(super) fn id_header(&self) -> Option<http::HeaderValue> {
        self.id.as_deref().cloned()
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
