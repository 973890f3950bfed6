//! The API's writes as a whole: the request options (`fieldManager`, `force`,
//! `fieldValidation`) checked as kube-apiserver checks them, then the strategy, field ownership
//! (`metadata.managedFields`) and the unknown-field warnings.

use std::fmt;

use serde_json::{json, Value};

use apiagg_apis::FieldError;

use crate::error::{Result, WriteError};
use crate::managed_fields::{self, Subresource, Writer, API_VERSION, MANAGER_MAX_LENGTH};
use crate::patch::PatchKind;
use crate::prepare::{
    cannot_handle, prepare_create, prepare_status_update, prepare_update, unknown_fields,
};

/// What a write does with fields an APIService does not have (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and warn, one `Warning` header each (the default since Kubernetes 1.27).
    #[default]
    Warn,
    /// Refuse the write.
    Strict,
}

/// The kind of write, which names its options type in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH of this kind.
    Patch(PatchKind),
}

/// The checked options of one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// `fieldManager`, else the User-Agent's product name.
    pub manager: String,
    /// `force=true` (apply only).
    pub force: bool,
    /// `fieldValidation`.
    pub validation: FieldValidation,
}

/// Options kube-apiserver refuses: `Invalid` (422) on `<Kind>Options.meta.k8s.io`. Not
/// retryable: the query must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct OptionsError {
    /// `CreateOptions`, `UpdateOptions` or `PatchOptions`.
    pub kind: &'static str,
    /// Each refused option with its Status cause reason (`FieldValueRequired`, …).
    pub errors: Vec<(&'static str, FieldError)>,
}

impl fmt::Display for OptionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.errors.iter().map(|(_, e)| e.to_string()).collect();
        write!(f, "{}.meta.k8s.io \"\" is invalid: ", self.kind)?;
        match parts.as_slice() {
            [one] => write!(f, "{one}"),
            _ => write!(f, "[{}]", parts.join(", ")),
        }
    }
}

impl OptionsError {
    /// `details` of the 422 Status.
    pub fn details(&self) -> Value {
        let causes: Vec<Value> = self
            .errors
            .iter()
            .map(|(reason, e)| json!({"reason": reason, "message": e.body(), "field": e.field}))
            .collect();
        json!({"group": "meta.k8s.io", "kind": self.kind, "causes": causes})
    }
}

fn option_error(field: &str, kind: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        kind: kind.into(),
        detail: detail.into(),
    }
}

impl WriteOptions {
    /// Reads the query values of a write (`None`: absent) and the User-Agent.
    pub fn check(
        verb: Verb,
        field_manager: Option<&str>,
        force: Option<&str>,
        field_validation: Option<&str>,
        user_agent: &str,
    ) -> Result<WriteOptions, OptionsError> {
        let mut errors = Vec::new();
        let field_manager = field_manager.unwrap_or("");
        let kind = match verb {
            Verb::Create => "CreateOptions",
            Verb::Update => "UpdateOptions",
            Verb::Patch(_) => "PatchOptions",
        };
        match verb {
            Verb::Patch(PatchKind::Apply) if field_manager.is_empty() => errors.push((
                "FieldValueRequired",
                option_error(
                    "fieldManager",
                    "Required value",
                    "is required for apply patch",
                ),
            )),
            Verb::Patch(kind) if kind != PatchKind::Apply && force.is_some() => errors.push((
                "FieldValueForbidden",
                option_error(
                    "force",
                    "Forbidden",
                    "may not be specified for non-apply patch",
                ),
            )),
            _ => {}
        }
        if field_manager.len() > MANAGER_MAX_LENGTH {
            errors.push((
                "FieldValueTooLong",
                option_error(
                    "fieldManager",
                    "Too long",
                    &format!("may not be more than {MANAGER_MAX_LENGTH} bytes"),
                ),
            ));
        }
        let validation = match field_validation.unwrap_or("") {
            "Ignore" => FieldValidation::Ignore,
            "" | "Warn" => FieldValidation::Warn,
            "Strict" => FieldValidation::Strict,
            other => {
                errors.push((
                    "FieldValueNotSupported",
                    option_error(
                        "fieldValidation",
                        &format!("Unsupported value: {other:?}"),
                        r#"supported values: "", "Ignore", "Strict", "Warn""#,
                    ),
                ));
                FieldValidation::Warn
            }
        };
        if !errors.is_empty() {
            return Err(OptionsError { kind, errors });
        }
        let manager = if field_manager.is_empty() {
            managed_fields::manager_from_user_agent(user_agent)
        } else {
            field_manager.to_string()
        };
        Ok(WriteOptions {
            manager,
            force: force == Some("true"),
            validation,
        })
    }
}

/// Texts for the client's `Warning` headers, one per header (`unknown field "spec.foo"`).
type Warnings = Vec<String>;

/// An object ready for the store, and the warnings for the client.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The object to store.
    pub object: Value,
    /// One text per `Warning` header.
    pub warnings: Warnings,
}

/// How the object a write checks for unknown fields was read, which decides the words of a
/// `Strict` refusal (kube-apiserver's for each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// The request's body (create, PUT): a body kube-apiserver cannot decode (400).
    Body,
    /// A patched object: `Invalid` on `patch`, quoting the object (422).
    Patched,
    /// An applied configuration (400).
    Applied,
}

/// The unknown fields of `value` as warnings; with `Strict`, the refusal.
fn unknown(value: &Value, validation: FieldValidation, read: Read) -> Result<Warnings> {
    if validation == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let texts: Warnings = unknown_fields(value)
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect();
    if validation == FieldValidation::Strict && !texts.is_empty() {
        let why = format!("strict decoding error: {}", texts.join(", "));
        return Err(match read {
            Read::Body => cannot_handle(value, &why),
            Read::Patched => WriteError::StrictPatch {
                object: value.to_string(),
                why,
            },
            Read::Applied => WriteError::BadRequest(why),
        });
    }
    Ok(texts)
}

fn requested(body: &Value) -> Option<&Value> {
    body.get("metadata")?.get("managedFields")
}

/// A create (POST): the strategy's object, every field it sets owned by the writer.
pub fn create(body: &Value, uid: &str, now: &str, options: &WriteOptions) -> Result<Prepared> {
    let warnings = unknown(body, options.validation, Read::Body)?;
    let mut object = prepare_create(body, uid, now)?;
    let writer = Writer {
        manager: &options.manager,
        subresource: Subresource::Main,
        now,
    };
    managed_fields::update(None, &mut object, requested(body), &writer);
    Ok(Prepared { object, warnings })
}

/// An update (PUT) of the main resource or `/status`: the fields it added or changed become the
/// writer's.
pub fn update(
    old: &Value,
    body: &Value,
    subresource: Subresource,
    now: &str,
    options: &WriteOptions,
) -> Result<Prepared> {
    update_read(old, body, subresource, now, options, Read::Body)
}

/// [`update`] of an object a JSON, merge or strategic merge patch made (its `Strict` refusal is
/// a patch's).
pub fn update_patched(
    old: &Value,
    patched: &Value,
    subresource: Subresource,
    now: &str,
    options: &WriteOptions,
) -> Result<Prepared> {
    update_read(old, patched, subresource, now, options, Read::Patched)
}

fn update_read(
    old: &Value,
    body: &Value,
    subresource: Subresource,
    now: &str,
    options: &WriteOptions,
    read: Read,
) -> Result<Prepared> {
    let warnings = unknown(body, options.validation, read)?;
    let mut object = match subresource {
        Subresource::Main => prepare_update(old, body)?,
        Subresource::Status => prepare_status_update(old, body)?,
    };
    let writer = Writer {
        manager: &options.manager,
        subresource,
        now,
    };
    managed_fields::update(Some(old), &mut object, requested(body), &writer);
    Ok(Prepared { object, warnings })
}

/// A server-side apply of `body` (YAML or JSON) to `old` (`None`: it creates the object named
/// `name`, with `uid`).
pub fn apply(
    old: Option<&Value>,
    body: &[u8],
    name: &str,
    uid: &str,
    subresource: Subresource,
    now: &str,
    options: &WriteOptions,
) -> Result<Prepared> {
    let config = parse_applied(body, name)?;
    let writer = Writer {
        manager: &options.manager,
        subresource,
        now,
    };
    let merged = managed_fields::apply(old, &config, &writer, options.force)?;
    let warnings = unknown(&merged, options.validation, Read::Applied)?;
    let mut object = match (old, subresource) {
        (None, _) => prepare_create(&merged, uid, now)?,
        (Some(old), Subresource::Main) => prepare_update(old, &merged)?,
        (Some(old), Subresource::Status) => prepare_status_update(old, &merged)?,
    };
    // Ownership as the apply computed it (the strategy keeps the stored list otherwise).
    let entries = managed_fields::decode(requested(&merged)).unwrap_or_default();
    managed_fields::set_entries(&mut object, &entries);
    Ok(Prepared { object, warnings })
}

/// The applied configuration: an `apiregistration.k8s.io/v1` APIService named as the URL.
fn parse_applied(body: &[u8], name: &str) -> Result<Value> {
    let bad = |e: &dyn fmt::Display| WriteError::BadRequest(format!("error decoding YAML: {e}"));
    let text = std::str::from_utf8(body).map_err(|e| bad(&e))?;
    let config = crate::bounded::yaml_value(text, "error decoding YAML: ")?;
    if !config.is_object() {
        return Err(bad(&"the applied configuration is not an object"));
    }
    let api_version = config["apiVersion"].as_str().unwrap_or("");
    let kind = config["kind"].as_str().unwrap_or("");
    if api_version != API_VERSION || kind != "APIService" {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        return Err(WriteError::BadRequest(format!(
            "invalid object type: {group}/{version}, Kind={kind}"
        )));
    }
    let applied = config["metadata"]["name"].as_str().unwrap_or("");
    if applied != name {
        return Err(WriteError::BadRequest(format!(
            "the name of the object ({applied}) does not match the name on the URL ({name})"
        )));
    }
    Ok(config)
}
