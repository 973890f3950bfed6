//! What happens to a backend's answer on its way back (its head and body), and the answer to a
//! request that could not be proxied: the request path's second half, called by `phases.rs`.

use std::time::Instant;

use bytes::Bytes;
use pingora_error::{Error, ErrorSource, ErrorType, Result};
use pingora_http::ResponseHeader;
use pingora_proxy::{FailToProxy, Session};

use super::reply;
use super::{deadline, errors, ApiaggProxy, RequestCtx};
use apiagg_audit::AUDIT_ID_WIRE;
use apiagg_observe::RouteKind;

impl ApiaggProxy {
    /// The backend's response head: classification and audit headers added, remote backends' CORS headers dropped, answers apiagg must not pass on
    /// replaced by a Status.
    pub(super) fn filter_head(
        &self,
        response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let Some(decision) = ctx.classified() {
            for (name, value) in super::flow::headers(decision) {
                response.insert_header(name, value.clone())?;
            }
        }
        if let Some(id) = super::audit::id_header(ctx) {
            response.insert_header(AUDIT_ID_WIRE, id)?;
        }
        if let Some(audit) = ctx.audit.as_mut() {
            audit.response_started(response.status.as_u16());
        }
        let cors = |name: &http::HeaderName| name.as_str().starts_with("access-control-allow-");
        if ctx.kind == RouteKind::Proxy && response.headers.keys().any(cors) {
            for name in [
                http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
                http::header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                http::header::ACCESS_CONTROL_ALLOW_HEADERS,
                http::header::ACCESS_CONTROL_ALLOW_METHODS,
            ] {
                response.remove_header(&name);
            }
        }
        let code = response.status.as_u16();
        if ctx.streaming_list && matches!(code, 400 | 422) {
            // The backend may refuse streaming lists after all: the next one probes again.
            if let Some(upstream) = &ctx.upstream {
                upstream.watch_list.recheck();
            }
        }
        let redirects = response.headers.contains_key(http::header::LOCATION);
        let Some((code, body)) =
            errors::replacement(ctx.kind, code, redirects, ctx.arrived_complete)
        else {
            return Ok(());
        };
        response.set_status(code)?;
        for name in ["location", "transfer-encoding", "content-encoding", "etag"] {
            response.remove_header(name);
        }
        response.insert_header("Content-Type", reply::JSON)?;
        response.insert_header("Content-Length", body.len().to_string())?;
        if code == 503 {
            response.insert_header("Retry-After", reply::MUX_RETRY_AFTER_SECONDS.to_string())?;
        }
        ctx.replacement = Some(body);
        ctx.replacing = true;
        Ok(())
    }

    /// A piece of the backend's body: recorded for the audit, replaced when the head was, or
    /// the answer cut when its deadline passed or the process is ending the watch.
    pub(super) fn filter_body(
        &self,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<std::time::Duration>> {
        if let (Some(audit), Some(piece)) = (ctx.audit.as_mut(), body.as_ref()) {
            if audit.wants_response_body() && !ctx.replacing {
                audit.response_body(piece);
            }
        }
        if ctx.replacing {
            *body = ctx.replacement.take();
        } else if !end_of_stream && ctx.deadline.is_some_and(|d| Instant::now() >= d) {
            // The answer started in time but does not end in time: cut it, as upstream does.
            // A watch past its lifetime is expected to end: the client re-watches.
            if ctx.watch.is_some() {
                ctx.ended_by_us = true;
                tracing::debug!("watch cut: the backend did not end it after its timeoutSeconds");
            }
            return Error::e_explain(ErrorType::ReadTimedout, "the request deadline passed");
        } else if let (false, Some(watch)) = (end_of_stream, &ctx.watch) {
            // The process is terminating: this watch's turn in the drain came (the client
            // re-watches, at another replica).
            let watches = &self.gateway.watches;
            if watches.drain_ends(watch, Instant::now()) {
                watches.ended_by_drain();
                ctx.ended_by_us = true;
                return Error::e_explain(ErrorType::ReadTimedout, "the watch ended at shutdown");
            }
        }
        Ok(None)
    }

    /// The answer to a request that failed for good: a Status instead of pingora's empty 502,
    /// unless the client is gone or a response was already started.
    pub(super) async fn fail(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let downstream_gone = e.esource() == &ErrorSource::Downstream;
        if !downstream_gone && !ctx.ended_by_us {
            self.log_failure(ctx, e);
        }
        if downstream_gone || session.response_written().is_some() {
            ctx.code = 0;
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            };
        }
        let target = ctx.upstream.as_ref().map_or_else(
            || "no backend".to_string(),
            |u| {
                let authority = u.endpoints.get(ctx.endpoint).map_or("", |e| &e.authority);
                format!("{} at {authority}", u.label)
            },
        );
        let full = ctx.backend_slot.is_some() && e.etype() == &ErrorType::ConnectNoRoute;
        let reply = match deadline::expired(ctx.deadline, ctx.limit, e) {
            _ if full && ctx.upstream.as_ref().is_some_and(|u| u.available()) => {
                let cap = self.gateway.options.max_requests_per_endpoint;
                reply::backend_full(&target, cap)
            }
            Some(deadline::Limit::Request(_)) => reply::timeout_reply(),
            Some(_) => reply::failure_reply(
                503,
                "ServiceUnavailable",
                &format!("error trying to reach service {target}: context deadline exceeded"),
            ),
            None => errors::unreachable(ctx.kind, ctx.arrived_complete, &target, e),
        };
        let reply = ctx.own_answer(reply);
        // The connection is closed after a failed proxy attempt: pingora may not reuse it (a
        // body half read, an abandoned upstream side), and a client must know before it sends
        // the next request on it.
        let reply_code = reply.code();
        session.set_keepalive(None);
        let code = match reply.send(session).await {
            Ok(()) => reply_code,
            Err(_) => 0,
        };
        if ctx.kind == RouteKind::Proxy {
            let (group, version) = ctx
                .upstream
                .as_ref()
                .and_then(|u| u.metrics.as_ref())
                .map_or(("", ""), |m| (m.group(), m.version()));
            let method = session.req_header().method.as_str().to_string();
            self.gateway
                .metrics
                .terminated(&method, group, version, reply_code);
        }
        ctx.code = code;
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }
}
