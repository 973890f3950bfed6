//! What a patch or an apply may cost, as kube-apiserver bounds it: a JSON Patch of at most
//! [`MAX_JSON_PATCH_OPERATIONS`] operations whose `copy` operations add at most
//! [`MAX_OBJECT_BYTES`]; YAML whose alias expansion stays under [`MAX_OBJECT_BYTES`] of memory;
//! and a result no larger than that. Sizes are JSON-text estimates, measured with a walk that
//! stops at the limit, so a refusal costs no more than the limit.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::{Result, WriteError};

/// Largest object a write may produce, and the copy budget of one JSON Patch (the API's request
/// body limit, 3 MiB).
pub const MAX_OBJECT_BYTES: usize = 3 << 20;
/// Most operations of one JSON Patch (kube-apiserver's `maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// The JSON-text size of `value` when it is at most `budget` bytes, else `None` (the walk stops
/// as soon as the budget is spent).
pub(crate) fn size_within(value: &Value, budget: usize) -> Option<usize> {
    let mut left = budget;
    let mut stack: Vec<&Value> = vec![value];
    while let Some(v) = stack.pop() {
        let cost = match v {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 20,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                stack.extend(items.iter());
                2 + items.len()
            }
            Value::Object(map) => {
                stack.extend(map.values());
                2 + map.keys().map(|k| k.len() + 4).sum::<usize>()
            }
        };
        left = left.checked_sub(cost)?;
    }
    Some(budget - left)
}

/// Refuses a result larger than [`MAX_OBJECT_BYTES`] (`RequestEntityTooLarge`, 413).
pub(crate) fn check_size(value: &Value) -> Result<()> {
    match size_within(value, MAX_OBJECT_BYTES) {
        Some(_) => Ok(()),
        None => Err(WriteError::TooLarge(format!(
            "the patched object is larger than the limit of {MAX_OBJECT_BYTES} bytes"
        ))),
    }
}

/// Applies an RFC 6902 patch to `target` operation by operation, refusing more than
/// [`MAX_JSON_PATCH_OPERATIONS`] operations and `copy` operations that together add more than
/// [`MAX_OBJECT_BYTES`] (each measured before it runs).
pub(crate) fn json_patch(target: &mut Value, body: &[u8]) -> Result<()> {
    let bad = |e: &dyn fmt::Display| WriteError::BadRequest(e.to_string());
    let patch: json_patch::Patch = serde_json::from_slice(body).map_err(|e| bad(&e))?;
    let count = patch.0.len();
    if count > MAX_JSON_PATCH_OPERATIONS {
        return Err(WriteError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {count}"
        )));
    }
    let mut copied = 0usize;
    for (index, operation) in patch.0.iter().enumerate() {
        if let json_patch::PatchOperation::Copy(copy) = operation {
            if let Some(source) = target.pointer(copy.from.as_str()) {
                let left = MAX_OBJECT_BYTES - copied;
                let Some(size) = size_within(source, left) else {
                    return Err(WriteError::TooLarge(format!(
                        "Unable to complete the copy of operation {index}: the accumulated size increase of copy operations would exceed the limit of {MAX_OBJECT_BYTES} bytes"
                    )));
                };
                copied += size;
            }
        }
        // `target` is a copy dropped on error, so nothing needs undoing; `json_patch::patch`
        // panics when its undo fails (e.g. a `move` of a parent after an `add` into it).
        json_patch::patch_unsafe(target, std::slice::from_ref(operation)).map_err(|mut e| {
            e.operation = index;
            bad(&e)
        })?;
    }
    Ok(())
}

/// Parses YAML (or JSON) into a value, refusing documents whose expansion (aliases replayed)
/// would take more than [`MAX_OBJECT_BYTES`] of memory: the parse stops there. `what` prefixes
/// other YAML errors.
pub(crate) fn yaml_value(text: &str, what: &str) -> Result<Value> {
    let left = Cell::new(MAX_OBJECT_BYTES);
    let exceeded = Cell::new(false);
    let seed = Node {
        left: &left,
        exceeded: &exceeded,
    };
    seed.deserialize(serde_yaml_ng::Deserializer::from_str(text))
        .map_err(|e| {
            if exceeded.get() {
                WriteError::TooLarge(format!(
                    "the YAML document, its aliases expanded, takes more than the limit of {MAX_OBJECT_BYTES} bytes"
                ))
            } else {
                WriteError::BadRequest(format!("{what}{e}"))
            }
        })
}

/// A create or replace body in YAML, bounded as [`yaml_value`]: a document whose aliases would
/// expand past [`MAX_OBJECT_BYTES`] is `TooLarge`, anything else unreadable `BadRequest`.
pub fn yaml_body(body: &[u8]) -> Result<Value> {
    let text = std::str::from_utf8(body)
        .map_err(|e| WriteError::BadRequest(format!("invalid YAML: {e}")))?;
    yaml_value(text, "invalid YAML: ")
}

/// What one value costs besides its text: its own memory, twice (the slack of growing vectors
/// and maps, and the allocator's).
const NODE: usize = 2 * std::mem::size_of::<Value>();

/// A value being deserialized, charged against a shared budget of memory (each value its size
/// plus its text), built as serde_json's own `Value` visitor builds it otherwise.
#[derive(Clone, Copy)]
struct Node<'b> {
    left: &'b Cell<usize>,
    exceeded: &'b Cell<bool>,
}

impl Node<'_> {
    fn spend<E: de::Error>(self, cost: usize) -> Result<(), E> {
        match self.left.get().checked_sub(cost) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.exceeded.set(true);
                Err(E::custom("expansion limit exceeded"))
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.spend(NODE)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.spend(NODE)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.spend(NODE)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.spend(NODE)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.spend(NODE + v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.spend(NODE + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.spend(NODE)?;
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.spend(NODE)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        self.spend(NODE)?;
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            self.spend(NODE + key.len())?;
            let value = access.next_value_seed(self)?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_parses_as_before() {
        let text = "a: &x [1, 2.5, true, null, s]\nb: *x\nc: {d: e}\n";
        let value = yaml_value(text, "").expect("small YAML parses");
        let plain: Value = serde_yaml_ng::from_str(text).expect("plain parse");
        assert_eq!(value, plain);
    }

    #[test]
    fn an_alias_bomb_is_refused_at_the_limit() {
        let text = format!(
            "a: &a [{}]\nb: [{}]\n",
            vec!["x"; 20_000].join(","),
            vec!["*a"; 20_000].join(",")
        );
        let refused = yaml_value(&text, "").expect_err("a bomb is refused");
        assert!(matches!(refused, WriteError::TooLarge(_)), "{refused:?}");
    }

    #[test]
    fn json_patch_limits() {
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| serde_json::json!({"op": "test", "path": "/a", "value": 1}))
            .collect();
        let body = serde_json::to_vec(&ops).expect("encodes");
        let refused = json_patch(&mut serde_json::json!({"a": 1}), &body).expect_err("too many");
        assert_eq!(
            refused.to_string(),
            "The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
        // Each copy doubles the array: 60 of them would be exabytes.
        let mut ops =
            vec![serde_json::json!({"op": "add", "path": "/a", "value": ["x".repeat(1000)]})];
        ops.extend(
            (0..60).map(|_| serde_json::json!({"op": "copy", "from": "/a", "path": "/a/-"})),
        );
        let body = serde_json::to_vec(&ops).expect("encodes");
        let refused = json_patch(&mut serde_json::json!({}), &body).expect_err("bomb");
        assert!(matches!(refused, WriteError::TooLarge(_)), "{refused:?}");
    }

    #[test]
    fn failing_operations_keep_their_index() {
        let body = br#"[{"op":"test","path":"/a","value":1},{"op":"remove","path":"/nope"}]"#;
        let refused = json_patch(&mut serde_json::json!({"a": 1}), body).expect_err("fails");
        assert!(refused.to_string().contains("operation '/1'"), "{refused}");
    }
}
