//! The configuration in force: the given objects, the mandatory ones always (they replace
//! same-named given ones, as upstream's configuration maintenance does; only the `exempt`
//! level's `spec.exempt` stays as given), the suggested ones for names not given; validated
//! with v1 defaulting, FlowSchemas sorted by matching precedence then name. A FlowSchema that
//! names an unknown priority level is skipped and reported (upstream: its `Dangling`
//! condition).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};

use super::defaults;
use super::error::{ConfigError, FieldError};
use super::matcher::{Distinguisher, RuleSet};
use super::objects::Object;
use super::spec::{level, uid_of};
pub use super::spec::{LevelSpec, Mode};

const FS: &str = "FlowSchema";
pub(super) const PL: &str = "PriorityLevelConfiguration";

/// A FlowSchema after defaulting and validation.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaSpec {
    /// `metadata.name`
    pub name: String,
    /// `metadata.uid`, or one derived from the name.
    pub uid: String,
    /// `matchingPrecedence` (default 1000).
    pub precedence: i32,
    /// Index of its level in [`Compiled::levels`].
    pub level: usize,
    /// `distinguisherMethod`
    pub distinguisher: Distinguisher,
    /// `rules`
    pub rules: Vec<RuleSet>,
}

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// Every priority level, by name.
    pub levels: Vec<LevelSpec>,
    /// The usable FlowSchemas in matching order.
    pub schemas: Vec<SchemaSpec>,
    /// What was done with the input.
    pub report: Report,
}

/// What [`effective`] did with its input, for logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Priority levels in force.
    pub priority_levels: usize,
    /// FlowSchemas in force.
    pub flow_schemas: usize,
    /// Suggested objects added because no object of their name was given.
    pub suggested_added: usize,
    /// Given mandatory objects whose spec was replaced (`"FlowSchema exempt"`).
    pub overridden: Vec<String>,
    /// FlowSchemas skipped because their priority level does not exist, with the level.
    pub dangling: Vec<(String, String)>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} priority levels, {} flow schemas ({} suggested added)",
            self.priority_levels, self.flow_schemas, self.suggested_added
        )?;
        for name in &self.overridden {
            write!(f, "; {name}: the mandatory spec replaces the given one")?;
        }
        for (schema, level) in &self.dangling {
            write!(
                f,
                "; FlowSchema {schema:?} skipped: priority level {level:?} does not exist"
            )?;
        }
        Ok(())
    }
}

/// The effective configuration of `objects` (see the module documentation).
pub fn effective(objects: Vec<Object>) -> Result<Compiled, ConfigError> {
    effective_with(objects, true)
}

/// The effective configuration of a cluster's objects: as [`effective`], without adding the
/// suggested objects the cluster lacks. The cluster's kube-apiserver keeps its own suggested
/// set (its release's, which may have dropped one of ours) and honours their deletion.
pub fn from_cluster(objects: Vec<Object>) -> Result<Compiled, ConfigError> {
    effective_with(objects, false)
}

fn effective_with(objects: Vec<Object>, add_suggested: bool) -> Result<Compiled, ConfigError> {
    let mut levels = BTreeMap::new();
    let mut schemas = BTreeMap::new();
    for object in objects {
        let name = object.name().to_string();
        if name.is_empty() {
            let error = FieldError::required("metadata.name");
            return Err(invalid(object.kind(), "", error));
        }
        let kind = object.kind();
        let taken = match object {
            Object::FlowSchema(fs) => schemas.insert(name.clone(), fs).is_some(),
            Object::PriorityLevel(pl) => levels.insert(name.clone(), pl).is_some(),
        };
        if taken {
            return Err(ConfigError::Duplicate { kind, name });
        }
    }
    let mut report = Report::default();
    for object in defaults::mandatory() {
        match object {
            Object::FlowSchema(mut fs) => {
                let name = fs.metadata.name.clone().unwrap_or_default();
                if let Some(given) = schemas.remove(&name) {
                    if given.spec != fs.spec {
                        report.overridden.push(format!("{FS} {name}"));
                    }
                    fs.metadata.uid = given.metadata.uid;
                }
                schemas.insert(name, fs);
            }
            Object::PriorityLevel(mut pl) => {
                let name = pl.metadata.name.clone().unwrap_or_default();
                if let Some(given) = levels.remove(&name) {
                    keep_exempt_settings(&given, &mut pl);
                    if given.spec != pl.spec {
                        report.overridden.push(format!("{PL} {name}"));
                    }
                    pl.metadata.uid = given.metadata.uid;
                }
                levels.insert(name, pl);
            }
        }
    }
    for object in defaults::suggested().into_iter().filter(|_| add_suggested) {
        let name = object.name().to_string();
        let added = match object {
            Object::FlowSchema(fs) => schemas.try_insert_absent(name, fs),
            Object::PriorityLevel(pl) => levels.try_insert_absent(name, pl),
        };
        report.suggested_added += usize::from(added);
    }
    let levels: Vec<LevelSpec> = levels
        .into_iter()
        .map(|(name, pl)| level(name, &pl))
        .collect::<Result<_, _>>()?;
    let mut compiled = Vec::new();
    for (name, fs) in schemas {
        let (spec, level) = schema(name, &fs, &levels)?;
        match spec {
            Some(spec) => compiled.push(spec),
            None => report
                .dangling
                .push((fs.metadata.name.unwrap_or_default(), level)),
        }
    }
    compiled.sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
    report.priority_levels = levels.len();
    report.flow_schemas = compiled.len();
    Ok(Compiled {
        levels,
        schemas: compiled,
        report,
    })
}

/// Upstream lets users change the mandatory `exempt` level's `spec.exempt` (its shares and
/// lendable percent), not the rest of it.
fn keep_exempt_settings(
    given: &PriorityLevelConfiguration,
    builtin: &mut PriorityLevelConfiguration,
) {
    let given = given.spec.as_ref().and_then(|s| s.exempt.as_ref());
    let builtin = builtin.spec.as_mut().and_then(|s| s.exempt.as_mut());
    if let (Some(given), Some(builtin)) = (given, builtin) {
        if given.nominal_concurrency_shares.is_some() {
            builtin.nominal_concurrency_shares = given.nominal_concurrency_shares;
        }
        if given.lendable_percent.is_some() {
            builtin.lendable_percent = given.lendable_percent;
        }
    }
}

trait InsertAbsent<V> {
    fn try_insert_absent(&mut self, key: String, value: V) -> bool;
}

impl<V> InsertAbsent<V> for BTreeMap<String, V> {
    fn try_insert_absent(&mut self, key: String, value: V) -> bool {
        match self.entry(key) {
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(value);
                true
            }
            std::collections::btree_map::Entry::Occupied(_) => false,
        }
    }
}

pub(super) fn invalid(kind: &'static str, name: &str, error: FieldError) -> ConfigError {
    ConfigError::Invalid {
        kind,
        name: name.to_string(),
        error,
    }
}

/// The schema compiled, or `None` (with the level's name) when its level does not exist.
fn schema(
    name: String,
    fs: &FlowSchema,
    levels: &[LevelSpec],
) -> Result<(Option<SchemaSpec>, String), ConfigError> {
    let bad = |error: FieldError| invalid(FS, &name, error);
    let spec = fs
        .spec
        .as_ref()
        .ok_or_else(|| bad(FieldError::required("spec")))?;
    let uid = uid_of(FS, &name, fs.metadata.uid.as_deref()).map_err(bad)?;
    let precedence = spec.matching_precedence.unwrap_or(1000);
    if !(1..=10000).contains(&precedence) {
        return Err(bad(FieldError::invalid(
            "spec.matchingPrecedence",
            precedence,
            "must be between 1 and 10000, inclusive",
        )));
    }
    let level_name = spec.priority_level_configuration.name.clone();
    if level_name.is_empty() {
        return Err(bad(FieldError::required(
            "spec.priorityLevelConfiguration.name",
        )));
    }
    let distinguisher = match spec.distinguisher_method.as_ref().map(|d| d.type_.as_str()) {
        None => Distinguisher::None,
        Some("ByUser") => Distinguisher::ByUser,
        Some("ByNamespace") => Distinguisher::ByNamespace,
        Some(other) => {
            return Err(bad(FieldError::unsupported(
                "spec.distinguisherMethod.type",
                other,
                &["ByNamespace", "ByUser"],
            )))
        }
    };
    let rules = spec
        .rules
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| RuleSet::compile(r).map_err(|e| bad(e.under(&format!("spec.rules[{i}]")))))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(level) = levels.iter().position(|l| l.name == level_name) else {
        return Ok((None, level_name));
    };
    let spec = SchemaSpec {
        name,
        uid,
        precedence,
        level,
        distinguisher,
        rules,
    };
    Ok((Some(spec), level_name))
}
