//! The APIService API on the request path: reads the body (capped), lets `apiservices` answer,
//! sends its answer (with one `Warning` header per warning) or streams its watch, in CBOR when
//! the client prefers it (objects, lists and Tables as one CBOR item, watch events as a CBOR
//! sequence, `application/cbor-seq`; Status errors through the reply's own negotiation). The
//! config file's APIServices are shown with the status the availability controller published.

use super::Session;
use apiagg_requestinfo::RequestInfo;
use bytes::Bytes;
use pingora_error::Result;
use pingora_http::ResponseHeader;
use serde_json::{json, Value};

use super::reply::{self, Reply};
use super::RequestCtx;
use crate::apiservices::{cbor_answer, Answer, Api, ApiRequest, WatchStream};
use crate::state::Gateway;
use apiagg_observe::{Lifecycle, Milestone};

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

/// Answers a request under `/apis/apiregistration.k8s.io/v1`; returns the status code sent.
pub async fn serve(
    session: &mut Session,
    gateway: &Gateway,
    info: &RequestInfo<'_>,
    ctx: &mut RequestCtx,
) -> Result<u16> {
    // The request deadline bounds the body's arrival too: a body sent one byte at a time does
    // not keep its flow-control seat past it (kube-apiserver's request context).
    let within = match super::deadline::limit(info, gateway.options.request_timeout) {
        Ok(super::deadline::Limit::Request(d) | super::deadline::Limit::Discovery(d)) => d,
        _ => gateway.options.request_timeout,
    };
    let Ok(body) = tokio::time::timeout_at((ctx.started + within).into(), read_body(session)).await
    else {
        // The rest of the body is not read: the connection is not reused.
        session.set_keepalive(None);
        return send(session, ctx, reply::timeout_reply()).await;
    };
    let Some(body) = body? else {
        let reply = reply::failure_reply(
            413,
            "RequestEntityTooLarge",
            "the request body is larger than 3 MiB",
        );
        return send(session, ctx, reply).await;
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
        } if warnings.is_empty() => send(session, ctx, encoded(code, body, cbor)).await,
        Answer::Done {
            code,
            body,
            warnings,
        } => {
            ctx.audit.reply(code, &body);
            let headers = ctx.answer_headers();
            let reply = encoded(code, body, cbor).negotiated(session.req_header());
            send_warned(session, reply, &warnings, headers).await?;
            Ok(code)
        }
        Answer::Retry { body, retry_after } => {
            let reply = Reply::own_status(503, Bytes::from(body)).header(
                http::header::RETRY_AFTER,
                http::HeaderValue::from(retry_after),
            );
            send(session, ctx, reply).await
        }
        Answer::Watch(stream) => {
            let headers = ctx.answer_headers();
            stream_watch(session, *stream, &gateway.lifecycle, headers, cbor).await?;
            Ok(200)
        }
    }
}

/// An answer of the API in JSON, or in CBOR when `cbor`; errors are `Status` objects, which
/// the reply negotiates itself, as every `Status` apiagg writes (the 404 of an unknown name or
/// path too).
fn encoded(code: u16, json: Vec<u8>, cbor: bool) -> Reply {
    if code >= 400 {
        return Reply::own_status(code, Bytes::from(json));
    }
    if cbor {
        if let Ok(encoded) = apiagg_apis::json_to_cbor(&json) {
            return Reply::new(code, apiagg_apis::CBOR, Bytes::from(encoded));
        }
    }
    Reply::json(code, Bytes::from(json))
}

/// Sends an answer with the audit and flow-control headers, noting it in the audit.
async fn send(session: &mut Session, ctx: &mut RequestCtx, reply: Reply) -> Result<u16> {
    let code = reply.code();
    ctx.own_answer(reply.read_status()).send(session).await?;
    Ok(code)
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

/// An answer with `Warning` headers (several of one name, which [`Reply`] cannot send).
async fn send_warned(
    session: &mut Session,
    reply: Reply,
    warnings: &[String],
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
) -> Result<()> {
    let (code, content_type, body) = reply.into_parts();
    let mut head = ResponseHeader::build(code, Some(6 + warnings.len()))?;
    for (name, value) in headers {
        head.insert_header(name, value)?;
    }
    head.insert_header("Content-Type", content_type)?;
    head.insert_header("Content-Length", body.len().to_string())?;
    head.insert_header("X-Content-Type-Options", "nosniff")?;
    for text in warnings {
        head.append_header("Warning", warning_header(text))?;
    }
    session.write_response_header(Box::new(head)).await?;
    session.write_response_body(body, true).await
}

/// Sends a watch until it ends, the client leaves, its timeout passes or shutdown refuses new
/// requests (the client then watches through another replica or after the restart).
async fn stream_watch(
    session: &mut Session,
    mut stream: WatchStream,
    lifecycle: &Lifecycle,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    cbor: bool,
) -> Result<()> {
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
                let sent = session.write_response_body(Bytes::from(event), false);
                // A client that went away ends its watch; that is not an error.
                if sent.await.is_err() {
                    return Ok(());
                }
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
