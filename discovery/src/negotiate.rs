//! Accept-header negotiation for `/apis`, `/api` and `/apis/<group>` (k8s.io/apiserver's
//! `pkg/endpoints/handlers/negotiation/negotiate.go` and
//! `pkg/endpoints/discovery/aggregated/negotiation.go`).
//!
//! Clauses are parsed the way Kubernetes does (goautoneg): split on `,`, parameters on `;`,
//! `q` read as a float (unparsable = 0), then ordered by `q` descending with concrete types
//! before wildcards, otherwise in header order. The first clause in that order that a serializer
//! takes decides (`NegotiateMediaTypeOptions`). The gateway renders JSON and CBOR:
//! `application/json`, `application/*` and `*/*` mean JSON (the first serializer
//! kube-apiserver lists), `application/cbor` means CBOR; other types (YAML, protobuf) are
//! skipped.

use apiagg_apis::CBOR;

use crate::accept::{media_ranges, Clause};
use crate::types::APIDISCOVERY_GROUP;

/// The JSON media type (Content-Type of the legacy documents in JSON).
pub const JSON: &str = "application/json";
/// Content-Type of aggregated discovery v2.
pub const CONTENT_TYPE_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// Content-Type of aggregated discovery v2beta1.
pub const CONTENT_TYPE_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
/// Content-Type of aggregated discovery v2 in CBOR.
pub const CONTENT_TYPE_V2_CBOR: &str =
    "application/cbor;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// Content-Type of aggregated discovery v2beta1 in CBOR.
pub const CONTENT_TYPE_V2BETA1_CBOR: &str =
    "application/cbor;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
/// `as=` value of aggregated discovery.
const AGGREGATED_KIND: &str = "APIGroupDiscoveryList";

/// The formats apiagg writes its own documents in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// `application/json` (also for a missing Accept header and for wildcards).
    #[default]
    Json,
    /// `application/cbor` (KEP-4222).
    Cbor,
}

impl Format {
    /// The media type, without parameters.
    pub fn media_type(self) -> &'static str {
        match self {
            Format::Json => JSON,
            Format::Cbor => CBOR,
        }
    }

    /// The format a clause's media range selects, if the gateway writes one it covers.
    fn of(clause: &Clause<'_>) -> Option<Format> {
        if clause.accepts_json() {
            Some(Format::Json)
        } else if clause.is(CBOR) {
            Some(Format::Cbor)
        } else {
            None
        }
    }
}

/// Which discovery path is being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/apis` or `/api` (no trailing slash): aggregated or legacy by Accept.
    Root,
    /// `/apis/`, `/api/`, `/apis/<group>`: legacy only.
    LegacyOnly,
}

/// Negotiation switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegotiateOptions {
    /// Serve `apidiscovery.k8s.io/v2beta1` (1.30–1.32 behaviour). When off, v2beta1 clauses
    /// are ignored, as with `AggregatedDiscoveryRemoveBetaType` in 1.33+.
    pub serve_v2beta1: bool,
}

impl Default for NegotiateOptions {
    fn default() -> Self {
        Self {
            serve_v2beta1: true,
        }
    }
}

/// Aggregated discovery version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggregatedVersion {
    /// `apidiscovery.k8s.io/v2`.
    V2,
    /// `apidiscovery.k8s.io/v2beta1`.
    V2Beta1,
}

impl AggregatedVersion {
    /// The exact Content-Type to send in `format` (upstream appends `g`, `v`, `as` to the
    /// serializer's media type).
    pub fn content_type(self, format: Format) -> &'static str {
        match (self, format) {
            (AggregatedVersion::V2, Format::Json) => CONTENT_TYPE_V2,
            (AggregatedVersion::V2Beta1, Format::Json) => CONTENT_TYPE_V2BETA1,
            (AggregatedVersion::V2, Format::Cbor) => CONTENT_TYPE_V2_CBOR,
            (AggregatedVersion::V2Beta1, Format::Cbor) => CONTENT_TYPE_V2BETA1_CBOR,
        }
    }
}

/// Outcome of a successful negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiated {
    /// Serve the aggregated document. `no_peer` is set when the clause carried
    /// `profile=nopeer` (the gateway has no peers, so it serves the same document).
    Aggregated {
        /// v2 or v2beta1.
        version: AggregatedVersion,
        /// `profile=nopeer` was requested.
        no_peer: bool,
        /// JSON or CBOR.
        format: Format,
    },
    /// Serve the legacy document.
    Legacy {
        /// JSON or CBOR.
        format: Format,
    },
}

impl Negotiated {
    /// The format to write.
    pub fn format(self) -> Format {
        match self {
            Negotiated::Aggregated { format, .. } | Negotiated::Legacy { format } => format,
        }
    }

    /// The exact Content-Type to send.
    pub fn content_type(self) -> &'static str {
        match self {
            Negotiated::Aggregated {
                version, format, ..
            } => version.content_type(format),
            Negotiated::Legacy { format } => format.media_type(),
        }
    }
}

/// No Accept clause can be served: answer 406 with [`NotAcceptable::message`] (in JSON, as
/// upstream's `WriteRawJSON` fallback). Not retryable with the same Accept header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("only the following media types are accepted: application/json, application/cbor")]
pub struct NotAcceptable;

/// The result of a negotiation.
type Result<T, E = NotAcceptable> = std::result::Result<T, E>;

impl NotAcceptable {
    /// The Status message (upstream wording, listing the types the gateway serves).
    pub fn message(&self) -> String {
        self.to_string()
    }
}

/// How discovery reads a clause.
trait DiscoveryClause {
    /// Asks for a transformation (`g`, `v` or `as`).
    fn has_transform(&self) -> bool;
    /// A `stream` parameter other than `watch` makes a clause unacceptable.
    fn stream_ok(&self) -> bool;
}

impl DiscoveryClause for Clause<'_> {
    fn has_transform(&self) -> bool {
        self.params
            .iter()
            .any(|(k, _)| matches!(*k, "g" | "v" | "as"))
    }

    fn stream_ok(&self) -> bool {
        self.param("stream")
            .is_none_or(|s| s.is_empty() || s == "watch")
    }
}

/// The aggregated version and format a clause asks for, if it is a servable aggregated clause.
fn aggregated_request(
    clause: &Clause<'_>,
    opts: &NegotiateOptions,
) -> Option<(AggregatedVersion, Format)> {
    let format = Format::of(clause).filter(|_| clause.stream_ok())?;
    if clause.param("g")? != APIDISCOVERY_GROUP || clause.param("as")? != AGGREGATED_KIND {
        return None;
    }
    let version = match clause.param("v")? {
        "v2" => AggregatedVersion::V2,
        "v2beta1" if opts.serve_v2beta1 => AggregatedVersion::V2Beta1,
        _ => return None,
    };
    Some((version, format))
}

/// The format of the first clause (in preference order) a plain, untransformed answer can
/// satisfy (upstream's `DefaultEndpointRestrictions`).
fn plain_format(clauses: &[Clause<'_>]) -> Option<Format> {
    clauses
        .iter()
        .filter(|c| !c.has_transform() && c.stream_ok())
        .find_map(Format::of)
}

/// The format of a `Status` apiagg writes itself (an error), as kube-apiserver's
/// `responsewriters.ErrorNegotiated` picks it: the first clause in preference order that names
/// JSON, CBOR or a wildcard without `g`/`v`/`as`; JSON when there is none, or no header (upstream
/// falls back to `WriteRawJSON` rather than answer an error with 406).
pub fn status_format(accept: Option<&str>) -> Format {
    let header = accept.map(str::trim).unwrap_or("");
    plain_format(&media_ranges(header)).unwrap_or_default()
}

/// Decides what to serve for `accept` (the first Accept header value, `None` if absent).
///
/// On [`Endpoint::Root`] the first clause (in preference order) that names JSON, CBOR or a
/// wildcard with `g=apidiscovery.k8s.io;v=v2|v2beta1;as=APIGroupDiscoveryList` selects aggregated
/// discovery in that clause's format; otherwise, and always on [`Endpoint::LegacyOnly`], legacy
/// negotiation runs: a missing or empty header selects legacy JSON, else the first clause
/// without `g`/`v`/`as` that names JSON, CBOR or a wildcard selects its format; anything else
/// is [`NotAcceptable`].
///
/// Clients send the same header on every request (kubectl, client-go, kube-rs each have their
/// own), so each thread keeps its last header and answer: a repeat costs one comparison instead
/// of a parse.
pub fn negotiate(
    accept: Option<&str>,
    endpoint: Endpoint,
    opts: &NegotiateOptions,
) -> Result<Negotiated> {
    let header = accept.map(str::trim).unwrap_or("");
    if header.is_empty() {
        return Ok(Negotiated::Legacy {
            format: Format::Json,
        });
    }
    if header.len() > MEMO_MAX {
        return decide(header, endpoint, opts);
    }
    LAST.with_borrow_mut(|last| match last {
        Some(m) if *m.header == *header && m.endpoint == endpoint && m.opts == *opts => m.answer,
        _ => {
            let answer = decide(header, endpoint, opts);
            *last = Some(Memo {
                header: header.into(),
                endpoint,
                opts: *opts,
                answer,
            });
            answer
        }
    })
}

/// The longest header a thread keeps (real clients send under 200 bytes).
const MEMO_MAX: usize = 512;

/// A thread's last negotiation.
struct Memo {
    header: Box<str>,
    endpoint: Endpoint,
    opts: NegotiateOptions,
    answer: Result<Negotiated>,
}

thread_local! {
    static LAST: std::cell::RefCell<Option<Memo>> = const { std::cell::RefCell::new(None) };
}

/// [`negotiate`] for a non-empty, trimmed header, without the memo.
fn decide(header: &str, endpoint: Endpoint, opts: &NegotiateOptions) -> Result<Negotiated> {
    let clauses = media_ranges(header);
    if endpoint == Endpoint::Root {
        for clause in &clauses {
            if let Some((version, format)) = aggregated_request(clause, opts) {
                let no_peer = clause.param("profile") == Some("nopeer");
                return Ok(Negotiated::Aggregated {
                    version,
                    no_peer,
                    format,
                });
            }
        }
    }
    plain_format(&clauses)
        .map(|format| Negotiated::Legacy { format })
        .ok_or(NotAcceptable)
}
