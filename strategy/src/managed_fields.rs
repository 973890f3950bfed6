//! Field ownership as kube-apiserver keeps it in `metadata.managedFields` (structured-merge-diff
//! semantics, for `apiregistration.k8s.io/v1` APIService only): who set which field, by apply
//! or by update, and server-side apply with its conflicts. Pure: the caller passes the time.
//!
//! - An update (create, PUT, JSON/merge/strategic patch) by manager M takes the fields it added
//!   or changed from everyone else; fields it removed leave every set.
//! - An apply by M owns exactly the fields of its configuration; changing a field another
//!   manager owns is a conflict unless forced (then the field moves to M); fields M applied
//!   before and no longer applies are removed from the object when nobody else owns them.
//! - Writes to the main resource never own `status`; writes to `/status` own only `status`.

mod entries;
mod set;
mod walk;

#[cfg(test)]
mod tests;

use serde_json::{json, Value};

pub use entries::{decode, encode, is_reset, Entry, Operation};
pub use set::{path_string, FieldSet, Path, PathElement};

use walk::APISERVICE;

/// The one version managed fields are kept in.
pub const API_VERSION: &str = "apiregistration.k8s.io/v1";
/// kubectl's client-side apply annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Longest field manager name (`FieldManagerMaxLength`).
pub const MANAGER_MAX_LENGTH: usize = 128;

/// The part of an APIService a request writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// `/apiservices/<name>`: everything but `status`.
    Main,
    /// `/apiservices/<name>/status`: only `status`.
    Status,
}

impl Subresource {
    fn name(self) -> Option<&'static str> {
        match self {
            Subresource::Main => None,
            Subresource::Status => Some("status"),
        }
    }

    /// What such a write never owns (the strategy resets it).
    fn ignore(self, set: &FieldSet) -> FieldSet {
        let mut set = set.clone();
        let field = |name: &str| [PathElement::Field(name.to_string())];
        match self {
            Subresource::Main => set.remove_tree(&field("status")),
            Subresource::Status => {
                set.remove_tree(&field("spec"));
                set.remove_tree(&field("metadata"));
            }
        }
        set
    }
}

/// Who writes, where, and when.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// Main resource or `/status`.
    pub subresource: Subresource,
    /// The time of the write (RFC 3339).
    pub now: &'a str,
}

/// One field an apply would take from another manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager, as upstream names it (`"m" using apiregistration.k8s.io/v1`).
    pub manager: String,
    /// Its identity, to group conflicts by.
    identifier: String,
    /// The field (`.spec.versionPriority`).
    pub field: String,
}

/// The conflicts of one apply, rendered as kube-apiserver renders them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl std::fmt::Display for Conflicts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let [only] = self.0.as_slice() {
            return write!(
                f,
                "Apply failed with 1 conflict: conflict with {}: {}",
                only.manager, only.field
            );
        }
        let mut lines = Vec::new();
        let mut last: Option<&str> = None;
        for conflict in &self.0 {
            if last != Some(conflict.identifier.as_str()) {
                lines.push(format!("conflicts with {}:", conflict.manager));
                last = Some(&conflict.identifier);
            }
            lines.push(format!("- {}", conflict.field));
        }
        write!(
            f,
            "Apply failed with {} conflicts: {}",
            self.0.len(),
            lines.join("\n")
        )
    }
}

impl Conflicts {
    /// `details.causes` of the 409 Status.
    pub fn causes(&self) -> Value {
        let causes: Vec<Value> = self
            .0
            .iter()
            .map(|c| {
                json!({"reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", c.manager), "field": c.field})
            })
            .collect();
        Value::Array(causes)
    }
}

/// Why an apply is refused.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change (`Conflict`, 409). Not retryable as is:
    /// retry with `force`, or without those fields.
    #[error("{0}")]
    Conflicts(Conflicts),
    /// The configuration cannot be applied (`BadRequest`, 400). Not retryable: the
    /// configuration must change.
    #[error("{0}")]
    BadRequest(String),
}

/// The result of an apply.
type Result<T, E = ApplyError> = std::result::Result<T, E>;

/// The object an API type starts from when it is created: Go's zero APIService as
/// kube-apiserver's converter sees it (the two priorities present, at 0).
pub fn empty_object() -> Value {
    json!({"apiVersion": API_VERSION, "kind": "APIService", "metadata": {},
        "spec": {"groupPriorityMinimum": 0, "versionPriority": 0}, "status": {}})
}

/// The manager of a write without `fieldManager`: the User-Agent up to its first `/`, without
/// unprintable characters, at most 128 bytes.
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let prefix = user_agent.split('/').next().unwrap_or("");
    let mut out = String::new();
    for c in prefix.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

fn managed(object: &Value) -> Option<&Value> {
    object.get("metadata")?.get("managedFields")
}

fn live_entries(live: Option<&Value>) -> Vec<Entry> {
    live.and_then(|l| decode(managed(l))).unwrap_or_default()
}

/// Stores `entries` as `metadata.managedFields` of `object` (removed when none is left).
pub fn set_entries(object: &mut Value, entries: &[Entry]) {
    let list = encode(entries);
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if list.as_array().is_some_and(Vec::is_empty) {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), list);
    }
}

/// Records an update by `writer` from `live` (`None` for a create) to `new`, setting
/// `new`'s `metadata.managedFields`. `requested` is the list the client sent: `[]` or `[{}]`
/// clears the history, a readable non-empty list replaces it (not on `/status`), anything
/// else keeps the live object's.
pub fn update(live: Option<&Value>, new: &mut Value, requested: Option<&Value>, writer: &Writer) {
    let mut entries = match decode(requested) {
        _ if writer.subresource == Subresource::Status => live_entries(live),
        _ if is_reset(requested) => Vec::new(),
        Some(list) if list.iter().any(|e| !e.fields.is_empty()) => list,
        _ => live_entries(live),
    };
    let zero = empty_object();
    let diff = walk::compare(live.unwrap_or(&zero), new, APISERVICE);
    let changed = writer.subresource.ignore(&diff.modified.union(&diff.added));
    let removed = writer.subresource.ignore(&diff.removed);
    for entry in &mut entries {
        entry.fields = entry.fields.difference(&changed).difference(&removed);
    }
    let sub = writer.subresource.name();
    let index = match entries
        .iter()
        .position(|e| e.is(writer.manager, Operation::Update, sub))
    {
        Some(i) => i,
        None => {
            entries.push(Entry::new(writer.manager, Operation::Update, sub));
            entries.len() - 1
        }
    };
    let mine = &mut entries[index];
    mine.fields = mine.fields.union(&changed);
    if !changed.is_empty() {
        mine.time = Some(writer.now.to_string());
    }
    set_entries(new, &entries);
}

/// Applies `config` (an applied configuration, already parsed) by `writer` to `live` (`None`
/// when the object does not exist yet): returns the merged object, before the strategy, with
/// its `metadata.managedFields` set. `force` moves conflicting fields instead of refusing.
pub fn apply(live: Option<&Value>, config: &Value, writer: &Writer, force: bool) -> Result<Value> {
    if managed(config).is_some_and(|m| !m.is_null()) {
        return Err(ApplyError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let zero = empty_object();
    let live_value = live.unwrap_or(&zero);
    let sub = writer.subresource.name();
    let is_mine = |e: &Entry| e.is(writer.manager, Operation::Apply, sub);
    let mut entries = live_entries(live);
    let applied = writer
        .subresource
        .ignore(&walk::field_set(config, APISERVICE));
    let last = match entries.iter_mut().find(|e| is_mine(e)) {
        Some(entry) => std::mem::replace(&mut entry.fields, applied),
        None => {
            let mut entry = Entry::new(writer.manager, Operation::Apply, sub);
            entry.fields = applied;
            entries.push(entry);
            FieldSet::new()
        }
    };
    let mut merged = live_value.clone();
    walk::merge(&mut merged, config, APISERVICE);
    prune(&mut merged, &last, &entries);

    let diff = walk::compare(live_value, &merged, APISERVICE);
    let changed = writer.subresource.ignore(&diff.modified.union(&diff.added));
    let removed = writer.subresource.ignore(&diff.removed);
    let mut conflicts: Vec<Conflict> = Vec::new();
    for entry in entries.iter().filter(|e| !is_mine(e)) {
        for path in entry.fields.intersection(&changed).paths() {
            conflicts.push(Conflict {
                manager: entry.describe(),
                identifier: entry.identifier(),
                field: path_string(&path),
            });
        }
    }
    conflicts.sort_by(|a, b| a.identifier.cmp(&b.identifier));
    if !conflicts.is_empty() && !force {
        // kubectl's own switch from client-side apply: fields whose live value is still the
        // last-applied one may be taken (upstream's lastAppliedManager).
        let allowed = (writer.manager == "kubectl")
            .then(|| allowed_by_last_applied(live_value))
            .flatten();
        let remaining: Vec<Conflict> = match &allowed {
            Some(allowed) => conflicts
                .into_iter()
                .filter(|c| !allowed.iter().any(|p| path_string(p) == c.field))
                .collect(),
            None => conflicts,
        };
        if allowed.is_none() || !remaining.is_empty() {
            return Err(ApplyError::Conflicts(Conflicts(remaining)));
        }
    }
    for entry in entries.iter_mut().filter(|e| !is_mine(e)) {
        entry.fields = entry.fields.difference(&changed).difference(&removed);
    }
    if let Some(entry) = entries.iter_mut().find(|e| is_mine(e)) {
        if merged != *live_value || entry.time.is_none() {
            entry.time = Some(writer.now.to_string());
        }
    }
    if writer.manager == "kubectl" {
        sync_last_applied(&mut merged, config);
    }
    set_entries(&mut merged, &entries);
    Ok(merged)
}

/// Removes what the applier owned before and owns no longer, unless someone else owns it.
fn prune(merged: &mut Value, last: &FieldSet, entries: &[Entry]) {
    if last.is_empty() {
        return;
    }
    let owned = entries
        .iter()
        .fold(FieldSet::new(), |all, e| all.union(&e.fields))
        .with_parents();
    let metadata = [PathElement::Field("metadata".into())];
    for path in last.with_parents().difference(&owned).paths() {
        if path != metadata {
            walk::remove(merged, &path, APISERVICE);
        }
    }
}

/// The fields of the last-applied annotation whose live value is still the one applied.
fn allowed_by_last_applied(live: &Value) -> Option<Vec<Path>> {
    let text = live["metadata"]["annotations"][LAST_APPLIED].as_str()?;
    let last: Value = serde_json::from_str(text).ok()?;
    let diff = walk::compare(&last, live, APISERVICE);
    let set = walk::field_set(&last, APISERVICE)
        .difference(&diff.modified)
        .difference(&diff.added)
        .difference(&diff.removed);
    Some(set.paths())
}

/// An apply by kubectl keeps the client-side annotation in step with what it applied.
fn sync_last_applied(merged: &mut Value, config: &Value) {
    let Some(annotations) = merged
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if annotations
        .get(LAST_APPLIED)
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return;
    }
    let mut last = config.clone();
    if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(own) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            own.remove(LAST_APPLIED);
            if own.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    annotations.insert(LAST_APPLIED.into(), json!(format!("{last}\n")));
}
