//! Streaming lists (KEP-3157, client-go's `WatchListClient`) for every remote APIService.
//!
//! A watch with `sendInitialEvents=true` waits for a BOOKMARK annotated
//! `k8s.io/initial-events-end`; many extension servers never send it, and their WatchList
//! clients never sync. apiagg passes such a request through to a backend that honours it and
//! emulates the protocol for one that ignores or refuses it (`emulate.rs`): it lists in pages in
//! the caller's name, sends every object as `ADDED`, the annotated BOOKMARK at the list's
//! resourceVersion, then watches from there and relays the backend's events.
//!
//! Which backends honour it is learned by apiagg's own probe (`probe.rs`): a streaming list of
//! a collection it picks from the backend's discovery, selecting nothing and ending after a
//! second. The first streaming list to an APIService waits for it;
//! later probes (every ten minutes) run beside a request served by the old
//! verdict. A passed-through request the backend refuses (400, 422) makes the next one probe again (the
//! client's own options decide nothing: only the probe, whose options are apiagg's).
//! Plain watches and lists are never touched. The emulated stream is gzipped, each write
//! flushed, when the client accepts gzip (`output.rs`, kube-apiserver 1.37's
//! `WatchListCompression`); every option of the client's query that the emulation does not set
//! itself (`shardSelector` among them) reaches the backend's list and watch.

mod emulate;
mod output;
mod probe;
mod protocol;

use std::time::Instant;

use apiagg_apis::Reason;
use apiagg_requestinfo::{QueryParams, RequestInfo};
use pingora_error::Result;

use self::protocol::Encoding;
use super::ctx::{Dispatch, RequestCtx, Session};
use super::forward;
use super::refusal::Refusal;
use super::service::ApiaggProxy;
use crate::backends::{Verdict, WatchListPlan};
use apiagg_discovery::accepts_coding;
use apiagg_observe::RouteKind;

pub use protocol::asked;

impl ApiaggProxy {
    /// A streaming list to a remote APIService. `Ok(false)`: it is forwarded as it is (the
    /// backend honours streaming lists, or the client asked for a form apiagg does not
    /// write); `Ok(true)`: apiagg answered it.
    pub(super) async fn watch_list(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        dispatch: &Dispatch,
        info: &RequestInfo<'_>,
    ) -> Result<bool> {
        let upstream = &dispatch.upstream;
        let headers = &session.req_header().headers;
        let header = |name: http::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        let gzip = header(http::header::ACCEPT_ENCODING)
            .is_some_and(|codings| accepts_coding(codings, "gzip"));
        match protocol::encoding(header(http::header::ACCEPT)) {
            Encoding::PassThrough => return Ok(false),
            Encoding::Json => {}
            Encoding::NotAcceptable => {
                let message = "only the following media types are accepted for an emulated \
                               streaming list: application/json";
                let refusal = Refusal::new(Reason::NotAcceptable, message);
                return answered(session, ctx, refusal).await;
            }
        }
        if let Err(message) = valid_options(&info.query) {
            return answered(session, ctx, invalid(&message)).await;
        }
        let metrics = &self.gateway.metrics;
        let plan = upstream.watch_list.plan(Instant::now());
        if let WatchListPlan::Native = plan {
            metrics.watch_list_stream(&upstream.label, "native");
            return Ok(false);
        }
        // Probing or emulating: apiagg talks to the backend itself.
        let Some(index) = upstream.pick() else {
            return Ok(false);
        };
        let client = match self.gateway.clients.endpoint(upstream, index) {
            Ok(client) => client,
            Err(e) => {
                tracing::warn!(backend = upstream.label, "streaming list: {e}");
                return Ok(false);
            }
        };
        // With tracing on, the probe, the lists and the watch carry the backend span's context.
        ctx.trace.backend(upstream, None);
        let headers = {
            let forwarding = self.forwarding(session, ctx, dispatch);
            let authority = &upstream.endpoints[index].authority_header;
            let audit_id = ctx.audit.id_header();
            forward::fetch_headers(session.req_header(), &forwarding, authority, audit_id)?
        };
        let connect = self.gateway.options.connect_timeout;
        // The probe is apiagg's own, on a collection of the APIService it picks itself.
        let group_version = format!("/apis/{}/{}", info.group, info.version);
        let plan = match plan {
            WatchListPlan::Probe(probing) => match probing.meanwhile() {
                Some(plan) => {
                    let client = client.clone();
                    // Beside this request, which the old verdict serves.
                    tokio::spawn(async move {
                        probing.finish(probe::run(&client, &group_version, connect).await);
                    });
                    plan
                }
                None => {
                    let verdict = probe::run(&client, &group_version, connect).await;
                    let native = verdict == Some(Verdict::Honours);
                    probing.finish(verdict);
                    if native {
                        WatchListPlan::Native
                    } else {
                        WatchListPlan::Emulate
                    }
                }
            },
            plan => plan,
        };
        if let WatchListPlan::Native = plan {
            metrics.watch_list_stream(&upstream.label, "native");
            return Ok(false);
        }
        metrics.watch_list_stream(&upstream.label, "emulated");
        // Named before the stream: one that breaks is logged and counted as this backend's.
        ctx.outcome.sent_to(upstream);
        let stream = emulate::Stream {
            client,
            headers,
            path: info.path,
            query: &info.query,
            api_version: format!("{}/{}", info.group, info.version),
            request_timeout: self.gateway.options.request_timeout,
            connect_timeout: connect,
            watches: &self.gateway.watches,
            gzip,
        };
        stream.serve(session, ctx).await?;
        Ok(true)
    }
}

/// Answers a streaming list apiagg refuses itself.
async fn answered(session: &mut Session, ctx: &mut RequestCtx, refusal: Refusal) -> Result<bool> {
    ctx.outcome.kind = RouteKind::Refused;
    ctx.answer(session, refusal.into()).await?;
    Ok(true)
}

/// kube-apiserver's checks of a streaming list's options (its 422 messages).
fn valid_options(q: &QueryParams<'_>) -> Result<(), String> {
    if QueryParams::flag(q.allow_watch_bookmarks) != Some(true) {
        return Err(
            "allowWatchBookmarks: Required value: allowWatchBookmarks must be set to \
                    true when sendInitialEvents is provided"
                .into(),
        );
    }
    if q.resource_version_match != Some("NotOlderThan") {
        return Err(format!(
            "resourceVersionMatch: Unsupported value: {:?}: sendInitialEvents requires \
             setting resourceVersionMatch to NotOlderThan",
            q.resource_version_match.unwrap_or_default()
        ));
    }
    Ok(())
}

/// A 422 `Invalid` of `ListOptions`, as kube-apiserver refuses list options.
fn invalid(message: &str) -> Refusal {
    let message = format!("ListOptions.meta.k8s.io \"\" is invalid: {message}");
    let details = serde_json::json!({"group": "meta.k8s.io", "kind": "ListOptions"});
    Refusal::new(Reason::Invalid, message).details(details)
}
