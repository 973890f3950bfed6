//! `$ref` names and renames (which entries a reference reaches is resolved in [`super::source`]).

use std::collections::HashMap;

/// Prefix of a reference to a definition.
pub(crate) const DEFINITION_PREFIX: &str = "#/definitions/";
/// Prefix of a reference to a shared parameter.
pub(crate) const PARAMETER_PREFIX: &str = "#/parameters/";

/// Renames for one source document: full old reference → full new reference.
pub(crate) type Renames = HashMap<String, String>;
