//! Where a watch to the delegate stands in its change log, so that it can resume on another
//! API server when the one serving it dies (the kcp-dev/kcp#4373 pattern, as client-go's
//! reflector re-watches): the resourceVersion of the last complete event line passed to the
//! client. Only watches to a delegate with several endpoints carry one (dispatch.rs).
//!
//! - Lines: the relay passes complete JSON event lines only; the bytes of a line not complete
//!   yet are held back (a resumed watch sends that event again, whole). A line longer than
//!   [`MAX_EVENT_LINE`] is not buffered: resumption is off for that watch and the bytes pass.
//! - What is read of a line: its `type` and `object.metadata.resourceVersion`, nothing else
//!   (serde skips the rest without building it).
//! - A point to resume from: the watch began at an exact resourceVersion (not `""`, not `"0"`,
//!   and without `sendInitialEvents=true`), or a BOOKMARK passed (the initial events of a
//!   watch from `"0"` or of a streaming list carry the objects' own resourceVersions, not
//!   positions in the log: a watch broken before its first BOOKMARK ends as before).
//! - Off for good: the answer is not `200` JSON without `Content-Encoding` (protobuf, CBOR, a
//!   compressed stream), a line does not parse, or an `ERROR` event passed.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use apiagg_apis::{Failure, Reason};
use apiagg_requestinfo::{decode_value, QueryParams};
use bytes::{Bytes, BytesMut};
use serde::Deserialize;

/// The longest event line held back whole; a longer one turns resumption off for its watch
/// (kube-apiserver refuses request bodies over 3 MiB, so an object's event is rarely longer).
pub(super) const MAX_EVENT_LINE: usize = 4 << 20;

/// The parameters a resumed watch request sets itself or leaves out (the rest are the client's).
const REPLACED: [&str; 4] = [
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
];

/// A watch's position in its change log, and whether it may resume from it.
#[derive(Debug)]
pub(super) struct WatchPosition {
    /// The resourceVersion of the last complete event passed (or the one the watch began at).
    last: String,
    /// `last` is a position in the change log (see the module's doc).
    armed: bool,
    /// The bytes of an event line not complete yet, held back from the client.
    partial: Vec<u8>,
    /// Resumption is off for good for this watch.
    off: bool,
    /// Times the watch resumed: from the first, the client has the answer's head.
    pub(super) resumed: u8,
    /// When the watch's lifetime ends: a resumed request asks for what is left of it.
    ends: Option<Instant>,
}

/// What is read of a watch event line.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    object: Option<Object<'a>>,
}

/// What is read of an event's object.
#[derive(Deserialize)]
struct Object<'a> {
    #[serde(default, borrow)]
    metadata: Option<Metadata<'a>>,
}

/// What is read of an object's metadata.
#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(rename = "resourceVersion", default, borrow)]
    resource_version: Option<Cow<'a, str>>,
}

impl WatchPosition {
    /// The position of a watch asked with `query`, whose lifetime ends at `ends`.
    pub(super) fn for_watch(query: &QueryParams<'_>, ends: Option<Instant>) -> WatchPosition {
        let from = QueryParams::decoded(query.resource_version).unwrap_or_default();
        let initial_events = QueryParams::flag(query.send_initial_events) == Some(true);
        WatchPosition {
            armed: !initial_events && !from.is_empty() && from != "0",
            last: from.into_owned(),
            partial: Vec::new(),
            off: false,
            resumed: 0,
            ends,
        }
    }

    /// Whether the watch resumed already (the client has the answer's head).
    #[inline]
    pub(super) fn resuming(&self) -> bool {
        self.resumed > 0
    }

    /// The resourceVersion the watch may resume from, if it may.
    pub(super) fn resume_point(&self) -> Option<&str> {
        (!self.off && self.armed).then_some(self.last.as_str())
    }

    /// Time left of the watch's lifetime at `now` (`None`: it has no end).
    pub(super) fn left(&self, now: Instant) -> Option<Duration> {
        self.ends.map(|ends| ends.saturating_duration_since(now))
    }

    /// An answer's head: resumption stays on only for a `200` in JSON, uncompressed
    /// (`false`: it is off).
    pub(super) fn answered(&mut self, head: &http::response::Parts) -> bool {
        let text = |name| head.headers.get(name).and_then(|v| v.to_str().ok());
        let json = text(http::header::CONTENT_TYPE).is_some_and(|t| {
            let essence = t.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("application/json")
        });
        let plain = text(http::header::CONTENT_ENCODING)
            .is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
        if head.status != http::StatusCode::OK || !json || !plain {
            self.off = true;
        }
        !self.off
    }

    /// A piece of the answer on its way to the client: what to write now (complete lines;
    /// everything once resumption is off), the position moved past each complete line.
    pub(super) fn pass(&mut self, piece: Bytes) -> Bytes {
        if self.off {
            return piece;
        }
        let Some(end) = piece.iter().rposition(|&b| b == b'\n') else {
            if self.partial.len() + piece.len() > MAX_EVENT_LINE {
                return self.give_up(piece);
            }
            self.partial.extend_from_slice(&piece);
            return Bytes::new();
        };
        let tail = piece.slice(end + 1..);
        let complete = if self.partial.is_empty() {
            piece.slice(..=end)
        } else {
            // Taken, not cleared: a long line's buffer is not kept for the watch's lifetime.
            let held = std::mem::take(&mut self.partial);
            let mut joined = BytesMut::with_capacity(held.len() + end + 1);
            joined.extend_from_slice(&held);
            joined.extend_from_slice(&piece[..=end]);
            joined.freeze()
        };
        for line in complete.split(|&b| b == b'\n') {
            if self.off {
                break;
            }
            self.note(line);
        }
        if self.off || tail.len() > MAX_EVENT_LINE {
            // Nothing is held back any more: the tail goes with the lines.
            let mut out = BytesMut::with_capacity(complete.len() + tail.len());
            out.extend_from_slice(&complete);
            out.extend_from_slice(&tail);
            self.off = true;
            return out.freeze();
        }
        self.partial.extend_from_slice(&tail);
        complete
    }

    /// What is held back when the answer ends cleanly (a last line without its newline).
    pub(super) fn rest(&mut self) -> Option<Bytes> {
        (!self.partial.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.partial)))
    }

    /// The watch resumes elsewhere: the line held back was never sent (it comes again, whole).
    pub(super) fn resume(&mut self) {
        self.partial = Vec::new();
        self.resumed = self.resumed.saturating_add(1);
    }

    /// The target of the resumed request at `now`: the client's path and parameters, from the
    /// resume point (`resourceVersion`, first, so it is the value every reader takes), without
    /// `sendInitialEvents` and `resourceVersionMatch`, bounded by what is left of the lifetime.
    pub(super) fn resumed_target(&self, uri: &http::Uri, now: Instant) -> String {
        let mut target = format!("{}?resourceVersion=", uri.path());
        for byte in self.last.bytes() {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                target.push(char::from(byte));
            } else {
                target.push_str(&format!("%{byte:02X}"));
            }
        }
        if let Some(left) = self.left(now) {
            target.push_str(&format!("&timeoutSeconds={}", left.as_secs().max(1)));
        }
        let kept = uri.query().unwrap_or_default().split('&').filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(key, _)| key);
            !pair.is_empty() && !REPLACED.contains(&&*decode_value(key))
        });
        for pair in kept {
            target.push('&');
            target.push_str(pair);
        }
        target
    }

    /// The `ERROR` event a client gets when the resumed request was answered `410 Gone`:
    /// the Status of `body` when it is one, else a `410 Expired` Status, as kube-apiserver
    /// sends a watch from a compacted resourceVersion in the stream.
    pub(super) fn expired_event(&self, body: &[u8]) -> Bytes {
        let status = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .filter(|s| s["kind"] == "Status" && s["code"] == 410)
            .unwrap_or_else(|| {
                let message = format!("too old resource version: {}", self.last);
                Failure::new(Reason::Expired, message).to_json()
            });
        let event = serde_json::json!({"type": "ERROR", "object": status});
        let mut line = event.to_string().into_bytes();
        line.push(b'\n');
        Bytes::from(line)
    }

    /// Moves the position past one complete line (blank ones are skipped).
    fn note(&mut self, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Event<'_>>(line) else {
            self.off = true;
            return;
        };
        let version = event
            .object
            .and_then(|o| o.metadata)
            .and_then(|m| m.resource_version)
            .filter(|v| !v.is_empty());
        match (&*event.kind, version) {
            ("ERROR", _) | (_, None) => self.off = true,
            (kind, Some(version)) => {
                self.last.clear();
                self.last.push_str(&version);
                self.armed |= kind == "BOOKMARK";
            }
        }
    }

    /// A line longer than the bound: resumption is off, and what was held back goes now.
    fn give_up(&mut self, piece: Bytes) -> Bytes {
        self.off = true;
        let mut out = BytesMut::from(&std::mem::take(&mut self.partial)[..]);
        out.extend_from_slice(&piece);
        out.freeze()
    }
}

#[cfg(test)]
mod tests;
