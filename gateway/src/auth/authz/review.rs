//! The SubjectAccessReview sent for a request, and the cache key of its decision.

use super::*;

/// Why a SubjectAccessReview has no decision (never cached): a 500 for the request, and the
/// impersonation check it was for is forbidden. Retryable: the delegate may answer next time.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum AskError {
    /// No delegate is configured. Not retryable until the config names one.
    #[error("SubjectAccessReview: no delegate to ask")]
    NoDelegate,
    /// No client for the delegate (no endpoint available, or it cannot be built). Retryable.
    #[error("{0}")]
    Client(Arc<FetchError>),
    /// The review could not be posted or its answer not read. Retryable.
    #[error("SubjectAccessReview: {0}")]
    Post(Arc<FetchError>),
    /// The delegate answered with a status other than 200 or 201. Retryable.
    #[error("SubjectAccessReview: the delegate answered {0}")]
    Status(u16),
    /// The answer is not a SubjectAccessReview. Retryable (another endpoint may answer).
    #[error("SubjectAccessReview: invalid answer: {0}")]
    Answer(Arc<serde_json::Error>),
}

/// The hash a decision is cached under: every field of the review, length-prefixed.
pub(super) fn cache_key(user: &User, a: &Attributes) -> [u8; 32] {
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
pub(super) struct ReviewStatus {
    #[serde(default)]
    allowed: bool,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    evaluation_error: String,
}

#[derive(Deserialize)]
pub(super) struct Review {
    #[serde(default)]
    status: ReviewStatus,
}

/// The `spec` of the review of `user` doing `a` (empty fields left out, as upstream's
/// `omitempty`).
pub(super) fn review_spec(user: &User, a: &Attributes) -> Value {
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
pub(super) async fn ask(
    user: &User,
    attributes: &Attributes,
    delegate: &Upstream,
    clients: &Clients,
) -> Result<Decision, AskError> {
    let body = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": review_spec(user, attributes),
    });
    let client = clients
        .pick(delegate)
        .map_err(|e| AskError::Client(Arc::new(e)))?;
    let answer = client
        .post_json(REVIEW_PATH, &body, REVIEW_TIMEOUT)
        .await
        .map_err(|e| AskError::Post(Arc::new(e)))?;
    if !matches!(answer.status, 200 | 201) {
        return Err(AskError::Status(answer.status));
    }
    let review: Review =
        serde_json::from_slice(&answer.body).map_err(|e| AskError::Answer(Arc::new(e)))?;
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
