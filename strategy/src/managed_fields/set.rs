//! Sets of field paths as structured-merge-diff keeps them, and their `FieldsV1` encoding:
//! `f:<field>`, `k:<key fields as JSON>` (an item of an associative list), `v:<value as JSON>` (an
//! item of a set), `i:<index>`, and `.` for "this path itself is in the set".

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

/// One step of a field path; ordered as upstream orders them (fields, keys, values, indexes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of a struct or a key of a map (`f:name`).
    Field(String),
    /// An item of an associative list, named by its key fields as a JSON object
    /// (`k:{"type":"Available"}`).
    Key(String),
    /// An item of a set, named by its value as JSON (`v:"x"`).
    Value(String),
    /// An item of a list by position (`i:0`); kept as read, never produced here.
    Index(u64),
}

impl PathElement {
    /// The element of an associative-list item keyed by `name` (`None` without that key).
    pub fn key_of(name: &str, item: &Value) -> Option<PathElement> {
        let value = item.get(name).filter(|v| !v.is_null())?;
        let mut key = Map::new();
        key.insert(name.to_string(), value.clone());
        Some(PathElement::Key(Value::Object(key).to_string()))
    }

    /// The element of a set item.
    pub fn value_of(item: &Value) -> PathElement {
        PathElement::Value(item.to_string())
    }

    fn encode(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(key) => format!("k:{key}"),
            PathElement::Value(value) => format!("v:{value}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(text: &str) -> Option<PathElement> {
        let (kind, rest) = text.split_at_checked(2)?;
        // Keys and values are normalised through serde so that `{"a": 1}` and `{"a":1}` agree.
        let normal = |raw: &str| {
            serde_json::from_str::<Value>(raw)
                .ok()
                .map(|v| v.to_string())
        };
        match kind {
            "f:" => Some(PathElement::Field(rest.to_string())),
            "k:" => normal(rest).map(PathElement::Key),
            "v:" => normal(rest).map(PathElement::Value),
            "i:" => rest.parse().ok().map(PathElement::Index),
            _ => None,
        }
    }
}

impl fmt::Display for PathElement {
    /// As `fieldpath.PathElement.String()`: `.name`, `[type="Available"]`, `[="x"]`, `[0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(key) => {
                let parsed: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                let mut parts: Vec<String> =
                    parsed.iter().map(|(k, v)| format!("{k}={v}")).collect();
                parts.sort();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(value) => write!(f, "[={value}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object's root.
pub type Path = Vec<PathElement>;

/// Renders a path the way conflicts name it (`.spec.versionPriority`).
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of paths, as a tree: each node says whether its own path is a member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Whether no path is a member.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds `path` (the empty path is the root and is never a member).
    pub fn insert(&mut self, path: &[PathElement]) {
        let mut node = self;
        for element in path {
            node = node.children.entry(element.clone()).or_default();
        }
        node.member = !path.is_empty();
    }

    /// Whether `path` is a member.
    pub fn contains(&self, path: &[PathElement]) -> bool {
        self.node(path)
            .is_some_and(|n| n.member && !path.is_empty())
    }

    fn node(&self, path: &[PathElement]) -> Option<&FieldSet> {
        path.iter().try_fold(self, |node, e| node.children.get(e))
    }

    /// Removes `path` and everything below it.
    pub fn remove_tree(&mut self, path: &[PathElement]) {
        let Some((last, parent)) = path.split_last() else {
            *self = FieldSet::new();
            return;
        };
        let mut node = self;
        for element in parent {
            match node.children.get_mut(element) {
                Some(next) => node = next,
                None => return,
            }
        }
        node.children.remove(last);
    }

    /// Every path of `self` or `other`.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.member |= other.member;
        for (element, theirs) in &other.children {
            let merged = match out.children.get(element) {
                Some(ours) => ours.union(theirs),
                None => theirs.clone(),
            };
            out.children.insert(element.clone(), merged);
        }
        out
    }

    /// The paths of `self` that are not members of `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let children = self
            .children
            .iter()
            .map(|(element, ours)| match other.children.get(element) {
                Some(theirs) => (element.clone(), ours.difference(theirs)),
                None => (element.clone(), ours.clone()),
            })
            .filter(|(_, node)| !node.is_empty())
            .collect();
        FieldSet {
            member: self.member && !other.member,
            children,
        }
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let children = self
            .children
            .iter()
            .filter_map(|(element, ours)| {
                let theirs = other.children.get(element)?;
                Some((element.clone(), ours.intersection(theirs)))
            })
            .filter(|(_, node)| !node.is_empty())
            .collect();
        FieldSet {
            member: self.member && other.member,
            children,
        }
    }

    /// The set with every path that has members below it made a member too (what prune
    /// compares: a struct whose fields someone owns is owned).
    pub fn with_parents(&self) -> FieldSet {
        let children: BTreeMap<PathElement, FieldSet> = self
            .children
            .iter()
            .filter(|(_, node)| !node.is_empty())
            .map(|(element, node)| {
                let mut node = node.with_parents();
                node.member = true;
                (element.clone(), node)
            })
            .collect();
        FieldSet {
            member: self.member,
            children,
        }
    }

    /// The members, in upstream's order: a node's own members, then its children's.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for (element, node) in &self.children {
            if node.member {
                let mut path = prefix.clone();
                path.push(element.clone());
                out.push(path);
            }
        }
        for (element, node) in &self.children {
            prefix.push(element.clone());
            node.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Reads a `fieldsV1` object; entries it cannot read are skipped.
    pub fn from_fields_v1(value: &Value) -> FieldSet {
        let mut set = FieldSet::new();
        if let Value::Object(map) = value {
            for (key, inner) in map {
                if key == "." {
                    set.member = true;
                } else if let Some(element) = PathElement::decode(key) {
                    let mut node = FieldSet::from_fields_v1(inner);
                    // A leaf is written `{}`; a node with children says `.` when it is a member.
                    node.member |= inner.as_object().is_some_and(Map::is_empty);
                    if !node.is_empty() {
                        set.children.insert(element, node);
                    }
                }
            }
        }
        set
    }

    /// The `fieldsV1` object: `.` first, then the children in order.
    pub fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        if self.member {
            map.insert(".".into(), Value::Object(Map::new()));
        }
        for (element, node) in &self.children {
            if !node.is_empty() {
                // A member without children is `{}`, one with children carries `.` inside.
                map.insert(element.encode(), node.to_fields_v1_child());
            }
        }
        Value::Object(map)
    }

    fn to_fields_v1_child(&self) -> Value {
        if self.children.values().all(FieldSet::is_empty) {
            return Value::Object(Map::new());
        }
        self.to_fields_v1()
    }
}
