//! The merge state: paths, definitions and parameters borrowed from the inputs, plus the
//! per-input reference renames applied when rendering (spec §7.3).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::prepare::{kept_closure, PreparedV2};
use super::refs::{Renames, DEFINITION_PREFIX, PARAMETER_PREFIX};
use super::view::DocView;

/// Vendor extension listing the kinds a definition describes; ignored when comparing.
pub(crate) const GVK_KEY: &str = "x-kubernetes-group-version-kind";

/// A definition in the result.
#[derive(Debug)]
pub(crate) struct OutDefinition<'a> {
    /// Index of the source whose renames apply to `value`.
    pub source: usize,
    /// The definition as written in its source.
    pub value: &'a Value,
    /// Replacement `x-kubernetes-group-version-kind` after merging identical definitions.
    pub gvk: Option<Value>,
}

/// Borrowed merge result, rendered by `render`.
#[derive(Debug, Default)]
pub(crate) struct Merger<'a> {
    /// The first usable document: everything but `paths`, `definitions`, `parameters` comes from it.
    pub base: Option<&'a Map<String, Value>>,
    /// Path → (source index, path item).
    pub paths: HashMap<&'a str, (usize, &'a Value)>,
    /// Definition name → definition.
    pub definitions: HashMap<Cow<'a, str>, OutDefinition<'a>>,
    /// Shared parameter name → (source index, parameter).
    pub parameters: HashMap<Cow<'a, str>, (usize, &'a Value)>,
    /// Renames per source index.
    pub renames: Vec<Renames>,
}

/// The part of one source that survives path filtering.
struct Kept<'a> {
    paths: Vec<(&'a str, &'a Value)>,
    definitions: Vec<(&'a str, &'a Value)>,
    parameters: Vec<(&'a str, &'a Value)>,
}

impl<'a> Merger<'a> {
    /// Merges one prepared document; a path some earlier document has is not taken (and what
    /// only such paths used is dropped).
    pub fn add(&mut self, spec: &'a PreparedV2) {
        // A prepared document passed `DocView::new` already.
        let Ok(view) = DocView::new(&spec.doc) else {
            return;
        };
        if let Some(kept) = self.keep(spec, &view) {
            self.insert(kept);
        }
        self.base.get_or_insert(view.root);
    }

    fn insert(&mut self, kept: Kept<'a>) {
        let source = self.renames.len();
        let mut renames = Renames::new();
        self.rename_definitions(&kept, &mut renames);
        self.rename_parameters(&kept, &mut renames);
        for (name, value) in &kept.definitions {
            let name = renamed(&renames, DEFINITION_PREFIX, name);
            match self.definitions.get_mut(name.as_ref()) {
                Some(existing) => {
                    let current = existing
                        .gvk
                        .as_ref()
                        .or_else(|| existing.value.get(GVK_KEY));
                    if let Some(merged) = merge_gvks(current, value.get(GVK_KEY)) {
                        existing.gvk = Some(merged);
                    }
                }
                None => {
                    self.definitions.insert(
                        name,
                        OutDefinition {
                            source,
                            value,
                            gvk: None,
                        },
                    );
                }
            }
        }
        for (name, value) in &kept.parameters {
            let name = renamed(&renames, PARAMETER_PREFIX, name);
            self.parameters.entry(name).or_insert((source, value));
        }
        for (path, item) in kept.paths {
            self.paths.insert(path, (source, item));
        }
        self.renames.push(renames);
    }

    /// The part of `spec` that goes in: its paths nobody has yet, and their definitions and
    /// parameters. `None` when it contributes nothing.
    fn keep(&self, spec: &'a PreparedV2, view: &DocView<'a>) -> Option<Kept<'a>> {
        if !spec.has_paths {
            return None;
        }
        let items = view.paths?;
        let paths: Vec<(&'a str, &'a Value)> = spec
            .paths
            .iter()
            .filter(|p| !self.paths.contains_key(p.as_str()))
            .filter_map(|p| items.get(p).map(|item| (p.as_str(), item)))
            .collect();
        if paths.is_empty() {
            return None;
        }
        let lookup = |names: &'a [String], section: Option<&'a Map<String, Value>>| {
            names
                .iter()
                .filter_map(move |n| section.and_then(|m| m.get(n)).map(|v| (n.as_str(), v)))
        };
        if paths.len() == spec.paths.len() {
            return Some(Kept {
                paths,
                definitions: lookup(&spec.definitions, view.definitions).collect(),
                parameters: lookup(&spec.parameters, view.parameters).collect(),
            });
        }
        // Some paths were taken by earlier documents: drop what only they used.
        let items: Vec<&'a Value> = paths.iter().map(|(_, v)| *v).collect();
        let after = kept_closure(
            view,
            &items,
            |k| spec.used_definitions.contains(k),
            |k| spec.used_parameters.contains(k),
        );
        let definitions = lookup(&spec.definitions, view.definitions)
            .filter(|(k, _)| after.definitions.contains(k) || !spec.used_definitions.contains(*k))
            .collect();
        let parameters = lookup(&spec.parameters, view.parameters)
            .filter(|(k, _)| after.parameters.contains(k) || !spec.used_parameters.contains(*k))
            .collect();
        Some(Kept {
            paths,
            definitions,
            parameters,
        })
    }

    /// A definition whose name is taken by a different schema (ignoring GVKs) becomes
    /// `<name>_v2`, `_v3`, …, reusing an existing twin that is equal.
    fn rename_definitions(&self, kept: &Kept<'a>, renames: &mut Renames) {
        let mut source_names: Option<HashSet<&str>> = None;
        let mut assigned: HashSet<String> = HashSet::new();
        for (name, value) in &kept.definitions {
            let Some(existing) = self.definitions.get(*name) else {
                continue;
            };
            if equal_ignoring_gvk(existing.value, value) {
                continue;
            }
            let names = source_names
                .get_or_insert_with(|| kept.definitions.iter().map(|(k, _)| *k).collect());
            let target = pick_name(
                name,
                |candidate| {
                    self.definitions
                        .get(candidate)
                        .map(|d| equal_ignoring_gvk(d.value, value))
                },
                |candidate| assigned.contains(candidate) || names.contains(candidate),
            );
            assigned.insert(target.clone());
            renames.insert(
                format!("{DEFINITION_PREFIX}{name}"),
                format!("{DEFINITION_PREFIX}{target}"),
            );
        }
    }

    /// Shared parameters follow the same scheme, compared for plain equality.
    fn rename_parameters(&self, kept: &Kept<'a>, renames: &mut Renames) {
        let mut source_names: Option<HashSet<&str>> = None;
        let mut assigned: HashSet<String> = HashSet::new();
        for (name, value) in &kept.parameters {
            let Some((_, existing)) = self.parameters.get(*name) else {
                continue;
            };
            if *existing == *value {
                continue;
            }
            let names = source_names
                .get_or_insert_with(|| kept.parameters.iter().map(|(k, _)| *k).collect());
            let target = pick_name(
                name,
                |candidate| self.parameters.get(candidate).map(|(_, p)| *p == *value),
                |candidate| assigned.contains(candidate) || names.contains(candidate),
            );
            assigned.insert(target.clone());
            renames.insert(
                format!("{PARAMETER_PREFIX}{name}"),
                format!("{PARAMETER_PREFIX}{target}"),
            );
        }
    }
}

/// The name `name` takes in the result, after this source's renames.
fn renamed<'a>(renames: &Renames, prefix: &str, name: &'a str) -> Cow<'a, str> {
    if renames.is_empty() {
        return Cow::Borrowed(name);
    }
    match renames.get(&format!("{prefix}{name}")) {
        Some(new_ref) => Cow::Owned(new_ref.strip_prefix(prefix).unwrap_or(new_ref).to_owned()),
        None => Cow::Borrowed(name),
    }
}

/// Upstream's renaming: walk `_v2`, `_v3`, … while taken in the result; reuse a taken name whose
/// content is equal (`existing` returns `Some(equal)` for taken names); otherwise continue past
/// names already used by this source, and take the first free one.
fn pick_name(
    name: &str,
    existing: impl Fn(&str) -> Option<bool>,
    used_by_source: impl Fn(&str) -> bool,
) -> String {
    let mut i = 2u32;
    let mut candidate = format!("{name}_v{i}");
    while let Some(equal) = existing(&candidate) {
        if equal {
            return candidate;
        }
        i += 1;
        candidate = format!("{name}_v{i}");
    }
    while used_by_source(&candidate) || existing(&candidate).is_some() {
        i += 1;
        candidate = format!("{name}_v{i}");
    }
    candidate
}

/// Deep equality that ignores `x-kubernetes-group-version-kind` at the definition's top level.
pub(crate) fn equal_ignoring_gvk(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let count = |m: &Map<String, Value>| m.len() - usize::from(m.contains_key(GVK_KEY));
            count(a) == count(b)
                && a.iter()
                    .filter(|(k, _)| *k != GVK_KEY)
                    .all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    }
}

/// The union of two GVK lists, sorted by `group/version.kind`, when `incoming` adds to
/// `existing` (or `existing` has none); `None` when nothing changes. Lists were checked to be
/// arrays when prepared; anything else counts as empty.
fn merge_gvks(existing: Option<&Value>, incoming: Option<&Value>) -> Option<Value> {
    let incoming = incoming?;
    let Some(existing) = existing else {
        return Some(incoming.clone());
    };
    let list = |v: &'_ Value| v.as_array().cloned().unwrap_or_default();
    let mut keyed: Vec<(String, Value)> = list(existing)
        .into_iter()
        .map(|g| (gvk_key(&g), g))
        .collect();
    let mut changed = false;
    for gvk in list(incoming) {
        let key = gvk_key(&gvk);
        if !keyed.iter().any(|(k, _)| *k == key) {
            keyed.push((key, gvk));
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Some(Value::Array(keyed.into_iter().map(|(_, v)| v).collect()))
}

fn gvk_key(gvk: &Value) -> String {
    let field = |k: &str| gvk.get(k).and_then(Value::as_str).unwrap_or_default();
    format!("{}/{}.{}", field("group"), field("version"), field("kind"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gvk_lists_are_unioned_and_sorted_when_changed() {
        let a = json!([{"group": "b", "version": "v1", "kind": "X"}]);
        let b = json!([{"group": "a", "version": "v1", "kind": "X"}, {"group": "b", "version": "v1", "kind": "X"}]);
        let merged = merge_gvks(Some(&a), Some(&b)).unwrap();
        assert_eq!(merged[0]["group"], "a");
        assert_eq!(merged.as_array().unwrap().len(), 2);
        assert_eq!(merge_gvks(Some(&b), Some(&a)), None);
        assert_eq!(merge_gvks(None, Some(&a)), Some(a.clone()));
        assert_eq!(merge_gvks(Some(&a), None), None);
    }

    #[test]
    fn equality_ignores_only_the_gvk_extension() {
        let a = json!({"type": "object", GVK_KEY: [{"group": "a"}]});
        assert!(equal_ignoring_gvk(&a, &json!({"type": "object"})));
        assert!(!equal_ignoring_gvk(
            &a,
            &json!({"type": "object", "x-other": 1})
        ));
    }
}
