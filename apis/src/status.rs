//! `metav1.Status`: the one builder of the failure answers apiagg writes itself (the request
//! path, the APIService API, the emulated streaming list's `ERROR` events), in JSON or CBOR.

use serde_json::{json, Value};

use crate::cbor::{to_cbor, CborError};

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

/// [`failure_status`] as a CBOR document (`application/cbor`), as kube-apiserver writes a Status to
/// a client that negotiated CBOR (k8s.io/apiserver's `responsewriters.ErrorNegotiated`): the
/// self-described tag, byte strings, fields in the JSON order.
pub fn failure_status_cbor(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Result<Vec<u8>, CborError> {
    to_cbor(&failure_status(code, reason, message, details))
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

    #[test]
    fn cbor_status_is_the_json_status_with_byte_strings() {
        let details = json!({"name": "x", "retryAfterSeconds": 3});
        let cbor = failure_status_cbor(429, "TooManyRequests", "slow", Some(details.clone()))
            .expect("encodes");
        let json = failure_status(429, "TooManyRequests", "slow", Some(details));
        assert_eq!(crate::from_cbor(&cbor).expect("decodes"), json);
        // Tag 55799, map(8), then b"kind" as a byte string: the JSON field order.
        assert_eq!(cbor[..5], [0xd9, 0xd9, 0xf7, 0xa8, 0x44]);
        assert_eq!(&cbor[5..9], b"kind");
        // code: 429 is the last entry, an unsigned integer.
        assert_eq!(
            cbor[cbor.len() - 8..],
            [0x44, b'c', b'o', b'd', b'e', 0x19, 0x01, 0xad]
        );
    }
}
