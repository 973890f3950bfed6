//! `metav1.Status` error bodies: every error apiagg answers itself is one of these.

use bytes::Bytes;
use serde_json::{json, Value};

/// Renders a failure `Status` (`kind`, `apiVersion`, `metadata`, `status`, `message`, `reason`,
/// optional `details`, `code`, in the order kube-apiserver writes them).
pub fn failure(code: u16, reason: &str, message: &str, details: Option<Value>) -> Bytes {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    });
    if let (Some(details), Some(map)) = (details, status.as_object_mut()) {
        map.insert("details".into(), details);
    }
    if let Some(map) = status.as_object_mut() {
        map.insert("code".into(), json!(code));
    }
    Bytes::from(status.to_string())
}

/// 503 for a request that arrived before every route was installed (spec §3.4).
pub fn mux_incomplete() -> Bytes {
    failure(
        503,
        "ServiceUnavailable",
        "the request has been made before all known HTTP paths have been installed, please try again",
        Some(json!({"retryAfterSeconds": MUX_RETRY_AFTER_SECONDS})),
    )
}

/// The complete 503 reply for a request that arrived before mux completion.
pub fn mux_incomplete_reply() -> crate::reply::Reply {
    crate::reply::Reply::json(503, mux_incomplete())
        .header("Retry-After", MUX_RETRY_AFTER_SECONDS.to_string())
}

/// `Retry-After` sent with [`mux_incomplete`].
pub const MUX_RETRY_AFTER_SECONDS: u64 = 5;

/// The 404 for paths nothing serves.
pub fn not_found() -> Bytes {
    failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_order_matches_kube() {
        let body = mux_incomplete();
        assert_eq!(
            std::str::from_utf8(&body).expect("utf8"),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the request has been made before all known HTTP paths have been installed, please try again","reason":"ServiceUnavailable","details":{"retryAfterSeconds":5},"code":503}"#
        );
    }
}
