//! The emulated streaming list: list pages in the caller's name → `ADDED` events → the
//! annotated BOOKMARK at the list's resourceVersion → a watch from it, relayed as the backend
//! sends it. Nothing is sent before the first page arrives, so a refused list reaches the
//! client as the backend answered it; a failure of a list or of opening the watch after that
//! is an `ERROR` event with the backend's Status (a 410 `Expired` as upstream sends it), after
//! whole events, and the stream ends. A backend's watch that breaks while it is relayed (its
//! last event may be cut), or a compressor that fails, abandons the answer: the HTTP/2 stream
//! is reset, the HTTP/1.1 connection closed, never ended as if complete (kubernetes#140136).

use std::time::Duration;

use apiagg_apis::{Failure, Reason};
use apiagg_requestinfo::QueryParams;
use bytes::Bytes;
use pingora_error::{Error, ErrorType, Result};

use super::output::{Output, Stopped};
use super::protocol::{self, ItemType, Page};
use crate::backends::{Client, FetchError, Fetched};
use crate::request::ctx::{RequestCtx, Session};
use crate::request::refusal::Refusal;
use crate::request::reply::{self, Reply};
use apiagg_observe::{OpenWatch, Watches};

/// Pages larger than this are parsed on a blocking thread, off the async workers.
const PARSE_INLINE: usize = 256 << 10;

/// Most list pages of one streaming list's initial phase (of `protocol::PAGE` objects each).
const MAX_PAGES: usize = 2_000;

/// How often an idle stream checks its deadline and the shutdown drain.
const TICK: Duration = Duration::from_secs(1);

/// One emulated streaming list.
pub struct Stream<'a> {
    /// The client of the chosen endpoint.
    pub client: Client,
    /// The caller's request headers under the forwarding policy.
    pub headers: http::HeaderMap,
    /// The collection's path.
    pub path: &'a str,
    /// The client's query.
    pub query: &'a QueryParams<'a>,
    /// `<group>/<version>`, for items of lists that do not say.
    pub api_version: String,
    /// The bound of each list page (`--request-timeout`).
    pub request_timeout: Duration,
    /// `--backend-connect-timeout`, for the watch's head.
    pub connect_timeout: Duration,
    /// Open watches (the shutdown drain).
    pub watches: &'a Watches,
    /// The client accepts gzip: the stream is gzipped, each write flushed.
    pub gzip: bool,
}

/// What one page gave: its events, its type, resourceVersion and the next page's token.
struct Listed {
    events: Vec<u8>,
    item: ItemType,
    resource_version: String,
    next: Option<String>,
}

/// What woke the relay of the watch.
enum Next {
    Chunk(reqwest::Result<Option<Bytes>>),
    Tick,
    /// The watch's turn in the shutdown drain came.
    Drained,
    ClientGone,
}

/// A page that did not come: the backend's answer, or why there was none.
enum Failed {
    Answer(Fetched),
    Fetch(FetchError),
    Parse(String),
    /// The initial phase outlived its bound.
    Timeout(Duration),
}

impl Stream<'_> {
    /// Serves the stream. A stream that breaks after its head is abandoned
    /// ([`reply::abandon`]) and its failure returned.
    pub async fn serve(self, session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
        let first = match self.page(None).await {
            Ok(page) => page,
            Err(failed) => return self.refuse(session, ctx, failed).await,
        };
        let mut out = Output::new(self.gzip);
        self.head(session, ctx, &out).await?;
        match self.body(session, ctx, &mut out, first).await {
            Ok(()) => {
                out.end(session).await;
                Ok(())
            }
            Err(Stopped::ClientGone) => Ok(()),
            Err(Stopped::Broken(e)) => {
                reply::abandon(session).await;
                Err(e)
            }
        }
    }

    /// The body after its head: the first page's events, the other pages', the annotated
    /// BOOKMARK, then the watch. Every write is of whole events (a page is read whole before
    /// any of it is sent), so a failure of the list is an `ERROR` event after whole events
    /// and the stream ends, as a kube-apiserver watch ends; only the backend's watch, relayed
    /// as it arrives, can break inside an event.
    async fn body(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        out: &mut Output,
        first: Listed,
    ) -> Result<(), Stopped> {
        let (item, resource_version) = (first.item, first.resource_version);
        let mut next = first.next;
        out.send(session, first.events).await?;
        // The initial phase holds a flow-control seat: it is bounded as a list is, in time
        // (`--request-timeout`) and in pages, whatever `continue` tokens the backend keeps
        // answering.
        let until = tokio::time::Instant::now() + self.request_timeout;
        let mut pages = 1;
        while let Some(token) = next.take() {
            pages += 1;
            let page = if pages > MAX_PAGES {
                Err(Failed::Parse(format!(
                    "the backend answered more than {MAX_PAGES} pages of {} objects",
                    protocol::PAGE
                )))
            } else {
                tokio::time::timeout_at(until, self.page(Some(&token)))
                    .await
                    .unwrap_or_else(|_| Err(Failed::Timeout(self.request_timeout)))
            };
            match page {
                Ok(page) => {
                    next = page.next;
                    out.send(session, page.events).await?;
                }
                Err(failed) => {
                    return out
                        .send(session, error_line(failed, "listing the next page"))
                        .await;
                }
            }
        }
        let end = protocol::initial_events_end(&item, &resource_version);
        out.send(session, end).await?;
        // The initial phase is over: the flow-control seat goes back, as for any watch.
        ctx.flow.delegated();
        self.watch(session, ctx, out, &resource_version).await
    }

    /// One list page, parsed.
    async fn page(&self, token: Option<&str>) -> Result<Listed, Failed> {
        let target = format!("{}?{}", self.path, protocol::list_query(self.query, token));
        let (url, response) = self
            .client
            .open_as(&target, self.headers.clone(), self.request_timeout)
            .await
            .map_err(Failed::Fetch)?;
        let fetched = tokio::time::timeout(self.request_timeout, self.client.body(url, response))
            .await
            .map_err(|_| Failed::Parse("the list page did not arrive in time".into()))?
            .map_err(Failed::Fetch)?;
        if fetched.status != 200 {
            return Err(Failed::Answer(fetched));
        }
        let api_version = self.api_version.clone();
        let small = fetched.body.len() <= PARSE_INLINE;
        let parse = move || -> Result<Listed, String> {
            let page = Page::parse(&fetched.body).map_err(|e| format!("the list page: {e}"))?;
            let item = page.item_type(&api_version);
            let mut events = Vec::with_capacity(fetched.body.len() + 64);
            page.added_events(&item, &mut events);
            Ok(Listed {
                events,
                resource_version: page.resource_version().to_string(),
                next: page.next().map(str::to_string),
                item,
            })
        };
        let listed = if small {
            parse()
        } else {
            tokio::task::spawn_blocking(parse)
                .await
                .map_err(|e| Failed::Parse(e.to_string()))?
        };
        let listed = listed.map_err(Failed::Parse)?;
        if listed.resource_version.is_empty() {
            return Err(Failed::Parse(
                "the backend's list carries no resourceVersion to watch from".into(),
            ));
        }
        Ok(listed)
    }

    /// The first page failed: the client gets the backend's answer (or a 503/500 Status).
    async fn refuse(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        failed: Failed,
    ) -> Result<()> {
        let reply = match failed {
            Failed::Answer(fetched) => {
                let status = serde_json::from_slice::<serde_json::Value>(&fetched.body)
                    .is_ok_and(|v| v["kind"] == "Status");
                if status {
                    Reply::json(fetched.status, fetched.body).read_status()
                } else {
                    let message = format!(
                        "listing for a streaming list: the backend answered {}",
                        fetched.status
                    );
                    let reason = Reason::InternalError;
                    Refusal::with_code(fetched.status, reason, message).into()
                }
            }
            Failed::Fetch(e) => {
                let message = format!("service unavailable: listing for a streaming list: {e}");
                Refusal::unavailable(message).into()
            }
            Failed::Parse(why) => {
                let message = format!("listing for a streaming list: {why}");
                Refusal::internal(message).into()
            }
            Failed::Timeout(bound) => {
                let message = format!("listing for a streaming list took longer than {bound:?}");
                Refusal::new(Reason::Timeout, message).into()
            }
        };
        ctx.answer(session, reply).await
    }

    /// The stream's head: JSON lines (gzipped when `out` is), with the audit and flow-control
    /// headers.
    async fn head(&self, session: &mut Session, ctx: &mut RequestCtx, out: &Output) -> Result<()> {
        let mut head = reply::watch_head(ctx.answer_headers(), session.is_http2())?;
        if out.gzipped() {
            head.insert_header(http::header::CONTENT_ENCODING, "gzip")?;
        }
        if let Some(audit) = ctx.audit.ongoing() {
            audit.response_started(200);
        }
        ctx.outcome.code = 200;
        session.write_response_header(head).await
    }

    /// Watches from `resource_version` and relays the events until the backend ends the
    /// watch, the client goes away, the watch's deadline passes or the shutdown drain ends it.
    /// A backend's watch that breaks breaks the client's ([`Stopped::Broken`]), as a proxied
    /// one does: its last event may be cut, and the client must not read the end as complete.
    async fn watch(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        out: &mut Output,
        resource_version: &str,
    ) -> Result<(), Stopped> {
        let query = protocol::watch_query(self.query, resource_version, ctx.bounds.watch_timeout);
        let target = format!("{}?{query}", self.path);
        let within = self.connect_timeout + self.request_timeout;
        let opened = self
            .client
            .open_as(&target, self.headers.clone(), within)
            .await;
        let (url, mut response) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                return out
                    .send(session, error_line(Failed::Fetch(e), "watching"))
                    .await;
            }
        };
        if response.status() != reqwest::StatusCode::OK {
            let failed = match self.client.body(url, response).await {
                Ok(fetched) => Failed::Answer(fetched),
                Err(e) => Failed::Fetch(e),
            };
            return out.send(session, error_line(failed, "watching")).await;
        }
        let mut tick = tokio::time::interval(TICK);
        loop {
            let next = tokio::select! {
                chunk = response.chunk() => Next::Chunk(chunk),
                _ = tick.tick() => Next::Tick,
                () = drain_turn(self.watches, ctx.bounds.watch.as_ref()) => Next::Drained,
                // A request without a body: this returns only when the client goes away.
                _ = session.read_body_or_idle(true) => Next::ClientGone,
            };
            match next {
                Next::Chunk(Ok(Some(chunk))) => out.relay(session, chunk).await?,
                Next::Chunk(Ok(None)) | Next::ClientGone => return Ok(()),
                Next::Drained => {
                    self.watches.ended_by_drain();
                    return Ok(());
                }
                Next::Chunk(Err(e)) => {
                    let context = format!("emulated streaming list: the watch at {url} broke");
                    let broken = Error::because(ErrorType::ReadError, context, e).into_up();
                    return Err(Stopped::Broken(broken));
                }
                Next::Tick => {
                    let now = std::time::Instant::now();
                    if ctx.bounds.deadline.is_some_and(|d| now >= d) {
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// Completes at `watch`'s turn in the shutdown drain (never for a request that is no watch).
async fn drain_turn(watches: &Watches, watch: Option<&OpenWatch>) {
    match watch {
        Some(watch) => watches.turn(watch).await,
        None => std::future::pending().await,
    }
}

/// An `ERROR` event line for a failure after the stream started.
fn error_line(failed: Failed, what: &str) -> Vec<u8> {
    match failed {
        Failed::Answer(fetched) => protocol::error_event(fetched.status, &fetched.body, what),
        Failed::Fetch(e) => protocol::error_event(503, b"", &format!("{what}: {e}")),
        Failed::Parse(why) => protocol::error_event(500, b"", &format!("{what}: {why}")),
        Failed::Timeout(bound) => {
            let message = format!("{what}: the initial events took longer than {bound:?}");
            let status = Failure::new(Reason::Timeout, message).to_json();
            protocol::error_event(504, status.to_string().as_bytes(), what)
        }
    }
}
