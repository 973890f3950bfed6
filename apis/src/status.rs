//! `metav1.Status`: the one builder of the failure answers apiagg writes itself (the request
//! path, the APIService API, the emulated streaming list's `ERROR` events).

use serde_json::{json, Value};

/// A failure `Status` with its fields in the order kube-apiserver writes them: `kind`,
/// `apiVersion`, `metadata`, `status`, `message`, `reason`, optional `details`, `code`.
pub fn failure_status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
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
    status
}

/// The `reason` kube-apiserver gives a status code when nothing more is known
/// (k8s.io/apimachinery's `pkg/api/errors/errors.go`, `NewGenericServerResponse`).
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_in_kube_apiservers_order() {
        let status = failure_status(503, "ServiceUnavailable", "later", Some(json!({"a": 1})));
        assert_eq!(
            status.to_string(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"later","reason":"ServiceUnavailable","details":{"a":1},"code":503}"#
        );
        let plain = failure_status(404, reason_for(404), "gone", None);
        assert_eq!(plain["reason"], "NotFound");
        assert!(plain.get("details").is_none());
    }
}
