//! `metav1.Status`: the one builder of the failure answers apiagg writes itself (the request
//! path, the APIService API, the emulated streaming list's `ERROR` events), in JSON or CBOR, and
//! the one place a `reason` is spelled.

use serde_json::{json, Value};

use crate::cbor::{to_cbor, CborError};

/// The `reason` of a failure `Status` apiagg writes (k8s.io/apimachinery's
/// `pkg/apis/meta/v1/types.go` `StatusReason`, plus the two HTTP reasons kube-apiserver's
/// generic errors carry for 431 and 502).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    NotAcceptable,
    Conflict,
    AlreadyExists,
    Expired,
    RequestEntityTooLarge,
    UnsupportedMediaType,
    Invalid,
    TooManyRequests,
    RequestHeaderFieldsTooLarge,
    InternalError,
    BadGateway,
    ServiceUnavailable,
    Timeout,
}

impl Reason {
    /// The reason as the `Status` spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "BadRequest",
            Reason::Unauthorized => "Unauthorized",
            Reason::Forbidden => "Forbidden",
            Reason::NotFound => "NotFound",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::NotAcceptable => "NotAcceptable",
            Reason::Conflict => "Conflict",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Expired => "Expired",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::Invalid => "Invalid",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::RequestHeaderFieldsTooLarge => "RequestHeaderFieldsTooLarge",
            Reason::InternalError => "InternalError",
            Reason::BadGateway => "BadGateway",
            Reason::ServiceUnavailable => "ServiceUnavailable",
            Reason::Timeout => "Timeout",
        }
    }

    /// The status code kube-apiserver answers with this reason.
    pub const fn code(self) -> u16 {
        match self {
            Reason::BadRequest => 400,
            Reason::Unauthorized => 401,
            Reason::Forbidden => 403,
            Reason::NotFound => 404,
            Reason::MethodNotAllowed => 405,
            Reason::NotAcceptable => 406,
            Reason::Conflict | Reason::AlreadyExists => 409,
            Reason::Expired => 410,
            Reason::RequestEntityTooLarge => 413,
            Reason::UnsupportedMediaType => 415,
            Reason::Invalid => 422,
            Reason::TooManyRequests => 429,
            Reason::RequestHeaderFieldsTooLarge => 431,
            Reason::InternalError => 500,
            Reason::BadGateway => 502,
            Reason::ServiceUnavailable => 503,
            Reason::Timeout => 504,
        }
    }

    /// The reason kube-apiserver gives a status code when nothing more is known
    /// (k8s.io/apimachinery's `pkg/api/errors/errors.go`, `NewGenericServerResponse`).
    pub const fn for_code(code: u16) -> Reason {
        match code {
            400 => Reason::BadRequest,
            401 => Reason::Unauthorized,
            403 => Reason::Forbidden,
            404 => Reason::NotFound,
            405 => Reason::MethodNotAllowed,
            406 => Reason::NotAcceptable,
            409 => Reason::Conflict,
            410 => Reason::Expired,
            413 => Reason::RequestEntityTooLarge,
            415 => Reason::UnsupportedMediaType,
            422 => Reason::Invalid,
            429 => Reason::TooManyRequests,
            503 => Reason::ServiceUnavailable,
            504 => Reason::Timeout,
            _ => Reason::InternalError,
        }
    }
}

/// What a failure `Status` says: its code, reason, message and optional `details`.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// The status code, in the body and of the response.
    pub code: u16,
    pub reason: Reason,
    pub message: String,
    pub details: Option<Value>,
}

impl Failure {
    /// A failure with `reason`'s own code.
    pub fn new(reason: Reason, message: impl Into<String>) -> Failure {
        Failure::with_code(reason.code(), reason, message)
    }

    /// A failure whose code is not its reason's own (a backend's code relayed, an
    /// authentication error's).
    pub fn with_code(code: u16, reason: Reason, message: impl Into<String>) -> Failure {
        Failure {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// The same failure with `details`.
    pub fn details(mut self, details: Value) -> Failure {
        self.details = Some(details);
        self
    }

    /// The `Status` object.
    pub fn to_json(&self) -> Value {
        failure_status(self.code, self.reason, &self.message, self.details.clone())
    }
}

/// A failure `Status` with its fields in the order kube-apiserver writes them: `kind`,
/// `apiVersion`, `metadata`, `status`, `message`, `reason`, optional `details`, `code`.
pub fn failure_status(code: u16, reason: Reason, message: &str, details: Option<Value>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason.as_str(),
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
    reason: Reason,
    message: &str,
    details: Option<Value>,
) -> Result<Vec<u8>, CborError> {
    to_cbor(&failure_status(code, reason, message, details))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_in_kube_apiservers_order() {
        let status = Failure::new(Reason::ServiceUnavailable, "later")
            .details(json!({"a": 1}))
            .to_json();
        assert_eq!(
            status.to_string(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"later","reason":"ServiceUnavailable","details":{"a":1},"code":503}"#
        );
        let plain = failure_status(404, Reason::for_code(404), "gone", None);
        assert_eq!(plain["reason"], "NotFound");
        assert!(plain.get("details").is_none());
    }

    #[test]
    fn each_reason_has_its_code_and_the_generic_reason_of_a_code_is_its_own() {
        for code in [
            400, 401, 403, 404, 405, 406, 409, 410, 413, 415, 422, 429, 503, 504,
        ] {
            assert_eq!(Reason::for_code(code).code(), code);
        }
        assert_eq!(Reason::for_code(418), Reason::InternalError);
        assert_eq!(Reason::AlreadyExists.code(), 409);
        assert_eq!(Reason::RequestHeaderFieldsTooLarge.code(), 431);
    }

    #[test]
    fn cbor_status_is_the_json_status_with_byte_strings() {
        let details = json!({"name": "x", "retryAfterSeconds": 3});
        let slow = Reason::TooManyRequests;
        let cbor = failure_status_cbor(429, slow, "slow", Some(details.clone())).expect("encodes");
        let json = failure_status(429, slow, "slow", Some(details));
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
