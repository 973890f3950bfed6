//! What an authenticated caller may do: `AlwaysAllow`, or kube-apiserver's webhook authorizer —
//! a SubjectAccessReview at the delegate for every request, its decision cached by a hash of the
//! review (allowed 5 min, denied 30 s by default; failures are not cached). Request attributes
//! are derived as k8s.io/apiserver's `requestinfo.go` does, caller-sent `Impersonate-*` headers
//! are authorized first as its impersonation filter does, and refusals are worded as its
//! `responsewriters.Forbidden` words them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use apiagg_config::file::{Authorization, AuthorizationMode};
use dashmap::DashMap;
use http::HeaderMap;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::user::{unescape_key, User, ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED};
use super::{Authenticated, Method};
use crate::backends::{Clients, Upstream};
use crate::observe::Metrics;

/// Upper bound of one SubjectAccessReview.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Most decisions remembered; past it, expired entries are dropped, then everything.
const CACHE_LIMIT: usize = 16_384;
/// Where SubjectAccessReviews are posted.
const REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/// Members may do anything without a review (kube-apiserver's privileged-group authorizer).
const PRIVILEGED_GROUP: &str = "system:masters";
/// The prefix of every impersonation header (lower case, as `http` stores names).
pub const IMPERSONATE_PREFIX: &str = "impersonate-";
const IMPERSONATE_USER: &str = "impersonate-user";
const IMPERSONATE_GROUP: &str = "impersonate-group";
const IMPERSONATE_UID: &str = "impersonate-uid";
const IMPERSONATE_EXTRA: &str = "impersonate-extra-";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Why a request may not go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The authorizer said no: 403 `Forbidden`. Not retryable until the policy changes.
    #[error("{message}")]
    Forbidden {
        /// kube-apiserver's message (`pods "x" is forbidden: User "u" cannot get …`).
        message: String,
        /// `details` of the Status: `name`, `group`, `kind` (each only when not empty).
        details: Value,
    },
    /// The authorizer could not decide (the delegate could not be asked, or the request cannot
    /// be described): 500 `InternalError`. Retryable: the delegate may answer next time.
    #[error("{0}")]
    Internal(String),
}

/// A request as the authorizer sees it.
#[derive(Debug, Clone, Copy)]
pub struct AuthzRequest<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// Path as sent (percent-encoded).
    pub path: &'a str,
    /// Query string, if any.
    pub query: Option<&'a str>,
    /// Request headers (for `Impersonate-*`).
    pub headers: &'a HeaderMap,
}

/// Authorization attributes of one check (k8s.io/apiserver's `authorizer.AttributesRecord`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, … (resource) or the lower-case method (non-resource).
    pub verb: String,
    /// A resource request (`resourceAttributes`) or not (`nonResourceAttributes`).
    pub resource_request: bool,
    /// The decoded path (non-resource requests).
    pub path: String,
    /// Namespace (resource requests).
    pub namespace: String,
    /// API group, empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Object name.
    pub name: String,
}

/// A decision of the authorizer: allowed or not, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decision {
    allowed: bool,
    reason: String,
}

struct Cached {
    decision: Decision,
    until: Instant,
}

/// Decisions by the SHA-256 of the review (user and attributes), each until its deadline; at
/// most 16,384 entries.
#[derive(Default)]
struct DecisionCache {
    entries: DashMap<[u8; 32], Cached>,
}

impl DecisionCache {
    fn get(&self, key: &[u8; 32]) -> Option<Decision> {
        let entry = self.entries.get(key)?;
        (entry.until > Instant::now()).then(|| entry.decision.clone())
    }

    fn put(&self, key: [u8; 32], decision: Decision, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        if self.entries.len() >= CACHE_LIMIT {
            let now = Instant::now();
            self.entries.retain(|_, c| c.until > now);
            if self.entries.len() >= CACHE_LIMIT {
                self.entries.clear();
            }
        }
        let until = Instant::now() + ttl;
        self.entries.insert(key, Cached { decision, until });
    }
}

/// The webhook authorizer: SubjectAccessReviews at the delegate, cached.
struct Webhook {
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    cache: DecisionCache,
}

/// Where reviews are sent and counted.
#[derive(Clone, Copy)]
pub struct Reviewer<'a> {
    /// The delegate (no delegate: every review fails).
    pub delegate: Option<&'a Upstream>,
    /// The controllers' HTTP clients (apiagg's own credentials at the delegate).
    pub clients: &'a Clients,
    /// `apiagg_authorization_decisions_total`.
    pub metrics: &'a Metrics,
}

/// The configured authorizer.
pub struct Authorizer {
    webhook: Option<Webhook>,
}

impl Default for Authorizer {
    fn default() -> Self {
        Authorizer::new(&Authorization::default())
    }
}

impl Authorizer {
    /// The authorizer `config` asks for.
    pub fn new(config: &Authorization) -> Authorizer {
        let webhook = (config.mode == AuthorizationMode::Webhook).then(|| Webhook {
            authorized_ttl: config.cache_authorized_ttl,
            unauthorized_ttl: config.cache_unauthorized_ttl,
            cache: DecisionCache::default(),
        });
        Authorizer { webhook }
    }

    /// Whether requests are authorized at all (`Webhook`).
    pub fn enabled(&self) -> bool {
        self.webhook.is_some()
    }

    /// Authorizes `request` of `caller`: its impersonation first (then the request as the
    /// impersonated user), then the request. `Ok(Some(user))`: allowed, as that impersonated
    /// user (the `Impersonate-*` headers are honoured and must not pass on); `Ok(None)`: allowed
    /// as the caller.
    pub async fn authorize(
        &self,
        request: &AuthzRequest<'_>,
        caller: &Authenticated,
        reviewer: Reviewer<'_>,
    ) -> Result<Option<Authenticated>, Refusal> {
        let Some(webhook) = &self.webhook else {
            return Ok(None);
        };
        if always_allowed(request.path) {
            return Ok(None);
        }
        let impersonation = impersonation(request.headers).map_err(|e| internal(request, &e))?;
        let mut user = caller.user.clone();
        let mut impersonated = None;
        if let Some(wanted) = impersonation {
            for attributes in &wanted.checks {
                // As upstream: an impersonation that cannot be checked is forbidden, not a 500.
                let reason = match webhook.check(&user, attributes, reviewer).await {
                    Ok(d) if d.allowed => continue,
                    Ok(d) => d.reason,
                    Err(e) => {
                        tracing::warn!("impersonation check failed: {e}");
                        String::new()
                    }
                };
                return Err(forbidden(&user, attributes, &reason));
            }
            user = Arc::new(wanted.user);
            impersonated = Some(Authenticated {
                user: user.clone(),
                method: Method::Impersonation,
            });
        }
        let attributes = attributes(request).map_err(|e| internal(request, &e))?;
        match webhook.check(&user, &attributes, reviewer).await {
            Ok(d) if d.allowed => Ok(impersonated),
            Ok(d) => Err(forbidden(&user, &attributes, &d.reason)),
            Err(e) => Err(internal(request, &e)),
        }
    }
}

impl Webhook {
    /// The decision for `user` doing `attributes`: cached, else asked. `Err` when the delegate
    /// could not be asked (not cached).
    async fn check(
        &self,
        user: &User,
        attributes: &Attributes,
        reviewer: Reviewer<'_>,
    ) -> Result<Decision, String> {
        if user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
            return Ok(Decision {
                allowed: true,
                reason: String::new(),
            });
        }
        let count = |decision: &str, cache: &str| {
            reviewer.metrics.authorization_decision(decision, cache);
        };
        let key = cache_key(user, attributes);
        if let Some(decision) = self.cache.get(&key) {
            count(label(&decision), "hit");
            return Ok(decision);
        }
        let asked = match reviewer.delegate {
            Some(delegate) => ask(user, attributes, delegate, reviewer.clients).await,
            None => Err("SubjectAccessReview: no delegate to ask".into()),
        };
        let decision = match asked {
            Ok(decision) => decision,
            Err(e) => {
                count("error", "miss");
                return Err(e);
            }
        };
        count(label(&decision), "miss");
        let ttl = if decision.allowed {
            self.authorized_ttl
        } else {
            self.unauthorized_ttl
        };
        self.cache.put(key, decision.clone(), ttl);
        Ok(decision)
    }
}

fn label(decision: &Decision) -> &'static str {
    if decision.allowed {
        "allowed"
    } else {
        "denied"
    }
}

/// Paths open to everybody without a review, as kube-apiserver's `system:public-info-viewer`
/// role has them: the health endpoints (and their checks) and `/version`.
fn always_allowed(path: &str) -> bool {
    if matches!(path, "/version" | "/version/") {
        return true;
    }
    ["/healthz", "/livez", "/readyz"].iter().any(|health| {
        path.strip_prefix(health)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// The hash a decision is cached under: every field of the review, length-prefixed.
fn cache_key(user: &User, a: &Attributes) -> [u8; 32] {
    let mut hash = Sha256::new();
    let mut field = |value: &str| {
        hash.update((value.len() as u64).to_le_bytes());
        hash.update(value.as_bytes());
    };
    field(&user.name);
    field(&user.uid);
    field(&user.groups.len().to_string());
    for g in &user.groups {
        field(g);
    }
    field(&user.extra.len().to_string());
    for (key, values) in &user.extra {
        field(key);
        field(&values.len().to_string());
        for v in values {
            field(v);
        }
    }
    field(if a.resource_request { "r" } else { "n" });
    for value in [
        &a.verb,
        &a.path,
        &a.namespace,
        &a.group,
        &a.version,
        &a.resource,
        &a.subresource,
        &a.name,
    ] {
        field(value);
    }
    hash.finalize().into()
}

/// `status` of a SubjectAccessReview answer.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewStatus {
    #[serde(default)]
    allowed: bool,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    evaluation_error: String,
}

#[derive(Deserialize)]
struct Review {
    #[serde(default)]
    status: ReviewStatus,
}

/// The `spec` of the review of `user` doing `a` (empty fields left out, as upstream's
/// `omitempty`).
fn review_spec(user: &User, a: &Attributes) -> Value {
    let mut spec = Map::new();
    let put = |map: &mut Map<String, Value>, key: &str, value: &str| {
        if !value.is_empty() {
            map.insert(key.into(), json!(value));
        }
    };
    let mut attributes = Map::new();
    if a.resource_request {
        for (key, value) in [
            ("namespace", &a.namespace),
            ("verb", &a.verb),
            ("group", &a.group),
            ("version", &a.version),
            ("resource", &a.resource),
            ("subresource", &a.subresource),
            ("name", &a.name),
        ] {
            put(&mut attributes, key, value);
        }
        spec.insert("resourceAttributes".into(), Value::Object(attributes));
    } else {
        put(&mut attributes, "path", &a.path);
        put(&mut attributes, "verb", &a.verb);
        spec.insert("nonResourceAttributes".into(), Value::Object(attributes));
    }
    put(&mut spec, "user", &user.name);
    if !user.groups.is_empty() {
        spec.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        let extra: Map<String, Value> = user
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        spec.insert("extra".into(), Value::Object(extra));
    }
    put(&mut spec, "uid", &user.uid);
    Value::Object(spec)
}

/// One SubjectAccessReview: `Ok` when the delegate answered, `Err` when it could not be asked
/// or its answer is not a review.
async fn ask(
    user: &User,
    attributes: &Attributes,
    delegate: &Upstream,
    clients: &Clients,
) -> Result<Decision, String> {
    let body = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": review_spec(user, attributes),
    });
    let client = clients.pick(delegate).map_err(|e| e.to_string())?;
    let answer = client
        .post_json(REVIEW_PATH, &body, REVIEW_TIMEOUT)
        .await
        .map_err(|e| format!("SubjectAccessReview: {e}"))?;
    if !matches!(answer.status, 200 | 201) {
        return Err(format!(
            "SubjectAccessReview: the delegate answered {}",
            answer.status
        ));
    }
    let review: Review = serde_json::from_slice(&answer.body)
        .map_err(|e| format!("SubjectAccessReview: invalid answer: {e}"))?;
    let status = review.status;
    if !status.evaluation_error.is_empty() {
        tracing::debug!(
            "SubjectAccessReview evaluation error: {}",
            status.evaluation_error
        );
    }
    // `denied` and no opinion are both a refusal: there is no other authorizer to ask.
    Ok(Decision {
        allowed: status.allowed,
        reason: status.reason,
    })
}

/// The attributes of a request, as k8s.io/apiserver's `RequestInfoFactory.NewRequestInfo`
/// derives them (`/api` and `/apis` prefixes, `api` without a group). `Err` for a path upstream
/// cannot describe either (`/api/v1/watch` with nothing after it).
pub fn attributes(request: &AuthzRequest<'_>) -> Result<Attributes, String> {
    let path = percent_decode(request.path);
    let info = Attributes {
        verb: request.method.to_ascii_lowercase(),
        path,
        ..Attributes::default()
    };
    let trimmed = info.path.trim_matches('/');
    let mut parts: Vec<&str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return Ok(info);
    }
    let grouped = parts[0] == "apis";
    parts.remove(0);
    let mut group = "";
    if grouped {
        if parts.len() < 3 {
            return Ok(info);
        }
        group = parts.remove(0);
    }
    let version = parts.remove(0);
    let mut verb = match request.method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    if matches!(parts[0], "proxy" | "watch") {
        if parts.len() < 2 {
            return Err(format!(
                "failed to create RequestInfo: unable to determine kind and namespace from url, {}",
                request.path
            ));
        }
        verb = if parts[0] == "proxy" {
            "proxy"
        } else {
            "watch"
        };
        parts.remove(0);
    }
    let mut namespace = "";
    if parts[0] == "namespaces" && parts.len() > 1 {
        namespace = parts[1];
        // `namespaces/<ns>/<resource>…`, unless it is the namespace's own subresource.
        if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
            parts.drain(..2);
        }
    }
    let (resource, mut name, subresource) = match parts.as_slice() {
        [resource, name, subresource, ..] if verb != "proxy" => (*resource, *name, *subresource),
        [resource, name, ..] => (*resource, *name, ""),
        [resource] => (*resource, "", ""),
        [] => ("", "", ""),
    };
    let mut selected_name = String::new();
    if name.is_empty() && verb == "get" {
        let (watch, field_name) = list_options(request.query);
        verb = if watch { "watch" } else { "list" };
        if let Some(n) = field_name {
            selected_name = n;
        }
    }
    if !selected_name.is_empty() {
        name = &selected_name;
    }
    if name.is_empty() && verb == "delete" {
        verb = "deletecollection";
    }
    Ok(Attributes {
        verb: verb.to_string(),
        resource_request: true,
        path: String::new(),
        namespace: namespace.to_string(),
        group: group.to_string(),
        version: version.to_string(),
        resource: resource.to_string(),
        subresource: subresource.to_string(),
        name: name.to_string(),
    })
}

/// `watch` and the `metadata.name` a `fieldSelector` pins, from a list's query (upstream's
/// `ListOptions` decoding: `watch` is true unless absent, `0` or `false`).
fn list_options(query: Option<&str>) -> (bool, Option<String>) {
    let Some(query) = query else {
        return (false, None);
    };
    let mut watch = None;
    let mut selector = None;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "watch" if watch.is_none() => {
                watch = Some(!(value == "0" || value.eq_ignore_ascii_case("false")));
            }
            "fieldSelector" if selector.is_none() => selector = Some(value.into_owned()),
            _ => {}
        }
    }
    let name = selector.as_deref().and_then(selected_name);
    (watch.unwrap_or(false), name)
}

/// The name an exact `metadata.name=` (or `==`) term of a field selector requires, when it is
/// a valid path segment (upstream's `RequiresExactMatch` and `IsValidPathSegmentName`).
fn selected_name(selector: &str) -> Option<String> {
    let mut found = None;
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (field, value, exact) = if let Some((f, v)) = term.split_once("!=") {
            (f, v, false)
        } else if let Some((f, v)) = term.split_once("==") {
            (f, v, true)
        } else if let Some((f, v)) = term.split_once('=') {
            (f, v, true)
        } else {
            // Not a selector upstream parses: the whole ListOptions is ignored.
            return None;
        };
        if exact && field.trim() == "metadata.name" && found.is_none() {
            found = Some(value.trim().to_string());
        }
    }
    found.filter(|n| n != "." && n != ".." && !n.contains('/') && !n.contains('%'))
}

/// `%XX` sequences decoded (Go's `URL.Path`); invalid ones are kept as they are.
fn percent_decode(path: &str) -> String {
    if !path.contains('%') {
        return path.to_string();
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What `Impersonate-*` headers ask for: the user they name and one check per thing
/// impersonated (upstream's `buildImpersonationRequests`).
#[derive(Debug)]
struct Impersonation {
    user: User,
    checks: Vec<Attributes>,
}

fn impersonate(resource: &str, group: &str, name: &str) -> Attributes {
    Attributes {
        verb: "impersonate".into(),
        resource_request: true,
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        name: name.into(),
        ..Attributes::default()
    }
}

/// `(namespace, name)` of a service account user name, as upstream's `SplitUsername`.
fn service_account(user: &str) -> Option<(&str, &str)> {
    let (namespace, name) = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?.split_once(':')?;
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    (valid(namespace) && valid(name) && !name.contains(':')).then_some((namespace, name))
}

/// The impersonation the headers ask for, if any; `Err` for groups, extra or a UID without a
/// user (upstream answers 500 for it).
fn impersonation(headers: &HeaderMap) -> Result<Option<Impersonation>, String> {
    if !headers
        .keys()
        .any(|n| n.as_str().starts_with(IMPERSONATE_PREFIX))
    {
        return Ok(None);
    }
    let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let name = headers
        .get(IMPERSONATE_USER)
        .map(text)
        .filter(|n| !n.is_empty());
    let groups: Vec<String> = headers
        .get_all(IMPERSONATE_GROUP)
        .iter()
        .map(text)
        .collect();
    let mut extra: Vec<(String, Vec<String>)> = Vec::new();
    let mut extra_checks = Vec::new();
    for (header, value) in headers {
        let Some(escaped) = header.as_str().strip_prefix(IMPERSONATE_EXTRA) else {
            continue;
        };
        let key = unescape_key(escaped);
        let value = text(value);
        let mut check = impersonate("userextras", "authentication.k8s.io", &value);
        check.subresource = key.clone();
        extra_checks.push(check);
        match extra.iter_mut().find(|(k, _)| *k == key) {
            Some((_, values)) => values.push(value),
            None => extra.push((key, vec![value])),
        }
    }
    let uid = headers
        .get(IMPERSONATE_UID)
        .map(text)
        .filter(|u| !u.is_empty());
    let Some(name) = name else {
        if groups.is_empty() && extra.is_empty() && uid.is_none() {
            // Only unknown impersonate-* headers: nothing is impersonated.
            return Ok(None);
        }
        return Err(
            "requested impersonation of groups, extra or a UID without impersonating a user".into(),
        );
    };
    let mut checks = Vec::new();
    let mut user_groups = groups.clone();
    match service_account(&name) {
        Some((namespace, account)) => {
            let mut check = impersonate("serviceaccounts", "", account);
            check.namespace = namespace.into();
            checks.push(check);
            if groups.is_empty() {
                user_groups = vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                ];
            }
        }
        None => checks.push(impersonate("users", "", &name)),
    }
    checks.extend(groups.iter().map(|g| impersonate("groups", "", g)));
    checks.extend(extra_checks);
    if let Some(uid) = &uid {
        checks.push(impersonate("uids", "authentication.k8s.io", uid));
    }
    if name == ANONYMOUS {
        if !user_groups.iter().any(|g| g == UNAUTHENTICATED) {
            user_groups.push(UNAUTHENTICATED.into());
        }
    } else if user_groups.iter().any(|g| g == UNAUTHENTICATED) {
        // Upstream adds system:authenticated unless one of the two is asked for; `User::new`
        // adds it unless present, so an unauthenticated impersonation is refused instead of
        // being widened.
        return Err("impersonating a user in system:unauthenticated is not supported".into());
    } else if !user_groups.iter().any(|g| g == AUTHENTICATED) {
        user_groups.push(AUTHENTICATED.into());
    }
    let user = User::new(name, uid.unwrap_or_default(), user_groups, extra);
    Ok(Some(Impersonation { user, checks }))
}

/// Upstream's HTML-safe message text (`responsewriters` sanitizer).
fn sanitize(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The 403 of `user` doing `a`: `forbiddenMessage`, wrapped by `apierrors.NewForbidden`.
fn forbidden(user: &User, a: &Attributes, reason: &str) -> Refusal {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let what = if !a.resource_request {
        format!(
            "User {} cannot {} path {}",
            q(&user.name),
            a.verb,
            q(&a.path)
        )
    } else {
        let resource = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let scope = if a.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {}", q(&a.namespace))
        };
        format!(
            "User {} cannot {} resource {} in API group {} {scope}",
            q(&user.name),
            a.verb,
            q(&resource),
            q(&a.group)
        )
    };
    let mut why = sanitize(&what);
    if !reason.is_empty() {
        why = format!("{why}: {reason}");
    }
    let qualified = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let message = match (qualified.is_empty(), a.name.is_empty()) {
        (true, _) => format!("forbidden: {why}"),
        (false, true) => format!("{qualified} is forbidden: {why}"),
        (false, false) => format!("{qualified} {} is forbidden: {why}", q(&a.name)),
    };
    let mut details = Map::new();
    for (key, value) in [
        ("name", &a.name),
        ("group", &a.group),
        ("kind", &a.resource),
    ] {
        if !value.is_empty() {
            details.insert(key.into(), json!(value));
        }
    }
    Refusal::Forbidden {
        message,
        details: Value::Object(details),
    }
}

/// The 500 for a request the authorizer cannot decide (upstream's `InternalError` text).
fn internal(request: &AuthzRequest<'_>, why: &str) -> Refusal {
    let uri = match request.query {
        Some(q) => format!("{}?{q}", request.path),
        None => request.path.to_string(),
    };
    let quoted = serde_json::to_string(&uri).unwrap_or_default();
    Refusal::Internal(sanitize(&format!("Internal Server Error: {quoted}: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive(method: &str, target: &str) -> Attributes {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        let headers = HeaderMap::new();
        let request = AuthzRequest {
            method,
            path,
            query,
            headers: &headers,
        };
        attributes(&request).unwrap_or_else(|e| panic!("{method} {target}: {e}"))
    }

    /// `(verb, namespace, group, version, resource, subresource, name)`.
    type Row<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        &'a str,
    );

    fn resource(a: &Attributes) -> Row<'_> {
        assert!(a.resource_request, "{a:?}");
        (
            &a.verb,
            &a.namespace,
            &a.group,
            &a.version,
            &a.resource,
            &a.subresource,
            &a.name,
        )
    }

    #[test]
    fn resource_requests_follow_requestinfo() {
        #[rustfmt::skip]
        let table: [(&str, &str, Row); 26] = [
            ("GET", "/api/v1/pods", ("list", "", "", "v1", "pods", "", "")),
            ("GET", "/api/v1/namespaces/ns/pods", ("list", "ns", "", "v1", "pods", "", "")),
            ("GET", "/api/v1/namespaces/ns/pods/p", ("get", "ns", "", "v1", "pods", "", "p")),
            ("HEAD", "/api/v1/namespaces/ns/pods/p", ("get", "ns", "", "v1", "pods", "", "p")),
            ("GET", "/api/v1/namespaces/ns/pods/p/log", ("get", "ns", "", "v1", "pods", "log", "p")),
            ("POST", "/api/v1/namespaces/ns/pods/p/exec", ("create", "ns", "", "v1", "pods", "exec", "p")),
            ("GET", "/api/v1/namespaces/ns/pods?watch=true", ("watch", "ns", "", "v1", "pods", "", "")),
            ("GET", "/api/v1/namespaces/ns/pods?watch=1&limit=5", ("watch", "ns", "", "v1", "pods", "", "")),
            ("GET", "/api/v1/namespaces/ns/pods?watch=false", ("list", "ns", "", "v1", "pods", "", "")),
            ("GET", "/api/v1/namespaces/ns/pods?watch=0", ("list", "ns", "", "v1", "pods", "", "")),
            ("GET", "/api/v1/watch/namespaces/ns/pods", ("watch", "ns", "", "v1", "pods", "", "")),
            ("GET", "/api/v1/watch/namespaces/ns/pods/p", ("watch", "ns", "", "v1", "pods", "", "p")),
            ("GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp", ("list", "ns", "", "v1", "pods", "", "p")),
            ("GET", "/api/v1/namespaces/ns/pods?watch=true&fieldSelector=metadata.name==p,spec.x!=y", ("watch", "ns", "", "v1", "pods", "", "p")),
            ("GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name!%3Dp", ("list", "ns", "", "v1", "pods", "", "")),
            ("GET", "/api/v1/namespaces", ("list", "", "", "v1", "namespaces", "", "")),
            ("GET", "/api/v1/namespaces/ns", ("get", "ns", "", "v1", "namespaces", "", "ns")),
            ("PUT", "/api/v1/namespaces/ns/finalize", ("update", "ns", "", "v1", "namespaces", "finalize", "ns")),
            ("PATCH", "/api/v1/namespaces/ns/status", ("patch", "ns", "", "v1", "namespaces", "status", "ns")),
            ("DELETE", "/api/v1/namespaces/ns/pods/p", ("delete", "ns", "", "v1", "pods", "", "p")),
            ("DELETE", "/api/v1/namespaces/ns/pods", ("deletecollection", "ns", "", "v1", "pods", "", "")),
            ("POST", "/apis/apps/v1/namespaces/ns/deployments", ("create", "ns", "apps", "v1", "deployments", "", "")),
            ("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale", ("update", "ns", "apps", "v1", "deployments", "scale", "d")),
            ("GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1.a.io/status", ("get", "", "apiregistration.k8s.io", "v1", "apiservices", "status", "v1.a.io")),
            ("GET", "/api/v1/proxy/namespaces/ns/pods/p/x/y", ("proxy", "ns", "", "v1", "pods", "", "p")),
            ("OPTIONS", "/apis/a.io/v1/foos", ("", "", "a.io", "v1", "foos", "", "")),
        ];
        for (method, target, expected) in table {
            let got = derive(method, target);
            assert_eq!(resource(&got), expected, "{method} {target}");
        }
    }

    #[test]
    fn everything_else_is_a_non_resource_request() {
        for (method, target, verb, path) in [
            ("GET", "/api", "get", "/api"),
            ("GET", "/api/", "get", "/api/"),
            ("GET", "/api/v1", "get", "/api/v1"),
            ("GET", "/apis", "get", "/apis"),
            ("GET", "/apis/apps", "get", "/apis/apps"),
            ("GET", "/apis/apps/v1", "get", "/apis/apps/v1"),
            ("GET", "/apis/apps/v1/", "get", "/apis/apps/v1/"),
            (
                "GET",
                "/openapi/v3/apis/apps/v1?hash=x",
                "get",
                "/openapi/v3/apis/apps/v1",
            ),
            ("GET", "/metrics", "get", "/metrics"),
            (
                "HEAD",
                "/debug/apiagg/status",
                "head",
                "/debug/apiagg/status",
            ),
            ("POST", "/logs/x%20y", "post", "/logs/x y"),
        ] {
            let got = derive(method, target);
            assert!(!got.resource_request, "{target}: {got:?}");
            assert_eq!((got.verb.as_str(), got.path.as_str()), (verb, path));
        }
    }

    #[test]
    fn a_bare_watch_prefix_cannot_be_described() {
        let headers = HeaderMap::new();
        let request = AuthzRequest {
            method: "GET",
            path: "/api/v1/watch",
            query: None,
            headers: &headers,
        };
        assert!(attributes(&request).is_err());
    }

    fn user(name: &str) -> User {
        User::new(name.into(), String::new(), vec!["dev".into()], Vec::new())
    }

    fn message(refusal: Refusal) -> (String, Value) {
        match refusal {
            Refusal::Forbidden { message, details } => (message, details),
            Refusal::Internal(m) => panic!("not a 403: {m}"),
        }
    }

    #[test]
    fn refusals_are_worded_as_upstream() {
        let a = derive("GET", "/api/v1/namespaces/default/pods/p");
        let (text, details) = message(forbidden(&user("bob"), &a, ""));
        assert_eq!(
            text,
            r#"pods "p" is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "default""#
        );
        assert_eq!(details, json!({"name": "p", "kind": "pods"}));

        let a = derive("GET", "/apis/wardle.example.com/v1alpha1/flunders");
        let (text, details) = message(forbidden(&user("bob"), &a, "no rule"));
        assert_eq!(
            text,
            r#"flunders.wardle.example.com is forbidden: User "bob" cannot list resource "flunders" in API group "wardle.example.com" at the cluster scope: no rule"#
        );
        assert_eq!(
            details,
            json!({"group": "wardle.example.com", "kind": "flunders"})
        );

        let a = derive("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale");
        let (text, _) = message(forbidden(&user("bob"), &a, ""));
        assert_eq!(
            text,
            r#"deployments.apps "d" is forbidden: User "bob" cannot update resource "deployments/scale" in API group "apps" in the namespace "ns""#
        );

        let a = derive("GET", "/metrics");
        let (text, details) = message(forbidden(&user("bob"), &a, ""));
        assert_eq!(text, r#"forbidden: User "bob" cannot get path "/metrics""#);
        assert_eq!(details, json!({}));
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                value.parse().expect("value"),
            );
        }
        map
    }

    #[test]
    fn impersonation_checks_each_thing_asked_for() {
        let wanted = impersonation(&headers(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Group", "dev"),
            ("Impersonate-Extra-Example.org%2Fscopes", "read"),
            ("Impersonate-Uid", "u-1"),
        ]))
        .expect("valid")
        .expect("some");
        let rows: Vec<(String, String, String, String)> = wanted
            .checks
            .iter()
            .map(|c| {
                (
                    c.resource.clone(),
                    c.subresource.clone(),
                    c.group.clone(),
                    c.name.clone(),
                )
            })
            .collect();
        let row = |r: &str, s: &str, g: &str, n: &str| (r.into(), s.into(), g.into(), n.into());
        assert_eq!(
            rows,
            [
                row("users", "", "", "bob"),
                row("groups", "", "", "dev"),
                row(
                    "userextras",
                    "example.org/scopes",
                    "authentication.k8s.io",
                    "read"
                ),
                row("uids", "", "authentication.k8s.io", "u-1"),
            ]
        );
        assert!(wanted.checks.iter().all(|c| c.verb == "impersonate"));
        assert_eq!(wanted.user.name, "bob");
        assert_eq!(wanted.user.uid, "u-1");
        assert_eq!(wanted.user.groups, ["dev", AUTHENTICATED]);
        assert_eq!(
            wanted.user.extra,
            [("example.org/scopes".to_string(), vec!["read".to_string()])]
        );

        let (text, details) = message(forbidden(&user("alice"), &wanted.checks[0], ""));
        assert_eq!(
            text,
            r#"users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#
        );
        assert_eq!(details, json!({"name": "bob", "kind": "users"}));
    }

    #[test]
    fn service_accounts_are_impersonated_in_their_namespace() {
        let wanted = impersonation(&headers(&[(
            "Impersonate-User",
            "system:serviceaccount:ns:builder",
        )]))
        .expect("valid")
        .expect("some");
        let check = &wanted.checks[0];
        assert_eq!(
            (
                check.resource.as_str(),
                check.namespace.as_str(),
                check.name.as_str()
            ),
            ("serviceaccounts", "ns", "builder")
        );
        assert_eq!(
            wanted.user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                AUTHENTICATED
            ]
        );
        let (text, _) = message(forbidden(&user("alice"), check, ""));
        assert_eq!(
            text,
            r#"serviceaccounts "builder" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "ns""#
        );
    }

    #[test]
    fn impersonation_needs_a_user() {
        assert!(impersonation(&headers(&[("Impersonate-Group", "x")])).is_err());
        assert!(impersonation(&headers(&[])).expect("none").is_none());
    }

    #[test]
    fn the_cache_key_covers_user_and_attributes() {
        let a = derive("GET", "/api/v1/pods");
        let b = derive("GET", "/api/v1/pods?watch=1");
        assert_ne!(cache_key(&user("x"), &a), cache_key(&user("x"), &b));
        assert_ne!(cache_key(&user("x"), &a), cache_key(&user("y"), &a));
        assert_eq!(cache_key(&user("x"), &a), cache_key(&user("x"), &a));
        // Length prefixes keep field boundaries apart.
        let joined = User::new("ab".into(), String::new(), vec![], vec![]);
        let split = User::new("a".into(), "b".into(), vec![], vec![]);
        assert_ne!(cache_key(&joined, &a), cache_key(&split, &a));
    }

    #[test]
    fn the_cache_is_bounded_and_expires() {
        let cache = DecisionCache::default();
        let d = Decision {
            allowed: true,
            reason: String::new(),
        };
        cache.put([1; 32], d.clone(), Duration::from_secs(60));
        assert_eq!(cache.get(&[1; 32]), Some(d.clone()));
        cache.put([2; 32], d.clone(), Duration::ZERO);
        assert_eq!(cache.get(&[2; 32]), None);
        for i in 0..CACHE_LIMIT + 10 {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(i as u64).to_le_bytes());
            cache.put(key, d.clone(), Duration::from_secs(60));
        }
        assert!(cache.entries.len() <= CACHE_LIMIT);
    }

    #[test]
    fn public_paths_need_no_review() {
        for open in [
            "/healthz",
            "/livez/ping",
            "/readyz/",
            "/version",
            "/version/",
        ] {
            assert!(always_allowed(open), "{open}");
        }
        for closed in ["/healthzx", "/versions", "/metrics", "/version/x", "/"] {
            assert!(!always_allowed(closed), "{closed}");
        }
    }

    #[test]
    fn the_review_spec_leaves_empty_fields_out() {
        let u = User::new(
            "alice".into(),
            "u-1".into(),
            vec!["dev".into()],
            vec![("scopes".into(), vec!["a".into()])],
        );
        let spec = review_spec(&u, &derive("GET", "/apis/a.io/v1/foos"));
        assert_eq!(
            spec,
            json!({
                "resourceAttributes": {"verb": "list", "group": "a.io", "version": "v1", "resource": "foos"},
                "user": "alice",
                "groups": ["dev", AUTHENTICATED],
                "extra": {"scopes": ["a"]},
                "uid": "u-1",
            })
        );
        let spec = review_spec(&u, &derive("GET", "/metrics"));
        assert_eq!(
            spec["nonResourceAttributes"],
            json!({"path": "/metrics", "verb": "get"})
        );
    }
}
