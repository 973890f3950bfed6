//! The merge state: paths, definitions and parameters borrowed from the inputs, plus the
//! per-input reference renames applied when rendering (spec §7.3).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::refs::{reach, Renames, DEFINITION_PREFIX, PARAMETER_PREFIX};
use super::view::DocView;
use crate::error::SpecError;

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
    /// Merges one document. `prefix` (`/apis/<g>/<v>/`) restricts a remote document to its
    /// APIService's paths. On error nothing of this document is merged.
    pub fn add(&mut self, doc: &'a Value, prefix: Option<&str>) -> Result<(), SpecError> {
        let view = DocView::new(doc)?;
        let Some(kept) = self.keep(&view, prefix)? else {
            // No paths (null, or all filtered or conflicting): contributes nothing.
            self.base.get_or_insert(view.root);
            return Ok(());
        };
        let source = self.renames.len();
        let mut renames = Renames::new();
        self.rename_definitions(&kept, &mut renames);
        self.rename_parameters(&kept, &mut renames);
        let gvks = self.plan_gvk_merges(&kept, &renames)?;

        for ((name, value), gvk) in kept.definitions.iter().zip(gvks) {
            let name = renamed(&renames, DEFINITION_PREFIX, name);
            match self.definitions.get_mut(name.as_ref()) {
                Some(existing) => {
                    if gvk.is_some() {
                        existing.gvk = gvk;
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
        self.base.get_or_insert(view.root);
        Ok(())
    }

    /// Selects the paths this document contributes and the definitions and parameters that stay
    /// with them: dropping paths drops what only they used; what no path ever used is kept.
    fn keep(
        &self,
        view: &DocView<'a>,
        prefix: Option<&str>,
    ) -> Result<Option<Kept<'a>>, SpecError> {
        if view.paths.is_none() {
            return Ok(None);
        }
        let mut total = 0usize;
        let mut paths = Vec::new();
        for (path, item) in view.path_items() {
            total += 1;
            if prefix.is_none_or(|p| path.starts_with(p)) && !self.paths.contains_key(path) {
                paths.push((path, item));
            }
        }
        if paths.is_empty() {
            return Ok(None);
        }
        if paths.len() == total {
            // Nothing dropped: keep everything, but still check every reference resolves.
            let all = reach(
                view,
                paths
                    .iter()
                    .map(|(_, v)| *v)
                    .chain(view.definition_entries().map(|(_, v)| v))
                    .chain(view.parameter_entries().map(|(_, v)| v)),
            );
            if let Some(missing) = all.missing {
                return Err(dangling(missing));
            }
            return Ok(Some(Kept {
                paths,
                definitions: view.definition_entries().collect(),
                parameters: view.parameter_entries().collect(),
            }));
        }
        let before = reach(view, view.path_items().map(|(_, v)| v));
        let never_used_defs = view
            .definition_entries()
            .filter(|(k, _)| !before.definitions.contains(k));
        let never_used_params = view
            .parameter_entries()
            .filter(|(k, _)| !before.parameters.contains(k));
        let after = reach(
            view,
            paths
                .iter()
                .map(|(_, v)| *v)
                .chain(never_used_defs.map(|(_, v)| v))
                .chain(never_used_params.map(|(_, v)| v)),
        );
        if let Some(missing) = after.missing {
            return Err(dangling(missing));
        }
        Ok(Some(Kept {
            paths,
            definitions: view
                .definition_entries()
                .filter(|(k, _)| after.definitions.contains(k) || !before.definitions.contains(k))
                .collect(),
            parameters: view
                .parameter_entries()
                .filter(|(k, _)| after.parameters.contains(k) || !before.parameters.contains(k))
                .collect(),
        }))
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

    /// For each kept definition (in order), the merged GVK list to store on the existing equal
    /// definition, if it changes. Fails before anything is mutated when a list is malformed.
    fn plan_gvk_merges(
        &self,
        kept: &Kept<'a>,
        renames: &Renames,
    ) -> Result<Vec<Option<Value>>, SpecError> {
        let mut planned: HashMap<Cow<'a, str>, Value> = HashMap::new();
        let mut out = Vec::with_capacity(kept.definitions.len());
        for (name, value) in &kept.definitions {
            let target = renamed(renames, DEFINITION_PREFIX, name);
            let Some(existing) = self.definitions.get(target.as_ref()) else {
                out.push(None);
                continue;
            };
            let current = planned
                .get(target.as_ref())
                .or(existing.gvk.as_ref())
                .or_else(|| existing.value.get(GVK_KEY));
            let merged =
                merge_gvks(current, value.get(GVK_KEY)).ok_or_else(|| SpecError::MalformedGvk {
                    name: target.to_string(),
                })?;
            if let Some(merged) = &merged {
                planned.insert(target, merged.clone());
            }
            out.push(merged);
        }
        Ok(out)
    }
}

fn dangling(reference: &str) -> SpecError {
    SpecError::DanglingRef {
        reference: reference.to_owned(),
    }
}

/// The name `name` takes in the result, after this source's renames.
fn renamed<'a>(renames: &Renames, prefix: &str, name: &'a str) -> Cow<'a, str> {
    if renames.is_empty() {
        return Cow::Borrowed(name);
    }
    match renames.get(&format!("{prefix}{name}")) {
        Some(new_ref) => Cow::Owned(new_ref[prefix.len()..].to_owned()),
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

/// Union of two GVK lists, sorted by `group/version.kind` when it grew. `Some(None)`: nothing to
/// change; `None`: a list is malformed.
fn merge_gvks(existing: Option<&Value>, incoming: Option<&Value>) -> Option<Option<Value>> {
    let Some(incoming) = incoming else {
        return Some(None);
    };
    let Some(existing) = existing else {
        return Some(Some(incoming.clone()));
    };
    let (Value::Array(existing), Value::Array(incoming)) = (existing, incoming) else {
        return None;
    };
    let mut keyed: Vec<(String, &Value)> = Vec::with_capacity(existing.len() + incoming.len());
    for gvk in existing {
        keyed.push((gvk_key(gvk)?, gvk));
    }
    let mut changed = false;
    for gvk in incoming {
        let key = gvk_key(gvk)?;
        if !keyed.iter().any(|(k, _)| *k == key) {
            keyed.push((key, gvk));
            changed = true;
        }
    }
    if !changed {
        return Some(None);
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Some(Some(Value::Array(
        keyed.into_iter().map(|(_, v)| v.clone()).collect(),
    )))
}

fn gvk_key(gvk: &Value) -> Option<String> {
    let gvk = gvk.as_object()?;
    let field = |k: &str| gvk.get(k).and_then(Value::as_str).unwrap_or_default();
    Some(format!(
        "{}/{}.{}",
        field("group"),
        field("version"),
        field("kind")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gvk_lists_are_unioned_and_sorted_when_changed() {
        let a = json!([{"group": "b", "version": "v1", "kind": "X"}]);
        let b = json!([{"group": "a", "version": "v1", "kind": "X"}, {"group": "b", "version": "v1", "kind": "X"}]);
        let merged = merge_gvks(Some(&a), Some(&b)).unwrap().unwrap();
        assert_eq!(merged[0]["group"], "a");
        assert_eq!(merged.as_array().unwrap().len(), 2);
        assert_eq!(merge_gvks(Some(&b), Some(&a)), Some(None));
        assert_eq!(merge_gvks(Some(&json!("x")), Some(&a)), None);
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
