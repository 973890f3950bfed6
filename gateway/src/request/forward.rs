//! THE header policy of every forwarded request, used by the proxy and the upgrade tunnel alike:
//! the client's identity claims (`X-Remote-*` and the configured front-proxy headers) never pass;
//! remote backends get the caller as `X-Remote-*` instead of its credentials; the delegate gets
//! the caller's own credentials when it can verify them, else apiagg's token and `Impersonate-*`;
//! `Host` names the endpoint; `X-Forwarded-For/Proto/Host/Uri` say where the request came from.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use pingora_error::{ErrorType::InvalidHTTPHeader, OrErr, Result};
use pingora_http::RequestHeader;

use super::ctx::To;
use crate::auth::{Authenticator, FieldsSize, User};
use crate::backends::Upstream;
use apiagg_audit::AUDIT_ID_HEADER;

mod size;
pub use size::{check as check_size, MAX_H2_HEADER_LIST};

/// Who the forwarded request is from, and how that is said.
#[derive(Debug, Clone)]
pub enum Identity<'a> {
    /// A remote backend: the caller as `X-Remote-*`, over the proxy client certificate.
    Remote(&'a User),
    /// The delegate authenticates the caller itself: its credentials pass unchanged.
    CallerCredentials,
    /// The delegate cannot see how apiagg authenticated the caller: apiagg's own credentials
    /// (`token`, and its client certificate on the connection) with `Impersonate-*`.
    Impersonate {
        /// The caller.
        user: &'a User,
        /// apiagg's `Authorization` value for the delegate.
        token: Option<Arc<HeaderValue>>,
    },
}

impl<'a> Identity<'a> {
    /// How `user` is stated to `upstream`, reached the way `to` says.
    pub(in crate::request) fn of(to: To, user: &'a User, upstream: &'a Upstream) -> Identity<'a> {
        match to {
            To::Remote => Identity::Remote(user),
            To::DelegateAsCaller => Identity::CallerCredentials,
            To::DelegateImpersonating => Identity::Impersonate {
                user,
                token: upstream.token.as_ref().and_then(|t| t.header()),
            },
        }
    }

    /// Whether the request travels on apiagg's own connections (its client certificate).
    pub fn own_connection(&self) -> bool {
        matches!(self, Identity::Impersonate { .. })
    }

    /// The size of the headers stating the caller, and of apiagg's own `Authorization` value.
    pub fn size(&self) -> (FieldsSize, usize) {
        match self {
            Identity::Remote(user) => (user.remote_size(), 0),
            Identity::Impersonate { user, token } => (
                user.impersonation_size(),
                token.as_ref().map_or(0, |t| t.len()),
            ),
            Identity::CallerCredentials => (FieldsSize::default(), 0),
        }
    }
}

/// What a forwarded request carries besides the client's own headers and the endpoint.
#[derive(Clone)]
pub struct Forwarding<'a> {
    /// The client's address, appended to `X-Forwarded-For`.
    pub client_ip: Option<IpAddr>,
    /// `https` when apiagg's listener serves TLS, else `http`.
    pub proto: &'static str,
    /// Who the request is from.
    pub identity: Identity<'a>,
    /// The authenticators (for the configured front-proxy header names).
    pub auth: &'a Authenticator,
    /// `traceparent` (and `tracestate`) of apiagg's span of this upstream call, replacing the
    /// caller's; empty when tracing is off (the caller's then pass unchanged).
    pub trace: &'a [(HeaderName, HeaderValue)],
}

/// Adds `timeoutSeconds=<seconds>` to the query of a watch the client did not bound.
pub fn add_timeout_seconds(request: &mut RequestHeader, seconds: u64) -> pingora_error::Result<()> {
    let uri = &request.uri;
    let target = match uri.query() {
        Some(query) if !query.is_empty() => {
            format!("{}?{query}&timeoutSeconds={seconds}", uri.path())
        }
        _ => format!("{}?timeoutSeconds={seconds}", uri.path()),
    };
    let uri = http::Uri::try_from(target).map_err(|e| {
        pingora_error::Error::because(
            pingora_error::ErrorType::InternalError,
            "adding timeoutSeconds to a watch",
            e,
        )
    })?;
    request.set_uri(uri);
    Ok(())
}

/// Whether the client sent impersonation headers.
pub fn asks_impersonation(request: &RequestHeader) -> bool {
    request
        .headers
        .keys()
        .any(|name| name.as_str().starts_with("impersonate-"))
}

/// Whether a client header must not be forwarded. A name with underscores is judged as its
/// dashed form too: CGI-style header maps read `X_Remote_User` as `X-Remote-User`.
fn is_hidden(name: &HeaderName, forwarding: &Forwarding<'_>) -> bool {
    if name.as_str().contains('_') {
        let dashed = name.as_str().replace('_', "-");
        if HeaderName::from_bytes(dashed.as_bytes()).is_ok_and(|d| is_hidden_as(&d, forwarding)) {
            return true;
        }
    }
    is_hidden_as(name, forwarding)
}

/// Whether a client header named `name` must not be forwarded.
fn is_hidden_as(name: &HeaderName, forwarding: &Forwarding<'_>) -> bool {
    let text = name.as_str();
    if text.starts_with("x-remote-") || forwarding.auth.is_identity_header(name) {
        return true;
    }
    match &forwarding.identity {
        Identity::CallerCredentials => false,
        Identity::Remote(_) | Identity::Impersonate { .. } => {
            text == "authorization"
                || text == "proxy-authorization"
                || text.starts_with("impersonate-")
        }
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");

/// Applies the policy to the request head pingora sends to the endpoint whose `host:port` is
/// `authority` (for `Host` and `X-Forwarded-Host`).
///
/// The head's header map is edited directly, with names parsed once for the process and
/// values built once per endpoint or user: pingora's own header setters parse every name
/// again and keep a second, case-preserving map, which costs several times the whole
/// policy. Header names therefore go upstream in their canonical form, as they do over
/// HTTP/2 (HTTP field names are case-insensitive).
#[cfg(test)]
pub fn apply(
    request: &mut RequestHeader,
    forwarding: &Forwarding,
    authority: &HeaderValue,
) -> Result<()> {
    *request = *head_with(request, forwarding, authority, false)?;
    Ok(())
}

/// The head apiagg sends for `request`: its method, target and headers without the hop-by-hop
/// ones (framing.rs), under the policy. Built from a copy of the header map alone (pingora's
/// second, case-preserving map is not copied).
pub fn forwarded_head(
    request: &RequestHeader,
    forwarding: &Forwarding,
    authority: &HeaderValue,
) -> Result<Box<RequestHeader>> {
    head_with(request, forwarding, authority, true)
}

fn head_with(
    request: &RequestHeader,
    forwarding: &Forwarding,
    authority: &HeaderValue,
    strip: bool,
) -> Result<Box<RequestHeader>> {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = request.method.clone();
    parts.uri = request.uri.clone();
    parts.version = request.version;
    parts.headers = policy_headers(
        &request.headers,
        request.uri.path(),
        forwarding,
        authority,
        strip,
    )?;
    let mut head = Box::new(RequestHeader::from(parts));
    // A target that does not round-trip through the URI (absolute form) is kept verbatim.
    let uri_target = request.uri.path_and_query().map(|p| p.as_str().as_bytes());
    if uri_target != Some(request.raw_path()) {
        head.set_raw_path(request.raw_path())?;
    }
    Ok(head)
}

/// The policy applied to the client's headers `source`, for a request whose path is `path`,
/// in one pass into a map sized for what is added: with `strip`, without the hop-by-hop
/// headers and those `Connection` names (so nothing apiagg adds can be named away).
fn policy_headers(
    source: &HeaderMap,
    path: &str,
    forwarding: &Forwarding,
    authority: &HeaderValue,
    strip: bool,
) -> Result<HeaderMap> {
    let named = if strip {
        super::framing::connection_named(source)
    } else {
        Vec::new()
    };
    let dropped = |name: &HeaderName| {
        (strip && super::framing::is_hop_by_hop(name))
            || named.contains(name)
            || is_hidden(name, forwarding)
    };
    let (stamped, token) = match &forwarding.identity {
        Identity::Remote(user) => (user.remote_headers().as_slice(), None),
        Identity::Impersonate { user, token } => {
            (user.impersonation_headers().as_slice(), token.as_deref())
        }
        Identity::CallerCredentials => (&[][..], None),
    };
    // Headers apiagg sets itself replace the client's.
    let replaced = |name: &HeaderName| {
        *name == http::header::HOST
            || *name == X_FORWARDED_PROTO
            || *name == X_FORWARDED_HOST
            || *name == X_FORWARDED_URI
            || (forwarding.client_ip.is_some() && *name == X_FORWARDED_FOR)
            || (token.is_some() && *name == http::header::AUTHORIZATION)
    };
    let mut headers = HeaderMap::with_capacity(source.len() + stamped.len() + 6);
    for (name, value) in source {
        if !replaced(name) && !dropped(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    if let Some(token) = token {
        headers.insert(http::header::AUTHORIZATION, token.clone());
    }
    for (name, value) in stamped {
        headers.append(name.clone(), value.clone());
    }
    headers.insert(http::header::HOST, authority.clone());
    if let Some(ip) = forwarding.client_ip {
        let prior = Some(&X_FORWARDED_FOR)
            .filter(|name| !dropped(name))
            .and_then(|name| source.get(name))
            .map(HeaderValue::as_bytes)
            .filter(|v| !v.is_empty());
        headers.insert(X_FORWARDED_FOR, forwarded_for(prior, ip));
    }
    let proto = HeaderValue::from_static(forwarding.proto);
    headers.insert(X_FORWARDED_PROTO, proto);
    headers.insert(X_FORWARDED_HOST, authority.clone());
    let uri = HeaderValue::from_str(path).or_err(InvalidHTTPHeader, "request path")?;
    headers.insert(X_FORWARDED_URI, uri);
    if !forwarding.trace.is_empty() {
        super::trace::stamp(&mut headers, forwarding.trace);
    }
    Ok(headers)
}

/// `X-Forwarded-For` with the client's address appended to what the client sent.
fn forwarded_for(prior: Option<&[u8]>, ip: IpAddr) -> HeaderValue {
    use std::io::Write;
    let mut value = Vec::with_capacity(prior.map_or(0, |p| p.len() + 2) + 39);
    if let Some(prior) = prior {
        value.extend_from_slice(prior);
        value.extend_from_slice(b", ");
    }
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().iter().enumerate() {
                if i > 0 {
                    value.push(b'.');
                }
                push_decimal(&mut value, *octet);
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(value, "{v6}");
        }
    }
    // Bytes of a valid header value, a comma and an address: always a valid value.
    HeaderValue::from_maybe_shared(Bytes::from(value))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Appends the decimal digits of `n`.
fn push_decimal(out: &mut Vec<u8>, n: u8) {
    if n >= 100 {
        out.push(b'0' + n / 100);
    }
    if n >= 10 {
        out.push(b'0' + (n / 10) % 10);
    }
    out.push(b'0' + n % 10);
}

/// The HTTP/1.1 head the upgrade tunnel writes to the backend: the same policy, serialized.
pub fn upgrade_head(
    request: &RequestHeader,
    forwarding: &Forwarding,
    authority: &HeaderValue,
) -> Result<Vec<u8>> {
    let headers = policy_headers(
        &request.headers,
        request.uri.path(),
        forwarding,
        authority,
        false,
    )?;
    let target = request.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut head = format!("{} {target} HTTP/1.1\r\nHost: ", request.method).into_bytes();
    head.extend_from_slice(authority.as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in headers.iter() {
        if name == http::header::HOST {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    Ok(head)
}

/// Headers that describe a body or an encoding: never part of a `GET` apiagg makes itself (it
/// reads the answer as it comes).
const NOT_FETCHED: [HeaderName; 3] = [
    http::header::CONTENT_LENGTH,
    http::header::CONTENT_TYPE,
    http::header::ACCEPT_ENCODING,
];

/// The headers of a `GET` apiagg sends in the caller's name (the streaming-list emulation's
/// lists and watches): the same policy, hop-by-hop and body headers removed, JSON asked for,
/// and the request's audit ID.
pub fn fetch_headers(
    request: &RequestHeader,
    forwarding: &Forwarding,
    authority: &HeaderValue,
    audit_id: Option<HeaderValue>,
) -> Result<HeaderMap> {
    let path = request.uri.path();
    let mut headers = policy_headers(&request.headers, path, forwarding, authority, true)?;
    for name in &NOT_FETCHED {
        headers.remove(name);
    }
    headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    if let Some(id) = audit_id {
        headers.insert(AUDIT_ID_HEADER, id);
    }
    Ok(headers)
}

#[cfg(test)]
mod tests;
