//! `metadata.managedFields`: reading and writing the entries, and naming a manager the way
//! conflicts do.

use serde_json::{json, Value};

use super::set::FieldSet;
use super::API_VERSION;

/// How a manager wrote its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write (create, update, the other patches).
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The field manager.
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// `status` for writes to `/status`.
    pub subresource: Option<String>,
    /// The API version the fields are in.
    pub api_version: String,
    /// When the manager last changed the object.
    pub time: Option<String>,
    /// The fields it owns.
    pub fields: FieldSet,
}

impl Entry {
    /// An empty entry for a manager.
    pub fn new(manager: &str, operation: Operation, subresource: Option<&str>) -> Entry {
        Entry {
            manager: manager.to_string(),
            operation,
            subresource: subresource.map(str::to_string),
            api_version: API_VERSION.to_string(),
            time: None,
            fields: FieldSet::new(),
        }
    }

    /// Whether this is the entry of (manager, operation, subresource).
    pub fn is(&self, manager: &str, operation: Operation, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    /// The manager as conflict messages name it (`printManager` upstream): `"m"` for an
    /// applier, `"m" using apiregistration.k8s.io/v1` for an updater, with
    /// `with subresource "status"` after the name when it wrote a subresource.
    pub fn describe(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            out.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    /// The identity upstream sorts and groups conflicts by (its JSON manager identifier).
    pub(crate) fn identifier(&self) -> String {
        let mut id = json!({"manager": self.manager, "operation": self.operation.as_str()});
        if self.operation == Operation::Update {
            id["apiVersion"] = json!(self.api_version);
        }
        if let Some(sub) = &self.subresource {
            id["subresource"] = json!(sub);
        }
        id.to_string()
    }

    fn from_json(value: &Value) -> Option<Entry> {
        if value.get("fieldsType").and_then(Value::as_str) != Some("FieldsV1") {
            return None;
        }
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        let operation = match value.get("operation").and_then(Value::as_str)? {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return None,
        };
        Some(Entry {
            manager: text("manager").unwrap_or_default(),
            operation,
            subresource: text("subresource").filter(|s| !s.is_empty()),
            api_version: text("apiVersion").unwrap_or_else(|| API_VERSION.to_string()),
            time: text("time"),
            fields: FieldSet::from_fields_v1(value.get("fieldsV1").unwrap_or(&Value::Null)),
        })
    }

    fn to_json(&self) -> Value {
        let mut out = json!({"manager": self.manager, "operation": self.operation.as_str(),
            "apiVersion": self.api_version});
        if let Some(time) = &self.time {
            out["time"] = json!(time);
        }
        out["fieldsType"] = json!("FieldsV1");
        out["fieldsV1"] = self.fields.to_fields_v1();
        if let Some(sub) = &self.subresource {
            out["subresource"] = json!(sub);
        }
        out
    }
}

/// The entries of a `managedFields` list; `None` when it is missing or unreadable (upstream
/// then falls back to the live object's).
pub fn decode(list: Option<&Value>) -> Option<Vec<Entry>> {
    let items = list?.as_array()?;
    items.iter().map(Entry::from_json).collect()
}

/// Whether a client asked to clear the managed fields: `[]` or `[{}]`.
pub fn is_reset(list: Option<&Value>) -> bool {
    match list.and_then(Value::as_array).map(Vec::as_slice) {
        Some([]) => true,
        Some([only]) => only.as_object().is_some_and(|m| m.is_empty()),
        _ => false,
    }
}

/// The `managedFields` list: empty entries dropped, sorted as upstream (operation, time,
/// manager, API version, subresource).
pub fn encode(entries: &[Entry]) -> Value {
    let mut kept: Vec<&Entry> = entries.iter().filter(|e| !e.fields.is_empty()).collect();
    kept.sort_by(|p, q| {
        (
            p.operation,
            &p.time,
            &p.manager,
            &p.api_version,
            &p.subresource,
        )
            .cmp(&(
                q.operation,
                &q.time,
                &q.manager,
                &q.api_version,
                &q.subresource,
            ))
    });
    Value::Array(kept.into_iter().map(Entry::to_json).collect())
}
