//! The answers of the API: objects, `Status` errors with the upstream reasons, and the
//! server-set values (UIDs, timestamps).

use apiagg_apis::{go_quote, Failure, Reason};
use apiagg_strategy::WriteError;
use serde_json::{json, Value};

use super::Answer;
use apiagg_store::StoreError;

/// A failure `Status` with `reason`'s own code.
pub fn status(reason: Reason, message: &str, details: Option<Value>) -> Answer {
    let failure = Failure::new(reason, message);
    Answer::Failed {
        failure: match details {
            Some(details) => failure.details(details),
            None => failure,
        },
        retry_after: None,
    }
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
    Answer::Failed {
        failure: Failure::new(Reason::ServiceUnavailable, message).details(details),
        retry_after: Some(retry_after),
    }
}

/// The answer to a delete that removed `object` at once: kube-apiserver's `Success` Status
/// naming it (its registry returns no object), so clients can tell it from a delete that waits
/// for finalizers (which answers the object).
pub fn deleted(object: &Value) -> Answer {
    let meta = &object["metadata"];
    let mut details = details(meta["name"].as_str().unwrap_or_default());
    details["uid"] = meta["uid"].clone();
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Success", "details": details});
    done(200, &status)
}

pub fn details(name: &str) -> Value {
    json!({"name": name, "group": "apiregistration.k8s.io", "kind": "apiservices"})
}

/// `details` of an `Invalid` Status about an APIService: its name (none when empty), the group and
/// the kind (kube-apiserver's `NewInvalid` names the kind, the other errors the resource).
fn invalid_details(name: &str) -> Value {
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    details.insert("group".into(), json!("apiregistration.k8s.io"));
    details.insert("kind".into(), json!("APIService"));
    Value::Object(details)
}

/// The 422 of an update without `metadata.resourceVersion` (APIServices allow no unconditional
/// update; kube-apiserver's store names the resource here, not the kind).
pub fn resource_version_required(name: &str) -> Answer {
    let body = "Invalid value: 0: must be specified for an update";
    let message = format!(
        "apiservices.apiregistration.k8s.io {} is invalid: metadata.resourceVersion: {body}",
        go_quote(name)
    );
    let mut d = details(name);
    d["causes"] = json!([{"reason": "FieldValueInvalid", "message": body, "field": "metadata.resourceVersion"}]);
    status(Reason::Invalid, &message, Some(d))
}

/// The 409 of an update whose `metadata.uid` is not the stored object's: the UID precondition
/// kube-apiserver's storage checks, in its words.
pub fn uid_precondition_failed(name: &str, sent: &str, stored: &str) -> Answer {
    let message = format!(
        "Operation cannot be fulfilled on apiservices.apiregistration.k8s.io {}: StorageError: invalid object, Code: 4, Key: /apiregistration.k8s.io/apiservices/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {sent}, UID in object meta: {stored}",
        go_quote(name)
    );
    status(Reason::Conflict, &message, Some(details(name)))
}

/// The name kube-apiserver gives an object created with only `generateName`: the prefix (at most
/// 58 bytes of it) and five random characters of its alphabet (apiserver's `SimpleNameGenerator`).
pub fn generated_name(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut cut = prefix.len().min(58);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let mut bits = random.finish();
    let base = ALPHABET.len() as u64;
    let suffix: String = (0..5)
        .map(|_| {
            let symbol = ALPHABET[(bits % base) as usize];
            bits /= base;
            char::from(symbol)
        })
        .collect();
    format!("{}{suffix}", &prefix[..cut])
}

pub fn store_error(e: StoreError) -> Answer {
    let text = e.to_string();
    match e {
        StoreError::NotFound(name) => status(Reason::NotFound, &text, Some(details(&name))),
        StoreError::AlreadyExists(name) => {
            status(Reason::AlreadyExists, &text, Some(details(&name)))
        }
        StoreError::Conflict(name) => status(Reason::Conflict, &text, Some(details(&name))),
        StoreError::Gone { .. } => status(Reason::Expired, &text, None),
        StoreError::Backend(_) => status(Reason::InternalError, &text, None),
    }
}

pub fn write_error(e: WriteError) -> Answer {
    let text = e.to_string();
    match e {
        WriteError::Invalid(errors) => {
            let causes: Vec<Value> = errors
                .errors
                .iter()
                .map(|f| json!({"reason": f.reason(), "message": f.body(), "field": f.field}))
                .collect();
            let mut d = invalid_details(&errors.name);
            d["causes"] = json!(causes);
            status(Reason::Invalid, &text, Some(d))
        }
        // As kube-apiserver's `NewInvalid` with no kind and no name: details hold the cause only.
        WriteError::StrictPatch { object, why } => {
            let message = format!("Invalid value: {}: {why}", go_quote(&object));
            let cause =
                json!({"reason": "FieldValueInvalid", "message": message, "field": "patch"});
            status(Reason::Invalid, &text, Some(json!({"causes": [cause]})))
        }
        WriteError::BadRequest(_) => status(Reason::BadRequest, &text, None),
        WriteError::TooLarge(_) => status(Reason::RequestEntityTooLarge, &text, None),
        WriteError::UnsupportedPatch => status(Reason::UnsupportedMediaType, &text, None),
        // As upstream's NewApplyConflict: the causes only, no name.
        WriteError::Conflict(conflicts) => status(
            Reason::Conflict,
            &text,
            Some(json!({"causes": conflicts.causes()})),
        ),
        WriteError::Options(options) => status(Reason::Invalid, &text, Some(options.details())),
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
