//! Why apiagg answers a request with a failure of its own: every check of the request path
//! returns a [`Refusal`], and `Reply::from` is the one conversion into an answer (the reasons
//! themselves are spelled once, in `apiagg_apis::Reason`).

use apiagg_apis::{Failure, Reason};
use serde_json::{json, Value};

/// A failure `Status` apiagg answers with, and what comes with it: `Retry-After`, and whether
/// the connection closes after it.
#[derive(Debug)]
pub struct Refusal {
    /// What the `Status` says (boxed: a refusal is the `Err` of every check, and small).
    pub failure: Box<Failure>,
    /// Seconds for `Retry-After`.
    pub retry_after: Option<u64>,
    /// The client connection closes after the answer (the request's body, or what follows
    /// it, may not be HTTP).
    pub close: bool,
}

impl Refusal {
    /// A refusal with `reason`'s own code.
    pub fn new(reason: Reason, message: impl Into<String>) -> Refusal {
        Refusal::from(Failure::new(reason, message))
    }

    /// A refusal whose code is not its reason's own (an authentication error's, a backend's).
    pub fn with_code(code: u16, reason: Reason, message: impl Into<String>) -> Refusal {
        Refusal::from(Failure::with_code(code, reason, message))
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal::new(Reason::BadRequest, message)
    }

    /// 503 `ServiceUnavailable`.
    pub fn unavailable(message: impl Into<String>) -> Refusal {
        Refusal::new(Reason::ServiceUnavailable, message)
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl Into<String>) -> Refusal {
        Refusal::new(Reason::InternalError, message)
    }

    /// The same refusal with `details`.
    pub fn details(mut self, details: Value) -> Refusal {
        self.failure.details = Some(details);
        self
    }

    /// The same refusal with `Retry-After: seconds` and `retryAfterSeconds` in its details, as
    /// kube-apiserver's `NewTooManyRequests` and `NewServiceUnavailable` say it.
    pub fn retry_after(mut self, seconds: u64) -> Refusal {
        self.retry_after = Some(seconds);
        let details = self.failure.details.get_or_insert_with(|| json!({}));
        if let Some(map) = details.as_object_mut() {
            map.insert("retryAfterSeconds".into(), json!(seconds));
        }
        self
    }

    /// The same refusal with `Retry-After: seconds` only (nothing in the body).
    pub fn retry_after_header(mut self, seconds: u64) -> Refusal {
        self.retry_after = Some(seconds);
        self
    }

    /// The client connection closes after the answer.
    pub fn closing(mut self) -> Refusal {
        self.close = true;
        self
    }

    /// The status code.
    pub fn code(&self) -> u16 {
        self.failure.code
    }

    /// 404 for paths nothing serves: the `Status` kube-apiserver's last handler writes since
    /// kubernetes#138219 (k8s.io/apiserver's `pkg/util/notfoundhandler/not_found_handler.go`;
    /// 1.37.2 still writes the text `404 page not found`), without `details`.
    pub fn not_found() -> Refusal {
        Refusal::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )
    }

    /// 503 for a request that arrived before every route was installed (k8s.io/apiserver's
    /// `pkg/util/notfoundhandler/not_found_handler.go`), with `Retry-After`.
    pub fn mux_incomplete() -> Refusal {
        Refusal::unavailable(MUX_INCOMPLETE).retry_after(MUX_RETRY_AFTER_SECONDS)
    }

    /// 504 for a request that did not finish within its timeout (k8s.io/apiserver's
    /// `pkg/server/filters/timeout.go`).
    pub fn timeout() -> Refusal {
        let message = "Timeout: request did not complete within the allotted timeout";
        Refusal::new(Reason::Timeout, message).details(json!({}))
    }

    /// 429 for a request to `backend`, which already has its bound `cap` of requests in flight.
    pub fn backend_full(backend: &str, cap: usize) -> Refusal {
        let message = format!(
            "too many requests in flight to {backend} (its bound is {cap}); please try again later"
        );
        Refusal::new(Reason::TooManyRequests, message).retry_after(1)
    }

    /// 503 for a request refused because client and backend connections spend apiagg's whole
    /// open-file budget (`budget` connections).
    pub fn out_of_files(budget: usize) -> Refusal {
        let message = format!(
            "service unavailable: apiagg holds {budget} client and backend connections, all its \
             open-file limit allows; please try again later"
        );
        Refusal::unavailable(message).retry_after(1)
    }
}

impl From<Failure> for Refusal {
    fn from(failure: Failure) -> Refusal {
        Refusal {
            failure: Box::new(failure),
            retry_after: None,
            close: false,
        }
    }
}

const MUX_INCOMPLETE: &str =
    "the request has been made before all known HTTP paths have been installed, please try again";

/// `Retry-After` of [`Refusal::mux_incomplete`].
pub const MUX_RETRY_AFTER_SECONDS: u64 = 5;
