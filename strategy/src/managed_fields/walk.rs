//! The shape of an APIService as structured-merge-diff sees it, and the walks over it: the
//! fields a value sets, what changed between two objects, merging an applied configuration
//! into the live object, and removing fields.
//!
//! Server-set metadata (`name`, `uid`, `resourceVersion`, `generation`, `creationTimestamp`,
//! `deletionTimestamp`, `selfLink`, `managedFields`, …) and `apiVersion`/`kind` are not in the
//! shape, so nothing tracks them; fields an APIService does not have are not either.

use serde_json::{Map, Value};

use super::set::{FieldSet, Path, PathElement};

/// How a field behaves.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// A leaf, compared and owned whole (`spec.caBundle` is one too).
    Scalar,
    /// Named fields, each tracked on its own.
    Struct(&'static [(&'static str, Shape)]),
    /// A string map whose keys are tracked one by one (`labels`).
    Map,
    /// A list of structs merged by one key field (`status.conditions` by `type`).
    Keyed(&'static str, &'static [(&'static str, Shape)]),
    /// A list of unique scalars (`metadata.finalizers`).
    Set,
}

const OWNER_REFERENCE: &[(&str, Shape)] = &[
    ("apiVersion", Shape::Scalar),
    ("kind", Shape::Scalar),
    ("name", Shape::Scalar),
    ("uid", Shape::Scalar),
    ("controller", Shape::Scalar),
    ("blockOwnerDeletion", Shape::Scalar),
];

const METADATA: &[(&str, Shape)] = &[
    ("generateName", Shape::Scalar),
    ("labels", Shape::Map),
    ("annotations", Shape::Map),
    ("finalizers", Shape::Set),
    ("ownerReferences", Shape::Keyed("uid", OWNER_REFERENCE)),
];

const SERVICE: &[(&str, Shape)] = &[
    ("namespace", Shape::Scalar),
    ("name", Shape::Scalar),
    ("port", Shape::Scalar),
];

const SPEC: &[(&str, Shape)] = &[
    ("service", Shape::Struct(SERVICE)),
    ("group", Shape::Scalar),
    ("version", Shape::Scalar),
    ("insecureSkipTLSVerify", Shape::Scalar),
    ("caBundle", Shape::Scalar),
    ("groupPriorityMinimum", Shape::Scalar),
    ("versionPriority", Shape::Scalar),
];

const CONDITION: &[(&str, Shape)] = &[
    ("type", Shape::Scalar),
    ("status", Shape::Scalar),
    ("lastTransitionTime", Shape::Scalar),
    ("reason", Shape::Scalar),
    ("message", Shape::Scalar),
];

const STATUS: &[(&str, Shape)] = &[("conditions", Shape::Keyed("type", CONDITION))];

/// An APIService.
pub(crate) const APISERVICE: Shape = Shape::Struct(&[
    ("metadata", Shape::Struct(METADATA)),
    ("spec", Shape::Struct(SPEC)),
    ("status", Shape::Struct(STATUS)),
]);

/// The children of a value of `shape`: each with its path element and shape.
fn children(value: Option<&Value>, shape: Shape) -> Vec<(PathElement, Shape, &Value)> {
    let Some(value) = value else {
        return Vec::new();
    };
    match (shape, value) {
        (Shape::Struct(fields), Value::Object(map)) => fields
            .iter()
            .filter_map(|(name, inner)| {
                let v = map.get(*name).filter(|v| !v.is_null())?;
                Some((PathElement::Field((*name).to_string()), *inner, v))
            })
            .collect(),
        (Shape::Map, Value::Object(map)) => map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (PathElement::Field(k.clone()), Shape::Scalar, v))
            .collect(),
        (Shape::Keyed(key, fields), Value::Array(items)) => items
            .iter()
            .filter_map(|item| Some((PathElement::key_of(key, item)?, Shape::Struct(fields), item)))
            .collect(),
        (Shape::Set, Value::Array(items)) => items
            .iter()
            .map(|item| (PathElement::value_of(item), Shape::Scalar, item))
            .collect(),
        _ => Vec::new(),
    }
}

/// The fields `value` sets (`ToFieldSet`): leaves and list items are members; a named field
/// only when it is null or an empty object.
pub(crate) fn field_set(value: &Value, shape: Shape) -> FieldSet {
    let mut set = FieldSet::new();
    collect(value, shape, &mut Vec::new(), &mut set);
    set
}

fn collect(value: &Value, shape: Shape, path: &mut Path, set: &mut FieldSet) {
    if let Shape::Struct(fields) = shape {
        // A named field set to null or `{}` is itself what the writer says.
        if let Value::Object(map) = value {
            for (name, _) in fields.iter() {
                let empty = map
                    .get(*name)
                    .is_some_and(|v| v.is_null() || v.as_object().is_some_and(Map::is_empty));
                if empty {
                    path.push(PathElement::Field((*name).to_string()));
                    set.insert(path);
                    path.pop();
                }
            }
        }
    }
    for (element, inner, child) in children(Some(value), shape) {
        path.push(element);
        match inner {
            Shape::Scalar => set.insert(path),
            _ if matches!(shape, Shape::Keyed(..)) => {
                set.insert(path);
                collect(child, inner, path, set);
            }
            _ => collect(child, inner, path, set),
        }
        path.pop();
    }
}

/// What changed from one object to another, path by path.
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    /// Paths only in the new object (with everything below them).
    pub added: FieldSet,
    /// Leaves whose value changed.
    pub modified: FieldSet,
    /// Paths only in the old object (with everything below them).
    pub removed: FieldSet,
}

/// Compares two objects of `shape`.
pub(crate) fn compare(old: &Value, new: &Value, shape: Shape) -> Comparison {
    let mut out = Comparison::default();
    compare_at(Some(old), Some(new), shape, &mut Vec::new(), &mut out);
    out
}

fn compare_at(
    old: Option<&Value>,
    new: Option<&Value>,
    shape: Shape,
    path: &mut Path,
    out: &mut Comparison,
) {
    if let Shape::Scalar = shape {
        match (old, new) {
            (None, Some(_)) => out.added.insert(path),
            (Some(_), None) => out.removed.insert(path),
            (Some(a), Some(b)) if a != b => out.modified.insert(path),
            _ => {}
        }
        return;
    }
    let old_children = children(old, shape);
    let new_children = children(new, shape);
    let mut seen: Vec<&PathElement> = Vec::new();
    for (element, inner, value) in &new_children {
        let before = old_children.iter().find(|(e, ..)| e == element);
        path.push(element.clone());
        compare_at(before.map(|(.., v)| *v), Some(value), *inner, path, out);
        path.pop();
        seen.push(element);
    }
    for (element, inner, value) in &old_children {
        if !seen.contains(&element) {
            path.push(element.clone());
            compare_at(Some(value), None, *inner, path, out);
            path.pop();
        }
    }
    if !path.is_empty() {
        match (old, new) {
            (None, Some(_)) => out.added.insert(path),
            (Some(_), None) => out.removed.insert(path),
            _ => {}
        }
    }
}

/// Merges an applied configuration into `live`: fields it names take its value (null removes
/// them), maps and structs merge field by field, associative lists item by item (new items go
/// last), sets take the union.
pub(crate) fn merge(live: &mut Value, config: &Value, shape: Shape) {
    match (shape, config) {
        (Shape::Struct(_) | Shape::Map, Value::Object(entries)) => {
            if !live.is_object() {
                *live = Value::Object(Map::new());
            }
            let Some(target) = live.as_object_mut() else {
                return;
            };
            for (name, value) in entries {
                if value.is_null() {
                    target.remove(name);
                    continue;
                }
                let inner = match shape {
                    Shape::Struct(fields) => fields.iter().find(|(n, _)| n == name).map(|f| f.1),
                    _ => None,
                };
                match (inner, target.get_mut(name)) {
                    (Some(inner), Some(existing)) => merge(existing, value, inner),
                    _ => {
                        target.insert(name.clone(), value.clone());
                    }
                }
            }
        }
        (Shape::Keyed(key, fields), Value::Array(items)) => {
            if !live.is_array() {
                *live = Value::Array(Vec::new());
            }
            let Some(list) = live.as_array_mut() else {
                return;
            };
            for item in items {
                let wanted = PathElement::key_of(key, item);
                let found = list
                    .iter_mut()
                    .find(|e| wanted.is_some() && PathElement::key_of(key, e) == wanted);
                match found {
                    Some(existing) => merge(existing, item, Shape::Struct(fields)),
                    None => list.push(item.clone()),
                }
            }
        }
        (Shape::Set, Value::Array(items)) => {
            if !live.is_array() {
                *live = Value::Array(Vec::new());
            }
            if let Some(list) = live.as_array_mut() {
                for item in items {
                    if !list.contains(item) {
                        list.push(item.clone());
                    }
                }
            }
        }
        _ => *live = config.clone(),
    }
}

/// Removes the value at `path` (a field, a list item, a set item) with everything below it.
pub(crate) fn remove(value: &mut Value, path: &[PathElement], shape: Shape) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let inner = match shape {
        Shape::Struct(fields) => fields
            .iter()
            .find(|(n, _)| matches!(first, PathElement::Field(f) if f == n))
            .map_or(Shape::Scalar, |f| f.1),
        Shape::Keyed(_, fields) => Shape::Struct(fields),
        _ => Shape::Scalar,
    };
    let key = match shape {
        Shape::Keyed(key, _) => key,
        _ => "",
    };
    let matches = |item: &Value| match first {
        PathElement::Key(_) => PathElement::key_of(key, item).as_ref() == Some(first),
        PathElement::Value(_) => &PathElement::value_of(item) == first,
        _ => false,
    };
    match (value, first) {
        (Value::Object(map), PathElement::Field(name)) if rest.is_empty() => {
            map.remove(name);
        }
        (Value::Object(map), PathElement::Field(name)) => {
            if let Some(child) = map.get_mut(name) {
                remove(child, rest, inner);
            }
        }
        (Value::Array(items), _) if rest.is_empty() => items.retain(|item| !matches(item)),
        (Value::Array(items), _) => {
            if let Some(child) = items.iter_mut().find(|item| matches(item)) {
                remove(child, rest, inner);
            }
        }
        _ => {}
    }
}
