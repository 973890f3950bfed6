//! Refusals worded as kube-apiserver's `responsewriters.Forbidden` words them.

use super::*;

/// Upstream's HTML-safe message text (`responsewriters` sanitizer).
pub(super) fn sanitize(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The 403 of `user` doing `a`: `forbiddenMessage`, wrapped by `apierrors.NewForbidden`.
pub(super) fn forbidden(user: &User, a: &Attributes, reason: &str) -> Refusal {
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
    Refusal::Forbidden {
        message,
        details: details(a),
        reason: reason.to_string(),
    }
}

/// `details` of a 403: `name`, `group`, `kind` (each only when not empty).
fn details(a: &Attributes) -> Value {
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
    Value::Object(details)
}

/// The 500 for a request the authorizer cannot decide (upstream's `InternalError` text).
pub(super) fn internal(request: &AuthzRequest<'_>, why: &dyn std::fmt::Display) -> Refusal {
    let info = request.info;
    let uri = match info.query.raw {
        "" => info.path.to_string(),
        q => format!("{}?{q}", info.path),
    };
    let quoted = serde_json::to_string(&uri).unwrap_or_default();
    Refusal::Internal(sanitize(&format!("Internal Server Error: {quoted}: {why}")))
}

/// The 403 of a pod connection (`exec`, `attach`, `portforward`) opened with GET whose
/// `create` is not allowed: upstream's `pods "name" is forbidden: <reason>`.
pub(super) fn connect_forbidden(a: &Attributes, reason: &str) -> Refusal {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let qualified = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let message = sanitize(&format!(
        "{qualified} {} is forbidden: {reason}",
        q(&a.name)
    ));
    Refusal::Forbidden {
        message,
        details: details(a),
        reason: reason.to_string(),
    }
}
