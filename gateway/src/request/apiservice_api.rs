//! The APIService API on the request path: reads the body (capped), lets `apiservices` answer,
//! sends its answer (with one `Warning` header per warning) or streams its watch, in CBOR when
//! the client prefers it (objects, lists and Tables as one CBOR item, watch events as a CBOR
//! sequence, `application/cbor-seq`; Status errors through the reply's own negotiation). The
//! config file's APIServices are shown with the status the availability controller published.

use apiagg_apis::Reason;
use apiagg_requestinfo::RequestInfo;
use bytes::Bytes;
use pingora_error::Result;
use serde_json::{json, Value};

use super::ctx::{RequestCtx, Session};
use super::refusal::Refusal;
use super::reply::{self, Reply};
use crate::apiservices::{cbor_answer, Answer, Api, ApiRequest, WatchStream};
use crate::state::Gateway;
use apiagg_observe::{Lifecycle, Milestone, WatchEventSeries};

/// `Content-Type` of a watch in CBOR: a sequence of CBOR items (RFC 8742), as kube-apiserver.
const CBOR_SEQ: &str = "application/cbor-seq";

/// Largest request body the API reads (kube-apiserver's limit is 3 MiB; patches and applies are
/// bounded by the same figure).
const BODY_LIMIT: usize = apiagg_strategy::MAX_OBJECT_BYTES;

/// The config file's APIServices, each with its current `Available` condition.
fn declared_with_status(gateway: &Gateway) -> Vec<Value> {
    let routes = gateway.routes.load();
    routes
        .declared
        .iter()
        .map(|object| {
            let mut object = object.clone();
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if let Some(s) = gateway.availability.guard().get(&name) {
                object["status"] = json!({"conditions": [s.condition]});
            }
            object
        })
        .collect()
}

async fn read_body(session: &mut Session) -> Result<Option<Vec<u8>>> {
    let mut body = Vec::new();
    while let Some(chunk) = session.read_request_body().await? {
        if body.len() + chunk.len() > BODY_LIMIT {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// Answers a request under `/apis/apiregistration.k8s.io/v1`.
pub async fn serve(
    session: &mut Session,
    gateway: &Gateway,
    info: &RequestInfo<'_>,
    ctx: &mut RequestCtx,
) -> Result<()> {
    // The request deadline bounds the body's arrival too: a body sent one byte at a time does
    // not keep its flow-control seat past it (kube-apiserver's request context).
    let until = (ctx.bounds.deadline).unwrap_or(ctx.started + gateway.options.request_timeout);
    let Ok(body) = tokio::time::timeout_at(until.into(), read_body(session)).await else {
        // The rest of the body is not read: the connection is not reused.
        return ctx
            .answer(session, Refusal::timeout().closing().into())
            .await;
    };
    let Some(body) = body? else {
        let message = "the request body is larger than 3 MiB";
        let refusal = Refusal::new(Reason::RequestEntityTooLarge, message);
        return ctx.answer(session, refusal.into()).await;
    };
    ctx.audit.request_body(&body);
    let header = |name: &str| {
        session
            .req_header()
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (accept, content_type) = (header("accept"), header("content-type"));
    let cbor = cbor_answer(&accept);
    let user_agent = header("user-agent");
    let req = session.req_header();
    let method = req.method.as_str().to_string();
    let declared = declared_with_status(gateway);
    let routes = gateway.routes.load();
    let api = Api {
        store: gateway.store.as_ref(),
        declared: &declared,
        delegate_groups: routes.delegate_groups.as_deref(),
    };
    let answer = api
        .handle(&ApiRequest {
            method: &method,
            info,
            accept: &accept,
            content_type: &content_type,
            body: &body,
            user_agent: &user_agent,
        })
        .await;
    match answer {
        Answer::Done {
            code,
            body,
            warnings,
        } => {
            let reply = warnings
                .iter()
                .fold(encoded(code, body, cbor), |reply, text| {
                    reply.header(http::header::WARNING, warning_header(text))
                });
            ctx.answer(session, reply).await
        }
        Answer::Failed {
            failure,
            retry_after,
        } => {
            let refusal = Refusal::from(failure);
            let refusal = match retry_after {
                Some(seconds) => refusal.retry_after_header(u64::from(seconds)),
                None => refusal,
            };
            ctx.answer(session, refusal.into()).await
        }
        Answer::Watch(stream) => {
            ctx.outcome.code = 200;
            let headers = ctx.answer_headers();
            let (group, version) = crate::apiservices::GROUP_VERSION
                .split_once('/')
                .unwrap_or_default();
            let events = gateway
                .metrics
                .watch_events
                .series(group, version, "apiservices");
            let watch = Watch {
                lifecycle: &gateway.lifecycle,
                events,
                cbor,
            };
            stream_watch(session, *stream, watch, headers).await
        }
    }
}

/// An answer of the API in JSON, or in CBOR when `cbor` (its failures are [`Answer::Failed`],
/// which the reply negotiates itself, as every `Status` apiagg writes).
fn encoded(code: u16, json: Vec<u8>, cbor: bool) -> Reply {
    if cbor {
        if let Ok(encoded) = apiagg_apis::json_to_cbor(&json) {
            return Reply::new(code, apiagg_apis::CBOR, Bytes::from(encoded));
        }
    }
    Reply::json(code, Bytes::from(json))
}

/// The `Warning` header value kube-apiserver sends: code 299, agent `-`, the text quoted
/// (control characters, which a header cannot carry, become spaces).
fn warning_header(text: &str) -> String {
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
    format!("299 - \"{quoted}\"")
}

/// How a watch of the API is sent.
struct Watch<'a> {
    lifecycle: &'a Lifecycle,
    /// `apiserver_watch_events_*` of `apiservices`: each event sent, its size as written.
    events: WatchEventSeries,
    /// In CBOR (a CBOR sequence) instead of JSON lines.
    cbor: bool,
}

/// Sends a watch until it ends, the client leaves, its timeout passes or shutdown refuses new
/// requests (the client then watches through another replica or after the restart).
async fn stream_watch(
    session: &mut Session,
    mut stream: WatchStream,
    watch: Watch<'_>,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
) -> Result<()> {
    let Watch {
        lifecycle,
        events,
        cbor,
    } = watch;
    let mut head = reply::watch_head(headers, session.is_http2())?;
    if cbor {
        head.insert_header("Content-Type", CBOR_SEQ)?;
    }
    session.write_response_header(head).await?;
    let deadline = tokio::time::Instant::now() + stream.timeout();
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next());
        let line = tokio::select! {
            line = next => line,
            () = lifecycle.until(Milestone::Rejecting) => break,
        };
        match line {
            Ok(Some(line)) => {
                let event = match cbor {
                    // One CBOR item per event (an event that cannot be encoded is left out).
                    true => match apiagg_apis::json_to_cbor(line.trim_ascii_end()) {
                        Ok(item) => item,
                        Err(_) => continue,
                    },
                    false => line,
                };
                let size = event.len();
                let sent = session.write_response_body(Bytes::from(event), false);
                // A client that went away ends its watch; that is not an error.
                if sent.await.is_err() {
                    return Ok(());
                }
                events.observe(size);
            }
            Ok(None) | Err(_) => break,
        }
    }
    let _ = session.finish_body().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn warnings_are_quoted_as_kube_apiserver_quotes_them() {
        assert_eq!(
            super::warning_header("unknown field \"spec.foo\""),
            r#"299 - "unknown field \"spec.foo\"""#
        );
    }
}
