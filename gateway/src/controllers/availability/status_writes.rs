//! The status writes of APIServices registered through the API (pure): each stored object gets
//! the `Available` condition apiagg holds for it, or, when an owner displaces it, `False` with
//! the owner's reason. An object whose condition already says the same is not written.

use std::sync::Arc;

use apiagg_config::Displaced;
use apiagg_strategy::{self as strategy, managed_fields};
use serde_json::Value;

use crate::state::Condition;
use apiagg_store::revision_of;

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
            expected: revision_of(object),
        });
    }
    writes
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use apiagg_config::BUILTIN_GROUP;
    use serde_json::json;

    use super::*;

    const THEN: &str = "2030-01-01T00:00:00Z";
    const NOW: &str = "2030-01-02T00:00:00Z";

    fn condition((status, reason, message): (&'static str, &'static str, &str)) -> Condition {
        Condition {
            type_: "Available",
            status,
            last_transition_time: THEN.into(),
            reason,
            message: message.into(),
        }
    }

    fn stored(name: &str, condition: Option<Value>) -> Arc<Value> {
        let mut object = json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name, "resourceVersion": "7"},
            "spec": {"group": "apps", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15},
        });
        if let Some(c) = condition {
            object["status"] = json!({"conditions": [c]});
        }
        Arc::new(object)
    }

    fn displaced(name: &str) -> Displaced {
        Displaced {
            name: name.into(),
            reason: BUILTIN_GROUP,
            message: "group apps is built into Kubernetes".into(),
        }
    }

    #[test]
    fn displaced_stored_apiservices_are_false_with_the_owners_reason() {
        let objects = [
            stored("v1.apps", None),
            stored(
                "v2.apps",
                Some(
                    json!({"type": "Available", "status": "False", "lastTransitionTime": THEN,
                            "reason": "Other", "message": "other"}),
                ),
            ),
        ];
        let owners = [displaced("v1.apps"), displaced("v2.apps")];
        // What the book holds for a displaced name does not count.
        let ours = |_: &str| Some(condition(("True", "Passed", "ok")));
        let writes = status_writes(&objects, &owners, ours, NOW);
        assert_eq!(writes.len(), 2);
        for (write, since) in writes.iter().zip([NOW, THEN]) {
            assert_eq!(write.expected, 7);
            let c = &write.object["status"]["conditions"][0];
            assert_eq!(c["status"], "False");
            assert_eq!(c["reason"], BUILTIN_GROUP);
            assert_eq!(c["message"], "group apps is built into Kubernetes");
            // The time moves only when the status does.
            assert_eq!(c["lastTransitionTime"], since, "{}", write.name);
            let managers = write.object["metadata"]["managedFields"].to_string();
            assert!(managers.contains("kube-apiserver"), "{managers}");
        }
        // Once written, nothing more to write.
        let written: Vec<Arc<Value>> = writes.into_iter().map(|w| Arc::new(w.object)).collect();
        assert!(status_writes(&written, &owners, |_| None, NOW).is_empty());
    }

    #[test]
    fn stored_apiservices_get_the_books_condition_when_it_differs() {
        let objects = [
            stored(
                "v1.same.example.com",
                Some(
                    json!({"type": "Available", "status": "True", "lastTransitionTime": "long ago",
                            "reason": "Passed", "message": "all checks passed"}),
                ),
            ),
            stored("v1.new.example.com", None),
            stored("v1.unknown.example.com", None),
            Arc::new(json!({"metadata": {}})),
        ];
        let book = HashMap::from([
            (
                "v1.same.example.com",
                condition(("True", "Passed", "all checks passed")),
            ),
            (
                "v1.new.example.com",
                condition(("False", "MissingEndpoints", "none")),
            ),
        ]);
        let writes = status_writes(&objects, &[], |name| book.get(name).cloned(), NOW);
        // Same status, reason and message: no write (the time is not compared); no condition known
        // or no name: none either.
        let names: Vec<&str> = writes.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["v1.new.example.com"]);
        let c = &writes[0].object["status"]["conditions"][0];
        assert_eq!(
            c,
            &json!({"type": "Available", "status": "False", "lastTransitionTime": THEN,
                    "reason": "MissingEndpoints", "message": "none"})
        );
    }
}
