//! The answers of the API: objects, `Status` errors with the upstream reasons, and the
//! server-set values (UIDs, timestamps).

use apiagg_apis::failure_status;
use apiagg_strategy::WriteError;
use serde_json::{json, Value};

use super::Answer;
use apiagg_store::StoreError;

pub fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Answer {
    done(code, &failure_status(code, reason, message, details))
}

pub fn done(code: u16, value: &Value) -> Answer {
    warned(code, value, Vec::new())
}

/// An answer with `Warning` headers (one per text).
pub fn warned(code: u16, value: &Value, warnings: Vec<String>) -> Answer {
    Answer::Done {
        code,
        body: value.to_string().into_bytes(),
        warnings,
    }
}

/// A 503 `ServiceUnavailable` Status sent with `Retry-After: <seconds>`.
pub fn unavailable(message: &str, retry_after: u32) -> Answer {
    let details = json!({"retryAfterSeconds": retry_after});
    let body = failure_status(503, "ServiceUnavailable", message, Some(details));
    Answer::Retry {
        body: body.to_string().into_bytes(),
        retry_after,
    }
}

pub fn details(name: &str) -> Value {
    json!({"name": name, "group": "apiregistration.k8s.io", "kind": "apiservices"})
}

pub fn store_error(e: StoreError) -> Answer {
    let text = e.to_string();
    match e {
        StoreError::NotFound(name) => status(404, "NotFound", &text, Some(details(&name))),
        StoreError::AlreadyExists(name) => {
            status(409, "AlreadyExists", &text, Some(details(&name)))
        }
        StoreError::Conflict(name) => status(409, "Conflict", &text, Some(details(&name))),
        StoreError::Gone { .. } => status(410, "Expired", &text, None),
        StoreError::Backend(_) => status(500, "InternalError", &text, None),
    }
}

pub fn write_error(name: &str, e: WriteError) -> Answer {
    let text = e.to_string();
    match e {
        WriteError::Invalid(errors) => {
            let causes: Vec<Value> = errors
                .errors
                .iter()
                .map(|f| {
                    let reason = if f.kind == "Forbidden" {
                        "FieldValueForbidden"
                    } else {
                        "FieldValueInvalid"
                    };
                    json!({"reason": reason, "message": format!("{}: {}", f.kind, f.detail), "field": f.field})
                })
                .collect();
            let mut d = details(name);
            d["causes"] = json!(causes);
            status(422, "Invalid", &text, Some(d))
        }
        WriteError::BadRequest(_) => status(400, "BadRequest", &text, None),
        WriteError::TooLarge(_) => status(413, "RequestEntityTooLarge", &text, None),
        WriteError::UnsupportedPatch => status(415, "UnsupportedMediaType", &text, None),
        // As upstream's NewApplyConflict: the causes only, no name.
        WriteError::Conflict(conflicts) => status(
            409,
            "Conflict",
            &text,
            Some(json!({"causes": conflicts.causes()})),
        ),
        WriteError::Options(options) => status(422, "Invalid", &text, Some(options.details())),
    }
}

/// A random UID in the UUID text form.
pub fn new_uid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let part = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    let (a, b) = (part(), part());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// The time as the API writes it.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
