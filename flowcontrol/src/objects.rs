//! The configuration objects and the file loader: a multi-document YAML text of FlowSchemas
//! and PriorityLevelConfigurations (`flowcontrol.apiserver.k8s.io/v1`, also `v1beta3`, whose
//! objects have the same shape), and `List` documents of them as `kubectl get -o yaml` prints.

use std::path::Path;

use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use serde::Deserialize;
use serde_yaml_ng::Value;

use super::error::ConfigError;

/// The group-version of the objects.
pub const API_VERSION: &str = "flowcontrol.apiserver.k8s.io/v1";
/// The older version whose objects are read too (its zero `nominalConcurrencyShares` means
/// "the default", as its defaulting did).
pub const API_VERSION_V1BETA3: &str = "flowcontrol.apiserver.k8s.io/v1beta3";

/// One configuration object.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// A `FlowSchema`.
    FlowSchema(FlowSchema),
    /// A `PriorityLevelConfiguration`.
    PriorityLevel(PriorityLevelConfiguration),
}

impl Object {
    /// `metadata.name` (empty when missing).
    pub fn name(&self) -> &str {
        let meta = match self {
            Object::FlowSchema(fs) => &fs.metadata,
            Object::PriorityLevel(pl) => &pl.metadata,
        };
        meta.name.as_deref().unwrap_or("")
    }

    /// `FlowSchema` or `PriorityLevelConfiguration`.
    pub fn kind(&self) -> &'static str {
        match self {
            Object::FlowSchema(_) => "FlowSchema",
            Object::PriorityLevel(_) => "PriorityLevelConfiguration",
        }
    }
}

/// Reads a multi-document YAML file of FlowSchemas and PriorityLevelConfigurations (the file
/// source; the composition root calls it at start and on reload).
pub fn from_file(path: &Path) -> Result<Vec<Object>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_in(&text, &format!("{}: ", path.display()))
}

/// Parses a multi-document YAML text of FlowSchemas and PriorityLevelConfigurations (and
/// `List`, `FlowSchemaList`, `PriorityLevelConfigurationList` documents of them). Empty
/// documents are skipped.
#[cfg(test)]
pub fn parse_objects(yaml: &str) -> Result<Vec<Object>, ConfigError> {
    parse_in(yaml, "")
}

fn parse_in(yaml: &str, origin: &str) -> Result<Vec<Object>, ConfigError> {
    let mut out = Vec::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(yaml).enumerate() {
        let parse = |message: String| ConfigError::Parse {
            origin: origin.to_string(),
            index,
            message,
        };
        let value = Value::deserialize(document).map_err(|e| parse(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        let doc = Doc {
            origin,
            index,
            out: &mut out,
        };
        doc.add(value)?;
    }
    Ok(out)
}

/// One document being read.
struct Doc<'a> {
    origin: &'a str,
    index: usize,
    out: &'a mut Vec<Object>,
}

impl Doc<'_> {
    fn add(self, value: Value) -> Result<(), ConfigError> {
        let Doc { origin, index, out } = self;
        let error = |message: String| ConfigError::Parse {
            origin: origin.to_string(),
            index,
            message,
        };
        let Value::Mapping(mut map) = value else {
            return Err(error("not a mapping".into()));
        };
        let kind = text(&map, "kind");
        if matches!(
            kind.as_str(),
            "List" | "FlowSchemaList" | "PriorityLevelConfigurationList"
        ) {
            let items = match map.remove("items") {
                Some(Value::Sequence(items)) => items,
                None | Some(Value::Null) => Vec::new(),
                Some(_) => return Err(error("items is not a list".into())),
            };
            for item in items {
                Doc { origin, index, out }.add(item)?;
            }
            return Ok(());
        }
        let api_version = text(&map, "apiVersion");
        let beta = match api_version.as_str() {
            API_VERSION => false,
            API_VERSION_V1BETA3 => true,
            _ => {
                return Err(ConfigError::ApiVersion {
                    origin: origin.to_string(),
                    index,
                    api_version,
                })
            }
        };
        map.insert("apiVersion".into(), API_VERSION.into());
        let object = match kind.as_str() {
            "FlowSchema" => serde_yaml_ng::from_value(Value::Mapping(map))
                .map(Object::FlowSchema)
                .map_err(|e| error(format!("FlowSchema: {e}")))?,
            "PriorityLevelConfiguration" => {
                if beta {
                    zero_shares_mean_default(&mut map);
                }
                serde_yaml_ng::from_value(Value::Mapping(map))
                    .map(Object::PriorityLevel)
                    .map_err(|e| error(format!("PriorityLevelConfiguration: {e}")))?
            }
            _ => {
                return Err(ConfigError::Kind {
                    origin: origin.to_string(),
                    index,
                    kind,
                })
            }
        };
        out.push(object);
        Ok(())
    }
}

/// A string field of a mapping (empty when absent or not a string).
fn text(map: &serde_yaml_ng::Mapping, key: &str) -> String {
    map.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// v1beta3 defaulted a zero `spec.limited.nominalConcurrencyShares` to 30; v1 keeps zero.
fn zero_shares_mean_default(map: &mut serde_yaml_ng::Mapping) {
    let limited = map
        .get_mut("spec")
        .and_then(|spec| spec.get_mut("limited"))
        .and_then(Value::as_mapping_mut);
    if let Some(limited) = limited {
        if limited
            .get("nominalConcurrencyShares")
            .and_then(Value::as_i64)
            == Some(0)
        {
            limited.remove("nominalConcurrencyShares");
        }
    }
}
