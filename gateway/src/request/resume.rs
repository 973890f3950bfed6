//! A watch to the delegate broken by the death of the API server serving it resumes on another
//! one from its last resourceVersion (watch_position.rs), on the same client response: the
//! client sees neither the break nor an event twice.
//!
//! - When: the backend's connection or stream broke after the answer's head (not a clean end,
//!   not the watch's deadline, not the shutdown drain, not while apiagg shuts down), the watch
//!   has a position to resume from, a healthy endpoint of the delegate is left that it did not
//!   try (so at most once per API server), and at least a second of its lifetime is left.
//! - How: the forwarding loop (proxy.rs) sends the request again with the target of
//!   `WatchPosition::resumed_target`; the answer's head is not relayed (the client has one):
//!   a `200` in JSON goes on with its events, a `410 Gone` becomes the `ERROR` event
//!   kube-apiserver sends in the stream and the watch ends, anything else ends the watch as
//!   the break would have.

use pingora_error::{Error, ErrorSource, ErrorType, Result};
use pingora_http::RequestHeader;

use super::attempts::Attempts;
use super::backend::Backend;
use super::ctx::{RequestCtx, Session};
use super::service::ApiaggProxy;
use super::watch_position::WatchPosition;
use super::{errors, response};
use apiagg_observe::Milestone;

/// The most of a `410` answer's body read for its Status.
const MAX_STATUS_BODY: usize = 64 << 10;

impl ApiaggProxy {
    /// Whether a watch whose exchange failed with `e` resumes on another endpoint of its
    /// backend; when it does, the next attempt is its resumption.
    pub(super) fn resumes(&self, ctx: &mut RequestCtx, attempts: &mut Attempts, e: &Error) -> bool {
        let Some(position) = ctx.resume.as_deref_mut() else {
            return false;
        };
        let broke = e.esource() == &ErrorSource::Upstream && errors::connection_died(e);
        let lifecycle = &self.gateway.lifecycle;
        let now = std::time::Instant::now();
        let time_left = position
            .left(now)
            .is_none_or(|left| left >= std::time::Duration::from_secs(1));
        let Some(from) = position.resume_point() else {
            return false;
        };
        if !broke
            || ctx.outcome.ended_by_us
            || lifecycle.reached(Milestone::ShuttingDown)
            || !time_left
            || !attempts.has_untried()
        {
            return false;
        }
        tracing::debug!(
            backend = attempts.upstream.label.as_str(),
            resource_version = from,
            "a watch broken by its API server resumes on another: {e}"
        );
        position.resume();
        attempts.retry_same = false;
        true
    }

    /// The head of a resumed watch's answer, not relayed (the client has the first one).
    /// `Ok(true)`: its events follow; `Ok(false)`: it was `410 Gone`, the client got the
    /// `ERROR` event and the watch ended; `Err`: the watch ends as the break would have.
    pub(super) async fn resumed_head(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        backend: &mut Backend,
    ) -> Result<bool> {
        // Its informational heads are not relayed: the client has its answer's head.
        let status = response::past_informational(session, backend, false).await?;
        let Some(position) = ctx.resume.as_deref_mut() else {
            return refused("not a resumable watch");
        };
        if status == http::StatusCode::GONE {
            let body = status_body(backend).await?;
            let event = position.expired_event(&body);
            session
                .write_response_body(event, false)
                .await
                .map_err(|e| e.into_down())?;
            session.finish_body().await.map_err(|e| e.into_down())?;
            return Ok(false);
        }
        match backend.response_header() {
            Some(head) if position.answered(head) => Ok(true),
            _ => refused(&format!("the resumed watch was answered {status}")),
        }
    }
}

/// The request of a watch's resumption goes to `WatchPosition::resumed_target` (the position
/// is the request's, `None` for any other request, which pays one branch for it).
#[inline]
pub(super) fn retarget(
    position: Option<&WatchPosition>,
    request: &mut RequestHeader,
) -> Result<()> {
    match position.filter(|p| p.resuming()) {
        Some(position) => resumed_request(position, request),
        None => Ok(()),
    }
}

/// [`retarget`] for a resumed watch.
#[cold]
fn resumed_request(position: &WatchPosition, request: &mut RequestHeader) -> Result<()> {
    let target = position.resumed_target(&request.uri, std::time::Instant::now());
    let uri = http::Uri::try_from(target)
        .map_err(|e| Error::because(ErrorType::InternalError, "resuming a watch", e))?;
    request.set_uri(uri);
    Ok(())
}

/// The body of a `410` answer, up to [`MAX_STATUS_BODY`] (the rest is not read).
async fn status_body(backend: &mut Backend) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(piece) = backend.read_response_body().await? {
        body.extend_from_slice(&piece);
        if body.len() > MAX_STATUS_BODY {
            break;
        }
    }
    Ok(body)
}

/// A resumed watch's answer apiagg cannot relay: the watch ends.
fn refused<T>(why: &str) -> Result<T> {
    Error::e_explain(
        ErrorType::InvalidHTTPHeader,
        format!("resuming a watch: {why}"),
    )
    .map_err(|e| e.into_up())
}
