//! The answer of a webhook: a SubjectAccessReview's `status` (v1 or v1beta1, the same fields),
//! read as k8s.io/apiserver's conditions-unaware webhook authorizer (`Authorize`) reads it.
//!
//! Only a plain `allowed: true` allows. `allowed` and `denied` both true is a denial (upstream
//! also returns an error, making the request fail with 500). A conditional answer (KEP-5681,
//! alpha: `status.conditionalDecision`, or the KEP's earlier `status.conditionsChain`) never
//! allows, whatever `allowed` says: apiagg does not enforce conditions, and as upstream's
//! `shouldFailWithDeny` it is a denial when it holds a deny (a `Deny` decision or condition, or
//! a type it does not know), no opinion otherwise.

use serde_json::{Map, Value};

use crate::attributes::Decision;

/// Upstream's reason for a conditional answer to a client that cannot enforce conditions.
const CONDITIONAL_REASON: &str =
    "webhook authorizer tried to return conditional decision although client does not support it";
/// Upstream's error when both `allowed` and `denied` are set.
const BOTH_ERROR: &str = "webhook subject access review returned both allow and deny response";

/// Why an answer cannot be read: the webhook failed (upstream's `decisionOnError` applies).
/// Retryable: another call may be answered properly.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// Not JSON.
    #[error("SubjectAccessReview answer is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A field of the wrong type (`status` not an object, `allowed` not a boolean, …).
    #[error("SubjectAccessReview answer: {field} is not {expected}")]
    Field {
        /// The field's path.
        field: &'static str,
        /// The type it must have.
        expected: &'static str,
    },
}

/// A conditional answer (KEP-5681).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionalAnswer {
    /// The field that carried it: `conditionalDecision` or `conditionsChain`.
    pub field: &'static str,
    /// Whether it holds a deny (upstream's `shouldFailWithDeny`): then it is a denial.
    pub denies: bool,
}

/// What a webhook answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewAnswer {
    /// `status.allowed`.
    pub allowed: bool,
    /// `status.denied`.
    pub denied: bool,
    /// `status.reason`.
    pub reason: String,
    /// `status.evaluationError` (informational: upstream does not act on it).
    pub evaluation_error: String,
    /// A conditional decision, when one was returned.
    pub conditional: Option<ConditionalAnswer>,
}

impl ReviewAnswer {
    /// The decision, as upstream's webhook authorizer takes it.
    pub fn decision(&self) -> Decision {
        let reason = self.reason.clone();
        if self.allowed && self.denied {
            return Decision::Deny(reason);
        }
        if let Some(conditional) = &self.conditional {
            let reason = CONDITIONAL_REASON.to_string();
            return match conditional.denies {
                true => Decision::Deny(reason),
                false => Decision::NoOpinion(reason),
            };
        }
        if self.denied {
            Decision::Deny(reason)
        } else if self.allowed {
            Decision::Allow(reason)
        } else {
            Decision::NoOpinion(reason)
        }
    }

    /// The error upstream returns with the decision (then a refusal is a 500, not a 403).
    pub fn error(&self) -> Option<&'static str> {
        (self.allowed && self.denied).then_some(BOTH_ERROR)
    }
}

fn flag(
    status: &Map<String, Value>,
    key: &'static str,
    field: &'static str,
) -> Result<bool, AnswerError> {
    match status.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(AnswerError::Field {
            field,
            expected: "a boolean",
        }),
    }
}

fn text(
    status: &Map<String, Value>,
    key: &'static str,
    field: &'static str,
) -> Result<String, AnswerError> {
    match status.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(AnswerError::Field {
            field,
            expected: "a string",
        }),
    }
}

/// Reads the body of a webhook's answer (a SubjectAccessReview; only `status` is read).
pub fn read_status(body: &[u8]) -> Result<ReviewAnswer, AnswerError> {
    let review: Value = serde_json::from_slice(body)?;
    let Value::Object(review) = review else {
        return Err(AnswerError::Field {
            field: "the answer",
            expected: "an object",
        });
    };
    let empty = Map::new();
    let status = match review.get("status") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(status)) => status,
        Some(_) => {
            return Err(AnswerError::Field {
                field: "status",
                expected: "an object",
            })
        }
    };
    let conditional = match status.get("conditionalDecision") {
        None | Some(Value::Null) => None,
        Some(decision @ Value::Object(_)) => Some(ConditionalAnswer {
            field: "conditionalDecision",
            denies: fails_with_deny(decision),
        }),
        Some(_) => {
            return Err(AnswerError::Field {
                field: "status.conditionalDecision",
                expected: "an object",
            })
        }
    };
    // The KEP's first draft: an ordered list of condition sets. Unknown to upstream's types
    // (ignored there), but never an allow here.
    let chain = status
        .get("conditionsChain")
        .filter(|c| !c.is_null())
        .map(|chain| ConditionalAnswer {
            field: "conditionsChain",
            denies: chain_denies(chain),
        });
    Ok(ReviewAnswer {
        allowed: flag(status, "allowed", "status.allowed")?,
        denied: flag(status, "denied", "status.denied")?,
        reason: text(status, "reason", "status.reason")?,
        evaluation_error: text(status, "evaluationError", "status.evaluationError")?,
        conditional: conditional.or(chain),
    })
}

fn is_deny(value: Option<&Value>) -> bool {
    value.and_then(Value::as_str) == Some("Deny")
}

/// Whether a list of conditions is non-empty.
fn has_items(value: Option<&Value>) -> bool {
    value
        .and_then(Value::as_array)
        .is_some_and(|items| !items.is_empty())
}

/// Upstream's `shouldFailWithDeny` for either wire shape of a conditions map (`conditions`
/// with an `effect` each, or `denyConditions`/`noOpinionConditions`/`allowConditions`);
/// unknown decision types deny.
fn fails_with_deny(decision: &Value) -> bool {
    match decision.get("type").and_then(Value::as_str) {
        Some("Allow" | "NoOpinion") => false,
        Some("Deny") => true,
        Some("ConditionsMap") => {
            let map = decision.get("conditionsMap");
            let effects = map
                .and_then(|m| m.get("conditions"))
                .and_then(Value::as_array);
            has_items(map.and_then(|m| m.get("denyConditions")))
                || effects.is_some_and(|c| c.iter().any(|c| is_deny(c.get("effect"))))
        }
        Some("Union") => decision
            .get("union")
            .and_then(Value::as_array)
            .is_some_and(|members| {
                members.iter().any(|member| match member.get("type") {
                    Some(_) => fails_with_deny(member),
                    // A named member: `{"authorizerName": …, "decision": {…}}`.
                    None => member.get("decision").is_none_or(fails_with_deny),
                })
            }),
        _ => true,
    }
}

/// Whether a `conditionsChain` holds a deny: a set `denied`, or a `Deny` condition; anything
/// but a list denies.
fn chain_denies(chain: &Value) -> bool {
    let Some(sets) = chain.as_array() else {
        return true;
    };
    sets.iter().any(|set| {
        let conditions = set.get("conditions").and_then(Value::as_array);
        set.get("denied").and_then(Value::as_bool) == Some(true)
            || conditions.is_some_and(|c| c.iter().any(|c| is_deny(c.get("effect"))))
    })
}
