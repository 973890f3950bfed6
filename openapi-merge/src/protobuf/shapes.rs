//! Hand-written encoders of the gnostic messages whose JSON shape is not a plain key table
//! (oneofs, maps of named messages, `$ref` alternatives, security schemes).

use serde_json::{Map, Value};

use super::schema::Kind::*;
use super::schema::*;
use super::{
    bytes_field, field, message_body, named_entries, nested, string_field, tag, vendor_extension,
};

/// `AdditionalPropertiesItem`: a schema (1) or a boolean (2).
pub(super) fn additional_properties(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Bool(b) => {
            tag(2, 0, out);
            out.push(u8::from(*b));
        }
        Value::Object(map) => nested(1, out, |o| message_body(map, &SCHEMA, o)),
        _ => {}
    }
}

/// `TypeItem`: one or more type names.
pub(super) fn type_item(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::String(_) => string_field(1, value, out),
        Value::Array(items) => items.iter().for_each(|v| string_field(1, v, out)),
        _ => {}
    }
}

/// `ItemsItem`: one schema or a list of them.
pub(super) fn items_item(value: &Value, out: &mut Vec<u8>) {
    let one = |v: &Value, o: &mut Vec<u8>| {
        if let Value::Object(map) = v {
            nested(1, o, |o| message_body(map, &SCHEMA, o));
        }
    };
    match value {
        Value::Array(items) => items.iter().for_each(|v| one(v, out)),
        _ => one(value, out),
    }
}

/// `repeated Schema all_of`.
pub(super) fn all_of(number: u32, value: &Value, out: &mut Vec<u8>) {
    for v in value.as_array().into_iter().flatten() {
        if let Value::Object(map) = v {
            nested(number, out, |o| message_body(map, &SCHEMA, o));
        }
    }
}

/// `SchemaItem`: a file schema (2) when `type` is `file`, else a schema (1).
pub(super) fn schema_item(value: &Value, out: &mut Vec<u8>) {
    if let Value::Object(map) = value {
        if map.get("type").and_then(Value::as_str) == Some("file") {
            nested(2, out, |o| message_body(map, &FILE_SCHEMA, o));
        } else {
            nested(1, out, |o| message_body(map, &SCHEMA, o));
        }
    }
}

/// `Examples`: named `Any` values.
pub(super) fn examples(value: &Value, out: &mut Vec<u8>) {
    if let Value::Object(map) = value {
        named_entries(map, &Any, 1, out);
    }
}

/// `Parameter`: body (1) or non-body (2) by `in`.
pub(super) fn parameter(value: &Value, out: &mut Vec<u8>) {
    let Value::Object(map) = value else {
        return;
    };
    let location = map.get("in").and_then(Value::as_str).unwrap_or("");
    let (number, desc) = match location {
        "body" => return nested(1, out, |o| message_body(map, &BODY_PARAMETER, o)),
        "header" => (1, &HEADER_OR_PATH_PARAMETER),
        "formData" => (2, &QUERY_OR_FORM_PARAMETER),
        "query" => (3, &QUERY_OR_FORM_PARAMETER),
        _ => (4, &HEADER_OR_PATH_PARAMETER),
    };
    nested(2, out, |o| {
        nested(number, o, |o| message_body(map, desc, o))
    });
}

/// `JsonReference{_ref = 1, description = 2}` when `value` is a `$ref`.
pub(super) fn json_reference(map: &Map<String, Value>, number: u32, out: &mut Vec<u8>) -> bool {
    let Some(reference) = map.get("$ref") else {
        return false;
    };
    nested(number, out, |o| {
        string_field(1, reference, o);
        if let Some(d) = map.get("description") {
            string_field(2, d, o);
        }
    });
    true
}

/// `repeated ParametersItem`: a reference (2) or a parameter (1).
pub(super) fn parameters_items(number: u32, value: &Value, out: &mut Vec<u8>) {
    for v in value.as_array().into_iter().flatten() {
        if let Value::Object(map) = v {
            nested(number, out, |o| {
                if !json_reference(map, 2, o) {
                    nested(1, o, |o| parameter(v, o));
                }
            });
        }
    }
}

/// A `Response` message body.
pub(super) fn response_message(value: &Value, out: &mut Vec<u8>) {
    if let Value::Object(map) = value {
        message_body(map, &RESPONSE, out);
    }
}

/// `Responses`: `response_code` (1) entries of `ResponseValue`, extensions at 2.
pub(super) fn responses(value: &Value, out: &mut Vec<u8>) {
    let Value::Object(map) = value else {
        return;
    };
    for (code, v) in map {
        if code.starts_with("x-") {
            vendor_extension(2, code, v, out);
            continue;
        }
        let Value::Object(inner) = v else {
            continue;
        };
        nested(1, out, |o| {
            bytes_field(1, code.as_bytes(), o);
            nested(2, o, |o| {
                if !json_reference(inner, 2, o) {
                    nested(1, o, |o| message_body(inner, &RESPONSE, o));
                }
            });
        });
    }
}

/// `Paths`: extensions at 1, `NamedPathItem` entries at 2.
pub(super) fn paths(value: &Value, out: &mut Vec<u8>) {
    let Value::Object(map) = value else {
        return;
    };
    for (path, v) in map {
        path_entry(path, v, out);
    }
}

/// One entry of `Paths`: a vendor extension, or a `NamedPathItem`.
pub(super) fn path_entry(path: &str, v: &Value, out: &mut Vec<u8>) {
    if path.starts_with("x-") {
        vendor_extension(1, path, v, out);
    } else if let Value::Object(item) = v {
        nested(2, out, |o| {
            bytes_field(1, path.as_bytes(), o);
            nested(2, o, |o| message_body(item, &PATH_ITEM, o));
        });
    }
}

/// `repeated SecurityRequirement`: each a map of name → `StringArray`.
pub(super) fn security_requirements(number: u32, value: &Value, out: &mut Vec<u8>) {
    for v in value.as_array().into_iter().flatten() {
        if let Value::Object(map) = v {
            nested(number, out, |o| {
                for (name, scopes) in map {
                    nested(1, o, |o| {
                        bytes_field(1, name.as_bytes(), o);
                        nested(2, o, |o| field(1, &Strings, scopes, o));
                    });
                }
            });
        }
    }
}

pub(super) static BASIC_SECURITY: Desc = desc(&[("type", 1, Str), ("description", 2, Str)], 3);
pub(super) static API_KEY_SECURITY: Desc = desc(
    &[
        ("type", 1, Str),
        ("name", 2, Str),
        ("in", 3, Str),
        ("description", 4, Str),
    ],
    5,
);
pub(super) static OAUTH2_SCOPES: Kind = Str;
pub(super) static OAUTH2_ACCESS_CODE: Desc = desc(
    &[
        ("type", 1, Str),
        ("flow", 2, Str),
        ("scopes", 3, Named(&OAUTH2_SCOPES)),
        ("authorizationUrl", 4, Str),
        ("tokenUrl", 5, Str),
        ("description", 6, Str),
    ],
    7,
);
pub(super) static OAUTH2_IMPLICIT: Desc = desc(
    &[
        ("type", 1, Str),
        ("flow", 2, Str),
        ("scopes", 3, Named(&OAUTH2_SCOPES)),
        ("authorizationUrl", 4, Str),
        ("description", 5, Str),
    ],
    6,
);
/// Password and application flows share this layout.
pub(super) static OAUTH2_TOKEN: Desc = desc(
    &[
        ("type", 1, Str),
        ("flow", 2, Str),
        ("scopes", 3, Named(&OAUTH2_SCOPES)),
        ("tokenUrl", 4, Str),
        ("description", 5, Str),
    ],
    6,
);

/// `SecurityDefinitions`: named `SecurityDefinitionsItem`s, chosen by `type` and `flow`.
pub(super) fn security_definitions(value: &Value, out: &mut Vec<u8>) {
    let Value::Object(map) = value else {
        return;
    };
    for (name, v) in map {
        let Value::Object(def) = v else {
            continue;
        };
        let kind = def.get("type").and_then(Value::as_str).unwrap_or("");
        let flow = def.get("flow").and_then(Value::as_str).unwrap_or("");
        let (number, desc) = match (kind, flow) {
            ("basic", _) => (1, &BASIC_SECURITY),
            ("apiKey", _) => (2, &API_KEY_SECURITY),
            ("oauth2", "implicit") => (3, &OAUTH2_IMPLICIT),
            ("oauth2", "password") => (4, &OAUTH2_TOKEN),
            ("oauth2", "application") => (5, &OAUTH2_TOKEN),
            ("oauth2", "accessCode") => (6, &OAUTH2_ACCESS_CODE),
            _ => continue,
        };
        nested(1, out, |o| {
            bytes_field(1, name.as_bytes(), o);
            nested(2, o, |o| nested(number, o, |o| message_body(def, desc, o)));
        });
    }
}

/// `repeated Tag`.
pub(super) fn tags(number: u32, value: &Value, out: &mut Vec<u8>) {
    for v in value.as_array().into_iter().flatten() {
        if let Value::Object(map) = v {
            nested(number, out, |o| message_body(map, &TAG, o));
        }
    }
}
