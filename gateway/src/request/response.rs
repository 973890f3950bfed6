//! What happens to a backend's answer on its way back (its head and body), and the answer to a
//! request that could not be proxied.

use std::time::Instant;

use bytes::Bytes;
use pingora_error::{Error, ErrorSource, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};

use super::backend::Backend;
use super::ctx::{RequestCtx, Session};
use super::refusal::Refusal;
use super::reply::Reply;
use super::service::ApiaggProxy;
use super::{deadline, errors, flow, framing};
use apiagg_audit::AUDIT_ID_HEADER;
use apiagg_observe::RouteKind;

/// Informational (1xx) heads accepted before the final one (net/http's `max1xxResponses`).
const MAX_INFORMATIONAL: u32 = 5;

impl ApiaggProxy {
    /// The backend's answer, relayed once its first head arrived: its head (informational ones
    /// included, for an HTTP/1.1 client) through [`Self::filter_head`], then its body piece by piece, each written before
    /// the next is read. A watch also ends at its deadline or at its turn in the shutdown drain,
    /// even while no event comes. `Ok(true)`: the backend connection may be reused.
    pub(super) async fn relay_answer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        backend: &mut Backend,
    ) -> Result<bool> {
        let answered_well = if ctx.resume.as_ref().is_some_and(|p| p.resuming()) {
            // A watch resumed on another endpoint: the client has its head (resume.rs). Boxed:
            // the rare branch stays out of every answer's future.
            if !Box::pin(self.resumed_head(session, ctx, backend)).await? {
                return Ok(false);
            }
            true
        } else {
            let mut head = final_head(session, backend).await?;
            framing::strip_response_hop_by_hop(&mut head);
            if let Some(position) = ctx.resume.as_deref_mut() {
                position.answered(&head);
            }
            let answered_well = head.status.is_success();
            self.filter_head(&mut head, session.req_header(), ctx);
            if !session.is_http2() {
                framing::frame_for_http11(
                    &mut head,
                    session.req_header().method == http::Method::HEAD,
                );
            }
            session
                .write_response_header(Box::new(ResponseHeader::from(head)))
                .await
                .map_err(|e| e.into_down())?;
            if let Some(body) = ctx.outcome.replacement.take() {
                session
                    .write_response_body(body, true)
                    .await
                    .map_err(|e| e.into_down())?;
                // The backend's own body was not read: its connection is not reused.
                return Ok(false);
            }
            answered_well
        };
        loop {
            let piece = match (&ctx.bounds.watch, ctx.bounds.deadline) {
                (Some(watch), deadline) => {
                    // A watch whose client stopped reading blocks in its write: the write may
                    // block only until the watch's deadline.
                    if let Some(deadline) = deadline {
                        let left = deadline.saturating_duration_since(Instant::now());
                        session
                            .set_write_timeout(Some(left.max(std::time::Duration::from_millis(1))));
                    }
                    let watches = &self.gateway.watches;
                    let until = deadline.map(tokio::time::Instant::from_std);
                    tokio::select! {
                        biased;
                        piece = backend.read_response_body() => piece?,
                        () = watches.turn(watch) => {
                            // The process is terminating and this watch's turn in the drain
                            // came: it ends cleanly, as kube-apiserver's watch handler returns
                            // (END_STREAM, or the last chunk; no reset), and the client
                            // re-watches, at another replica. The backend's body was not read
                            // to its end: its connection is not reused.
                            watches.ended_by_drain();
                            ctx.outcome.ended_by_us = true;
                            session.finish_body().await.map_err(|e| e.into_down())?;
                            return Ok(false);
                        }
                        () = sleep_until(until) => {
                            ctx.outcome.ended_by_us = true;
                            tracing::debug!("watch cut: the backend did not end it after its timeoutSeconds");
                            return Error::e_explain(ErrorType::ReadTimedout, "the request deadline passed");
                        }
                    }
                }
                (None, _) => backend.read_response_body().await?,
            };
            let Some(piece) = piece else { break };
            self.filter_body(&piece, ctx)?;
            ctx.flow.count_list_bytes(piece.len());
            // A resumable watch passes whole event lines only (watch_position.rs).
            let piece = match ctx.resume.as_deref_mut() {
                Some(position) => position.pass(piece),
                None => piece,
            };
            if piece.is_empty() {
                continue;
            }
            session
                .write_response_body(piece, false)
                .await
                .map_err(|e| e.into_down())?;
        }
        if let Some(rest) = ctx.resume.as_deref_mut().and_then(|p| p.rest()) {
            session
                .write_response_body(rest, false)
                .await
                .map_err(|e| e.into_down())?;
        }
        if session.is_http2() {
            if let Some(trailers) = backend.read_trailers().await? {
                session
                    .write_response_trailers(trailers)
                    .await
                    .map_err(|e| e.into_down())?;
            }
        }
        session.finish_body().await.map_err(|e| e.into_down())?;
        if let (true, Some(flow)) = (answered_well, &self.flow) {
            ctx.flow.list_answered(flow);
        }
        Ok(backend.response_done())
    }

    /// The backend's response head: classification and audit headers added, remote backends' CORS headers dropped, answers apiagg must not pass on
    /// replaced by a Status.
    pub(super) fn filter_head(
        &self,
        response: &mut http::response::Parts,
        req: &RequestHeader,
        ctx: &mut RequestCtx,
    ) {
        // Into the head's map with names parsed once for the process (pingora's setters parse
        // and copy the name again at every insert).
        if let Some(decision) = ctx.flow.classified() {
            for (name, value) in flow::reply_headers(decision) {
                response.headers.insert(name, value.clone());
            }
        }
        if let Some(id) = ctx.audit.id_header() {
            response.headers.insert(AUDIT_ID_HEADER, id);
        }
        if let Some(audit) = ctx.audit.ongoing() {
            audit.response_started(response.status.as_u16());
        }
        let cors = |name: &http::HeaderName| name.as_str().starts_with("access-control-allow-");
        if ctx.outcome.kind == RouteKind::Proxy && response.headers.keys().any(cors) {
            for name in [
                http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
                http::header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                http::header::ACCESS_CONTROL_ALLOW_HEADERS,
                http::header::ACCESS_CONTROL_ALLOW_METHODS,
            ] {
                response.headers.remove(&name);
            }
        }
        let code = response.status.as_u16();
        if ctx.outcome.streaming_list && matches!(code, 400 | 422) {
            // The backend may refuse streaming lists after all: the next one probes again.
            if let Some(upstream) = ctx.outcome.upstream() {
                upstream.watch_list.recheck();
            }
        }
        let redirects = response.headers.contains_key(http::header::LOCATION);
        let Some(replacement) =
            errors::replacement(ctx.outcome.kind, code, redirects, ctx.arrived_complete)
        else {
            return;
        };
        let retry_after = replacement.retry_after;
        let (code, content_type, body) = Reply::from(replacement).negotiated(req).into_parts();
        response.status = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::BAD_GATEWAY);
        let headers = &mut response.headers;
        for name in [
            http::header::LOCATION,
            http::header::TRANSFER_ENCODING,
            http::header::CONTENT_ENCODING,
            http::header::ETAG,
        ] {
            headers.remove(name);
        }
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(content_type),
        );
        headers.insert(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from(body.len()),
        );
        if let Some(seconds) = retry_after {
            headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
        }
        ctx.outcome.replacement = Some(body);
    }

    /// A piece of the backend's body: recorded for the audit; the answer is cut when its
    /// deadline passed (it started in time but does not end in time, as upstream cuts it).
    fn filter_body(&self, piece: &Bytes, ctx: &mut RequestCtx) -> Result<()> {
        if let Some(audit) = ctx.audit.ongoing() {
            if audit.wants_response_body() {
                audit.response_body(piece);
            }
        }
        if ctx.bounds.deadline.is_some_and(|d| Instant::now() >= d) {
            return Error::e_explain(ErrorType::ReadTimedout, "the request deadline passed");
        }
        Ok(())
    }

    /// The answer to a request that failed for good: a Status instead of pingora's empty 502,
    /// unless the client is gone or a response was already started. The connection closes
    /// after it (a body may be half read), and the client knows before it sends the next
    /// request on it.
    pub(super) async fn fail(&self, session: &mut Session, e: &Error, ctx: &mut RequestCtx) {
        let downstream_gone = e.esource() == &ErrorSource::Downstream;
        if !downstream_gone && !ctx.outcome.ended_by_us {
            self.log_failure(ctx, e);
        }
        if downstream_gone || session.response_written().is_some() {
            ctx.outcome.code = 0;
            return;
        }
        let refusal = self.failure(ctx, e).closing();
        let code = refusal.code();
        if ctx.outcome.kind == RouteKind::Proxy {
            let (group, version) = ctx
                .outcome
                .upstream()
                .and_then(|u| u.metrics.as_ref())
                .map_or(("", ""), |m| (m.group(), m.version()));
            let method = session.req_header().method.as_str().to_string();
            let metrics = &self.gateway.metrics;
            metrics.terminated(&method, group, version, code);
        }
        if ctx.answer(session, refusal.into()).await.is_err() {
            ctx.outcome.code = 0;
        }
    }

    /// What a request that failed with `e` is answered: the backend's bound was full, its
    /// deadline passed, or its backend could not be reached.
    fn failure(&self, ctx: &RequestCtx, e: &Error) -> Refusal {
        let target = ctx.outcome.target();
        let full = ctx.bounds.backend_slot.is_some() && e.etype() == &ErrorType::ConnectNoRoute;
        let available = ctx.outcome.upstream().is_some_and(|u| u.available());
        if full && available {
            let cap = self.gateway.options.max_requests_per_endpoint;
            return Refusal::backend_full(&target, cap);
        }
        match deadline::expired(ctx.bounds.deadline, ctx.bounds.limit, e) {
            Some(deadline::Limit::Request(_)) => Refusal::timeout(),
            Some(_) => Refusal::unavailable(format!(
                "error trying to reach service {target}: context deadline exceeded"
            )),
            None => errors::unreachable(ctx.outcome.kind, ctx.arrived_complete, &target, e),
        }
    }

    /// Logs a failure to proxy, unless it repeats the last one of its backend within ten
    /// seconds (then it is counted, and the count goes into the next line).
    fn log_failure(&self, ctx: &RequestCtx, e: &Error) {
        let label = ctx.outcome.backend_label();
        let kind = format!("{:?} {:?}", e.esource(), e.etype());
        if let Some(suppressed) = self.repeats.admit(label, &kind) {
            tracing::warn!(backend = label, suppressed, "request failed: {e}");
        }
    }
}

/// The backend's final answer head, once informational (1xx) ones were relayed to an HTTP/1.1
/// client (an HTTP/2 one gets none).
async fn final_head(session: &mut Session, backend: &mut Backend) -> Result<http::response::Parts> {
    past_informational(session, backend, true).await?;
    backend.relayed_head().map_or_else(no_head, Ok)
}

/// Reads past the backend's informational (1xx) heads, relaying them to an HTTP/1.1 client
/// when `relay`; the final head's status. More than Go's transport accepts is a failure (a
/// backend that sends them without end would keep the request, and its seat, until the
/// deadline), and so is a `101` nobody asked for (upgrades are tunnelled: upgrade.rs).
pub(super) async fn past_informational(
    session: &mut Session,
    backend: &mut Backend,
    relay: bool,
) -> Result<http::StatusCode> {
    let mut informational = 0;
    loop {
        let Some(status) = backend.response_header().map(|h| h.status) else {
            return no_head();
        };
        if !status.is_informational() {
            return Ok(status);
        }
        if status == http::StatusCode::SWITCHING_PROTOCOLS {
            return Error::e_explain(ErrorType::InvalidHTTPHeader, "unasked 101 from the backend")
                .map_err(|e| e.into_up());
        }
        if let (true, false, Some(head)) = (relay, session.is_http2(), backend.response_header()) {
            let head = Box::new(ResponseHeader::from(head.clone()));
            session
                .write_response_header(head)
                .await
                .map_err(|e| e.into_down())?;
        }
        informational += 1;
        if informational > MAX_INFORMATIONAL {
            return Error::e_explain(
                ErrorType::InvalidHTTPHeader,
                format!("more than {MAX_INFORMATIONAL} informational (1xx) responses"),
            )
            .map_err(|e| e.into_up());
        }
        backend.read_response_header().await?;
    }
}

/// Sleeps until `until`; forever without one.
async fn sleep_until(until: Option<tokio::time::Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

/// A backend exchange that ended without a response head.
fn no_head<T>() -> Result<T> {
    Error::e_explain(ErrorType::InvalidHTTPHeader, "no response head").map_err(|e| e.into_up())
}
