//! The status writes of APIServices registered through the API (pure): each stored object gets
//! the `Available` condition apiagg holds for it, or, when an owner displaces it, `False` with
//! the owner's reason. An object whose condition already says the same is not written.

use std::sync::Arc;

use apiagg_config::Displaced;
use apiagg_strategy::{self as strategy, managed_fields};
use serde_json::Value;

use crate::state::Condition;
use crate::store;

/// The field manager of the `Available` conditions apiagg writes (kube-apiserver's name).
const STATUS_MANAGER: &str = "kube-apiserver";

/// One status update to make in the store.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    /// The APIService.
    pub name: String,
    /// The object with its new status and managed fields.
    pub object: Value,
    /// The revision it was computed from (a write that loses to another is redone next step).
    pub expected: u64,
}

/// The condition of a stored object an owner displaces: `False` with the owner's reason, the
/// transition time kept while it was `False` already.
fn displaced_condition(current: &Value, owner: &Displaced, now: &str) -> Condition {
    let last_transition_time = match current["status"].as_str() {
        Some("False") => current["lastTransitionTime"].as_str().unwrap_or(now),
        _ => now,
    };
    Condition {
        type_: "Available",
        status: "False",
        last_transition_time: last_transition_time.to_string(),
        reason: owner.reason,
        message: owner.message.clone(),
    }
}

/// The writes that bring `stored` objects' conditions up to date: the displaced ones' from
/// `displaced`, the others' from `condition_of` (by name); `now` (RFC 3339) stamps a displaced
/// object's transition and the managed fields.
pub fn status_writes(
    stored: &[Arc<Value>],
    displaced: &[Displaced],
    condition_of: impl Fn(&str) -> Option<Condition>,
    now: &str,
) -> Vec<StatusWrite> {
    let mut writes = Vec::new();
    for object in stored {
        let Some(name) = object["metadata"]["name"].as_str() else {
            continue;
        };
        let current = &object["status"]["conditions"][0];
        let c = match displaced.iter().find(|d| d.name == name) {
            Some(owner) => displaced_condition(current, owner, now),
            None => match condition_of(name) {
                Some(c) => c,
                None => continue,
            },
        };
        if current["status"] == c.status
            && current["reason"] == c.reason
            && current["message"] == c.message.as_str()
        {
            continue;
        }
        let body = serde_json::json!({"status": {"conditions": [c]}});
        let Ok(mut next) = strategy::prepare_status_update(object, &body) else {
            continue;
        };
        // Recorded as kube-apiserver's own status writes are.
        let writer = managed_fields::Writer {
            manager: STATUS_MANAGER,
            subresource: managed_fields::Subresource::Status,
            now,
        };
        managed_fields::update(Some(object), &mut next, None, &writer);
        writes.push(StatusWrite {
            name: name.to_string(),
            object: next,
            expected: store::revision_of(object),
        });
    }
    writes
}
