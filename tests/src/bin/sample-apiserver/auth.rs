//! Authentication of callers, the way kube-apiserver does it: a trusted front proxy names the
//! caller in `X-Remote-*` headers, or a bearer token of the static token file does (and may
//! impersonate someone else with `Impersonate-*` headers).
//!
//! Headers are left on the request, so `echo` still shows what arrived.

use std::collections::BTreeMap;

use anyhow::Result;
use hyper::header::{HeaderMap, AUTHORIZATION};
use hyper::Response;
use serde_json::{json, Map, Value};

use crate::args::Args;
use crate::client_cert::FrontProxy;
use crate::response::{bad_request, unauthorized, Body};
use crate::tokens::TokenFile;

/// The group every authenticated token user (and impersonated user) is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

const REMOTE_USER: &str = "x-remote-user";
const REMOTE_UID: &str = "x-remote-uid";
const REMOTE_GROUP: &str = "x-remote-group";
const REMOTE_EXTRA_PREFIX: &str = "x-remote-extra-";
const IMPERSONATE_USER: &str = "impersonate-user";
const IMPERSONATE_UID: &str = "impersonate-uid";
const IMPERSONATE_GROUP: &str = "impersonate-group";
const IMPERSONATE_EXTRA_PREFIX: &str = "impersonate-extra-";

/// How a caller was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `X-Remote-*` headers on a connection of a trusted front proxy.
    FrontProxy,
    /// A client certificate of `--client-ca-file`.
    Certificate,
    /// A bearer token of `--require-token`.
    Token,
    /// Authentication is off (neither flag given).
    None,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Via::FrontProxy => "front-proxy",
            Via::Certificate => "certificate",
            Via::Token => "token",
            Via::None => "none",
        }
    }
}

/// The authenticated caller of a request (stored in the request's extensions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// User name.
    pub user: String,
    /// User UID (may be empty).
    pub uid: String,
    /// Groups, in the order they were given.
    pub groups: Vec<String>,
    /// Extra attributes by (unescaped, lower-case) key.
    pub extra: BTreeMap<String, Vec<String>>,
    /// The token user who impersonates this caller.
    pub impersonated_by: Option<String>,
    /// How the caller was authenticated.
    pub via: Via,
}

impl Caller {
    /// The caller when authentication is off.
    pub fn anonymous() -> Caller {
        Caller {
            user: String::new(),
            uid: String::new(),
            groups: Vec::new(),
            extra: BTreeMap::new(),
            impersonated_by: None,
            via: Via::None,
        }
    }

    /// The `whoami` answer: `uid` and `impersonatedBy` only when set.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("user".into(), json!(self.user));
        if !self.uid.is_empty() {
            out.insert("uid".into(), json!(self.uid));
        }
        out.insert("groups".into(), json!(self.groups));
        out.insert("extra".into(), json!(self.extra));
        if let Some(by) = &self.impersonated_by {
            out.insert("impersonatedBy".into(), json!(by));
        }
        out.insert("via".into(), json!(self.via.as_str()));
        Value::Object(out)
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No (valid) credentials: `401`.
    Unauthorized,
    /// `Impersonate-Group`, `-Uid` or `-Extra-*` without `Impersonate-User`: `400`.
    ImpersonationWithoutUser,
}

impl Refusal {
    /// The answer: a Kubernetes `Status`.
    pub fn response(self) -> Response<Body> {
        match self {
            Refusal::Unauthorized => unauthorized(),
            Refusal::ImpersonationWithoutUser => bad_request(
                "Impersonate-Group, Impersonate-Uid and Impersonate-Extra need Impersonate-User",
            ),
        }
    }
}

/// What the TLS handshake told about a connection.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// The client certificate chains to the request-header CA and its CN is allowed.
    pub front_proxy: bool,
    /// CN and O values of a client certificate chaining to `--client-ca-file`.
    pub certificate: Option<(String, Vec<String>)>,
    /// The connection's number in accept order (from 1), echoed in `X-Sample-Connection`.
    pub serial: u64,
}

/// The authenticators configured on the command line.
#[derive(Debug, Default)]
pub struct Auth {
    /// `--requestheader-client-ca-file` and `--requestheader-allowed-names`.
    pub front_proxy: Option<FrontProxy>,
    /// `--require-token`.
    pub tokens: Option<TokenFile>,
    /// `--client-ca-file` (the same chain check, any CN).
    pub client_ca: Option<FrontProxy>,
}

impl Auth {
    /// Loads the request-header CA (the token file is read per request).
    pub fn from_args(args: &Args) -> Result<Auth> {
        let front_proxy = match &args.requestheader_client_ca_file {
            Some(ca) => Some(FrontProxy::load(ca, &args.requestheader_allowed_names)?),
            None => None,
        };
        let tokens = args.require_token.clone().map(TokenFile::new);
        let client_ca = match &args.client_ca_file {
            Some(ca) => Some(FrontProxy::load(ca, &[])?),
            None => None,
        };
        Ok(Auth {
            front_proxy,
            tokens,
            client_ca,
        })
    }

    /// Whether requests must authenticate at all.
    pub fn enabled(&self) -> bool {
        self.front_proxy.is_some() || self.tokens.is_some() || self.client_ca.is_some()
    }

    /// The caller of a request on `conn`, or why it is refused.
    pub fn authenticate(&self, conn: &Connection, headers: &HeaderMap) -> Result<Caller, Refusal> {
        if !self.enabled() {
            return Ok(Caller::anonymous());
        }
        if self.front_proxy.is_some() && conn.front_proxy {
            if let Some(caller) = front_proxy_caller(headers) {
                return Ok(caller);
            }
        }
        if let Some((user, groups)) = conn.certificate.clone() {
            let caller = Caller {
                user,
                uid: String::new(),
                groups: with_authenticated(groups),
                extra: BTreeMap::new(),
                impersonated_by: None,
                via: Via::Certificate,
            };
            return impersonate(caller, headers);
        }
        let Some(tokens) = &self.tokens else {
            return Err(Refusal::Unauthorized);
        };
        let Some(token) = bearer_token(headers) else {
            return Err(Refusal::Unauthorized);
        };
        let Some(user) = tokens.lookup(token) else {
            return Err(Refusal::Unauthorized);
        };
        let caller = Caller {
            user: user.name,
            uid: user.uid,
            groups: with_authenticated(user.groups),
            extra: user.extra,
            impersonated_by: None,
            via: Via::Token,
        };
        impersonate(caller, headers)
    }
}

/// Paths open without authentication: health checks, `/version` (kube-apiserver's
/// `system:public-info-viewer`) and `/debug/*` but `/debug/whoami`.
pub fn is_open(path: &str) -> bool {
    let path = match path.strip_suffix('/') {
        Some(p) if !p.is_empty() => p,
        _ => path,
    };
    if path == "/debug/whoami" {
        return false;
    }
    if path == "/version" {
        return true;
    }
    ["/healthz", "/livez", "/readyz", "/debug"]
        .iter()
        .any(|open| path == *open || path.starts_with(&format!("{open}/")))
}

/// The caller named by `X-Remote-*` headers; `None` without `X-Remote-User`.
fn front_proxy_caller(headers: &HeaderMap) -> Option<Caller> {
    let user = first_value(headers, REMOTE_USER)?;
    Some(Caller {
        user,
        uid: first_value(headers, REMOTE_UID).unwrap_or_default(),
        groups: all_values(headers, REMOTE_GROUP),
        extra: extra(headers, REMOTE_EXTRA_PREFIX),
        impersonated_by: None,
        via: Via::FrontProxy,
    })
}

/// Applies `Impersonate-*` headers to a token caller.
fn impersonate(caller: Caller, headers: &HeaderMap) -> Result<Caller, Refusal> {
    let groups = all_values(headers, IMPERSONATE_GROUP);
    let uid = first_value(headers, IMPERSONATE_UID);
    let extra = extra(headers, IMPERSONATE_EXTRA_PREFIX);
    let Some(user) = first_value(headers, IMPERSONATE_USER) else {
        if groups.is_empty() && uid.is_none() && extra.is_empty() {
            return Ok(caller);
        }
        return Err(Refusal::ImpersonationWithoutUser);
    };
    Ok(Caller {
        user,
        uid: uid.unwrap_or_default(),
        groups: with_authenticated(groups),
        extra,
        impersonated_by: Some(caller.user),
        via: caller.via,
    })
}

/// `groups` plus `system:authenticated` when missing.
pub fn with_authenticated(mut groups: Vec<String>) -> Vec<String> {
    if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        groups.push(AUTHENTICATED_GROUP.to_string());
    }
    groups
}

/// The token of `Authorization: Bearer <token>`.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The first non-empty value of a header, trimmed.
fn first_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
        .find(|v| !v.is_empty())
}

/// Every value of a header, in order (each value is one entry).
fn all_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

/// `<prefix><escaped key>` headers by lower-cased, percent-unescaped key.
fn extra(headers: &HeaderMap, prefix: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(prefix) else {
            continue;
        };
        out.entry(unescape_key(key))
            .or_default()
            .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    out
}

/// Lower-cases and percent-unescapes an extra key (kept as it is when not valid UTF-8).
pub fn unescape_key(key: &str) -> String {
    let lower = key.to_ascii_lowercase();
    match percent_encoding::percent_decode_str(&lower).decode_utf8() {
        Ok(decoded) => decoded.into_owned(),
        Err(_) => lower,
    }
}
