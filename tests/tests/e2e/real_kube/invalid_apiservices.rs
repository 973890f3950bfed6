//! A table of invalid APIServices (and valid ones as controls) written as the admin, as dry runs
//! (`?dryRun=All`: nothing is stored, checked at apiagg), to kube-apiserver and to apiagg's own
//! APIService API, compared on what clients read: status code,
//! Status `reason`, `message` and `details`, and the `causes` (reason, field, message) in order.
//! Creates (names, `generateName`, groups, versions, priorities, TLS settings, the Service, the
//! CA bundle's encoding, metadata, the body's kind and shape), then updates of an APIService both
//! store (PUT, merge PATCH, `/status`).
//!
//! Values that differ by nature are masked in both answers before they are compared: the random
//! suffix of a name made from `generateName`, the stored UID a UID precondition names, the
//! patched object a `Strict` patch refusal quotes. Differences written down in
//! docs/differences-from-kube-aggregator.md are rows with an [`Allowance`], checked for their
//! documented shape instead of equality.

mod rows;

use std::time::Instant;

use apiagg_tests::real_kube::{apiservices_changing, free_port, send, Front, RealKube};
use serde_json::{json, Value};

use rows::{Row, UPDATED};

const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// A difference from kube-apiserver that apiagg keeps (docs/differences-from-kube-aggregator.md).
#[derive(Debug, Clone, Copy)]
pub enum Allowance {
    /// An APIService of a built-in group that does not exist yet: kube-apiserver stores it,
    /// apiagg refuses every built-in group (422, `spec.group: Forbidden`).
    BuiltinGroup,
    /// A body of the wrong shape: the same 400 and the same words up to the decoder's, whose
    /// detail is serde's, not Go's `encoding/json`'s.
    DecoderWords,
    /// A `resourceVersion` that is not a number: kube-apiserver answers 500 (strconv's error),
    /// apiagg 409 `Conflict` (it cannot be the stored one).
    UnparsableResourceVersion,
}

impl Allowance {
    /// Whether the two answers differ exactly as written down.
    fn holds(self, theirs: &Outcome, ours: &Outcome) -> bool {
        match self {
            Allowance::BuiltinGroup => {
                let cause = ours.causes.first().cloned().unwrap_or_default();
                theirs.code == 201
                    && (ours.code, cause["field"].as_str()) == (422, Some("spec.group"))
                    && cause["reason"] == "FieldValueForbidden"
            }
            Allowance::DecoderWords => {
                let start = |o: &Outcome| {
                    let words = "cannot be handled as a APIService: ";
                    o.message.find(words).map(|at| o.message[..at].to_string())
                };
                (theirs.code, &theirs.reason) == (ours.code, &ours.reason)
                    && start(theirs).is_some()
                    && start(theirs) == start(ours)
            }
            Allowance::UnparsableResourceVersion => {
                (theirs.code, ours.code, ours.reason.as_str()) == (500, 409, "Conflict")
            }
        }
    }
}

/// What a client reads of an answer: the status code; for a Status its `reason`, `message` and
/// `details` (the `causes` apart); for an object its kind.
#[derive(Debug, PartialEq)]
struct Outcome {
    code: u16,
    reason: String,
    message: String,
    details: Value,
    causes: Vec<Value>,
}

impl Outcome {
    fn of(code: u16, body: &Value) -> Outcome {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let status = body["kind"] == "Status";
        let mut details = if status {
            body["details"].clone()
        } else {
            Value::Null
        };
        let causes = match details.as_object_mut().and_then(|d| d.remove("causes")) {
            Some(Value::Array(causes)) => causes,
            _ => Vec::new(),
        };
        Outcome {
            code,
            reason: text(&body[if status { "reason" } else { "kind" }]),
            message: if status {
                text(&body["message"])
            } else {
                String::new()
            },
            details,
            causes,
        }
    }

    /// With the values that differ by nature masked (see the module's documentation).
    fn masked(mut self, row: &Row) -> Outcome {
        let mask = |text: &str| mask(text, row);
        self.message = mask(&self.message);
        for cause in &mut self.causes {
            let message = cause["message"].as_str().map(mask);
            if let Some(message) = message {
                cause["message"] = json!(message);
            }
        }
        if let Some(name) = self.details.get("name").and_then(Value::as_str) {
            self.details["name"] = json!(mask(name));
        }
        self
    }

    /// `code reason`, the causes counted.
    fn short(&self) -> String {
        match self.causes.len() {
            0 => format!("{} {}", self.code, self.reason),
            n => format!("{} {} ({n} causes)", self.code, self.reason),
        }
    }
}

/// `text` with a generated name's suffix, a stored UID and a quoted patched object masked.
fn mask(text: &str, row: &Row) -> String {
    let mut text = text.to_string();
    if let Some(prefix) = row.generated_prefix() {
        const ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";
        let mut from = 0;
        while let Some(at) = text[from..].find(prefix).map(|at| from + at + prefix.len()) {
            let suffix = text.get(at..at + 5).unwrap_or_default();
            if suffix.len() == 5 && suffix.chars().all(|c| ALPHABET.contains(c)) {
                text.replace_range(at..at + 5, "*****");
            }
            from = at;
        }
    }
    let marker = "UID in object meta: ";
    if let Some(at) = text.find(marker) {
        text.replace_range(at + marker.len().., "<stored>");
    }
    let (open, close) = ("Invalid value: \"", "\": strict decoding error");
    if let (Some(start), Some(end)) = (text.find(open), text.rfind(close)) {
        if row.method == "PATCH" && start + open.len() <= end {
            text.replace_range(start + open.len()..end, "<patched object>");
        }
    }
    text
}

/// `row`'s body, with the `resourceVersion` of [`UPDATED`] in `collection` (at one server) for a
/// PUT: kube-apiserver refuses an APIService update without one.
async fn versioned(admin: &reqwest::Client, collection: &str, row: &Row) -> Value {
    if !row.versioned || row.body["metadata"].get("resourceVersion").is_some() {
        return row.body.clone();
    }
    let (_, current) = send(admin, "GET", &format!("{collection}/{UPDATED}"), None).await;
    let version = current["metadata"]["resourceVersion"].clone();
    rows::with(
        row.body.clone(),
        json!({"metadata": {"resourceVersion": version}}),
    )
}

/// Sends `row` to both as a dry run; their outcomes, masked. What apiagg says it created must
/// not be stored.
async fn exchange(kube: &RealKube, front: &Front, row: &Row) -> (Outcome, Outcome) {
    let admin = kube.client(Some(&kube.admin));
    let path = format!("{APISERVICES}{}", row.path);
    let query = |dry: bool| {
        let parts: Vec<&str> = [dry.then_some("dryRun=All"), Some(row.query)]
            .into_iter()
            .flatten()
            .filter(|p| !p.is_empty())
            .collect();
        match parts.as_slice() {
            [] => String::new(),
            parts => format!("?{}", parts.join("&")),
        }
    };
    let body = versioned(&admin, &kube.kube_url(APISERVICES), row).await;
    let url = kube.kube_url(&format!("{path}{}", query(true)));
    let (code, theirs) = send(&admin, row.method, &url, Some(body)).await;
    let body = versioned(&admin, &front.url(APISERVICES), row).await;
    let url = front.url(&format!("{path}{}", query(true)));
    let (our_code, ours) = send(&admin, row.method, &url, Some(body)).await;
    if our_code == 201 {
        let name = ours["metadata"]["name"].as_str().unwrap_or_default();
        let created = front.url(&format!("{APISERVICES}/{name}"));
        let (found, answer) = send(&admin, "GET", &created, None).await;
        assert_eq!(found, 404, "a dry run stored {name} at apiagg: {answer}");
    }
    (
        Outcome::of(code, &theirs).masked(row),
        Outcome::of(our_code, &ours).masked(row),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_apiservices_get_kube_apiservers_errors() {
    let kube = RealKube::shared().await;
    // The update rows need an APIService stored in kube-apiserver (unavailable: its port is
    // dead), which nobody else's discovery walk may meet.
    let _alone = apiservices_changing().await;
    let began = Instant::now();
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let port = free_port();
    let stored = kube.apiservice("invalid-updates.example.com", "v1", "invalid-updates", port);
    kube.register(&stored).await;
    let checked = std::panic::AssertUnwindSafe(compare(kube, &front, &stored));
    let checked = futures_util::FutureExt::catch_unwind(checked).await;
    kube.unregister(&stored).await;
    match checked {
        Ok(table) => eprintln!("invalid APIServices ({:?}):\n{table}", began.elapsed()),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Sends every row to both; the table, once every row matched (or differed as allowed).
async fn compare(kube: &RealKube, front: &Front, stored: &Value) -> String {
    let admin = kube.client(Some(&kube.admin));
    let collection = front.url(APISERVICES);
    let (code, created) = send(&admin, "POST", &collection, Some(stored.clone())).await;
    assert_eq!(code, 201, "create {UPDATED} in apiagg: {created}");
    let mut rows = rows::creates(kube);
    rows.extend(rows::updates(stored));
    let (mut table, mut differ) = (String::new(), Vec::new());
    for row in &rows {
        let (theirs, ours) = exchange(kube, front, row).await;
        let mut line = format!(
            "{} {}: kube-apiserver {}, apiagg {}",
            row.method,
            row.what,
            theirs.short(),
            ours.short()
        );
        let same = theirs == ours;
        match row.allowance {
            Some(allowance) if allowance.holds(&theirs, &ours) => {
                line += &format!(" (allowed: {allowance:?})");
            }
            _ if same => {}
            _ => {
                line += &format!("\n  kube-apiserver: {theirs:?}\n  apiagg:         {ours:?}");
                differ.push(line.clone());
            }
        }
        table += &line;
        table.push('\n');
    }
    let one = front.url(&format!("{APISERVICES}/{UPDATED}"));
    let (code, gone) = send(&admin, "DELETE", &one, None).await;
    assert_eq!(code, 200, "{gone}");
    assert!(
        differ.is_empty(),
        "{} of {} rows differ:\n{}\n\nall rows:\n{table}",
        differ.len(),
        rows.len(),
        differ.join("\n")
    );
    table
}
