//! OpenAPI v2 as gnostic protobuf (`openapi.v2.Document`, media type
//! `application/com.github.proto-openapi.spec.v2.v1.0+protobuf`), encoded from the merged JSON.
//! kubectl up to 1.27 reads `/openapi/v2` only in this form (`kubectl explain`, `apply`).
//!
//! The encoder is table driven: each message lists its JSON keys with their field numbers and
//! kinds; `x-…` keys go to the message's vendor-extension field. Free-form values (`default`,
//! `example`, `enum` items, extensions) are gnostic `Any` messages whose `yaml` field holds the
//! value as JSON text (JSON is YAML). Unknown keys are skipped.

use serde_json::{Map, Value};

/// How a JSON value maps to a protobuf field.
enum Kind {
    Str,
    Bool,
    Double,
    Int64,
    /// `repeated string`.
    Strings,
    /// gnostic `Any`.
    Any,
    /// `repeated Any` from a JSON array.
    Anys,
    /// A nested message.
    Msg(&'static Desc),
    /// A map written as a wrapper message whose field 1 repeats `Named…{name = 1, value = 2}`.
    Named(&'static Kind),
    /// Hand-written encoder of a message body (oneofs and other special shapes).
    Custom(fn(&Value, &mut Vec<u8>)),
    /// Hand-written encoder of a repeated field: writes every item as field `number`.
    Repeated(fn(u32, &Value, &mut Vec<u8>)),
}

/// A message: its fields and the number of its `vendor_extension` field, if any.
struct Desc {
    fields: &'static [(&'static str, u32, Kind)],
    vendor: Option<u32>,
}

use Kind::*;

const fn desc(fields: &'static [(&'static str, u32, Kind)], vendor: u32) -> Desc {
    Desc {
        fields,
        vendor: Some(vendor),
    }
}

static EXTERNAL_DOCS: Desc = desc(&[("description", 1, Str), ("url", 2, Str)], 3);
static CONTACT: Desc = desc(&[("name", 1, Str), ("url", 2, Str), ("email", 3, Str)], 4);
static LICENSE: Desc = desc(&[("name", 1, Str), ("url", 2, Str)], 3);
static INFO: Desc = desc(
    &[
        ("title", 1, Str),
        ("version", 2, Str),
        ("description", 3, Str),
        ("termsOfService", 4, Str),
        ("contact", 5, Msg(&CONTACT)),
        ("license", 6, Msg(&LICENSE)),
    ],
    7,
);
static XML: Desc = desc(
    &[
        ("name", 1, Str),
        ("namespace", 2, Str),
        ("prefix", 3, Str),
        ("attribute", 4, Bool),
        ("wrapped", 5, Bool),
    ],
    6,
);
static SCHEMA_KIND: Kind = Msg(&SCHEMA);
static SCHEMA: Desc = desc(
    &[
        ("$ref", 1, Str),
        ("format", 2, Str),
        ("title", 3, Str),
        ("description", 4, Str),
        ("default", 5, Any),
        ("multipleOf", 6, Double),
        ("maximum", 7, Double),
        ("exclusiveMaximum", 8, Bool),
        ("minimum", 9, Double),
        ("exclusiveMinimum", 10, Bool),
        ("maxLength", 11, Int64),
        ("minLength", 12, Int64),
        ("pattern", 13, Str),
        ("maxItems", 14, Int64),
        ("minItems", 15, Int64),
        ("uniqueItems", 16, Bool),
        ("maxProperties", 17, Int64),
        ("minProperties", 18, Int64),
        ("required", 19, Strings),
        ("enum", 20, Anys),
        ("additionalProperties", 21, Custom(additional_properties)),
        ("type", 22, Custom(type_item)),
        ("items", 23, Custom(items_item)),
        ("allOf", 24, Repeated(all_of)),
        ("properties", 25, Named(&SCHEMA_KIND)),
        ("discriminator", 26, Str),
        ("readOnly", 27, Bool),
        ("xml", 28, Msg(&XML)),
        ("externalDocs", 29, Msg(&EXTERNAL_DOCS)),
        ("example", 30, Any),
    ],
    31,
);
static FILE_SCHEMA: Desc = desc(
    &[
        ("format", 1, Str),
        ("title", 2, Str),
        ("description", 3, Str),
        ("default", 4, Any),
        ("required", 5, Strings),
        ("type", 6, Str),
        ("readOnly", 7, Bool),
        ("externalDocs", 8, Msg(&EXTERNAL_DOCS)),
        ("example", 9, Any),
    ],
    10,
);
/// `PrimitivesItems` and `Header` share this layout up to `multipleOf`.
static PRIMITIVES_ITEMS: Desc = desc(
    &[
        ("type", 1, Str),
        ("format", 2, Str),
        ("items", 3, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 4, Str),
        ("default", 5, Any),
        ("maximum", 6, Double),
        ("exclusiveMaximum", 7, Bool),
        ("minimum", 8, Double),
        ("exclusiveMinimum", 9, Bool),
        ("maxLength", 10, Int64),
        ("minLength", 11, Int64),
        ("pattern", 12, Str),
        ("maxItems", 13, Int64),
        ("minItems", 14, Int64),
        ("uniqueItems", 15, Bool),
        ("enum", 16, Anys),
        ("multipleOf", 17, Double),
    ],
    18,
);
static HEADER_KIND: Kind = Msg(&HEADER);
static HEADER: Desc = desc(
    &[
        ("type", 1, Str),
        ("format", 2, Str),
        ("items", 3, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 4, Str),
        ("default", 5, Any),
        ("maximum", 6, Double),
        ("exclusiveMaximum", 7, Bool),
        ("minimum", 8, Double),
        ("exclusiveMinimum", 9, Bool),
        ("maxLength", 10, Int64),
        ("minLength", 11, Int64),
        ("pattern", 12, Str),
        ("maxItems", 13, Int64),
        ("minItems", 14, Int64),
        ("uniqueItems", 15, Bool),
        ("enum", 16, Anys),
        ("multipleOf", 17, Double),
        ("description", 18, Str),
    ],
    19,
);
static BODY_PARAMETER: Desc = desc(
    &[
        ("description", 1, Str),
        ("name", 2, Str),
        ("in", 3, Str),
        ("required", 4, Bool),
        ("schema", 5, Msg(&SCHEMA)),
    ],
    6,
);
/// Header and path parameters (same numbering).
static HEADER_OR_PATH_PARAMETER: Desc = desc(
    &[
        ("required", 1, Bool),
        ("in", 2, Str),
        ("description", 3, Str),
        ("name", 4, Str),
        ("type", 5, Str),
        ("format", 6, Str),
        ("items", 7, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 8, Str),
        ("default", 9, Any),
        ("maximum", 10, Double),
        ("exclusiveMaximum", 11, Bool),
        ("minimum", 12, Double),
        ("exclusiveMinimum", 13, Bool),
        ("maxLength", 14, Int64),
        ("minLength", 15, Int64),
        ("pattern", 16, Str),
        ("maxItems", 17, Int64),
        ("minItems", 18, Int64),
        ("uniqueItems", 19, Bool),
        ("enum", 20, Anys),
        ("multipleOf", 21, Double),
    ],
    22,
);
/// Query and formData parameters (same numbering, with `allowEmptyValue`).
static QUERY_OR_FORM_PARAMETER: Desc = desc(
    &[
        ("required", 1, Bool),
        ("in", 2, Str),
        ("description", 3, Str),
        ("name", 4, Str),
        ("allowEmptyValue", 5, Bool),
        ("type", 6, Str),
        ("format", 7, Str),
        ("items", 8, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 9, Str),
        ("default", 10, Any),
        ("maximum", 11, Double),
        ("exclusiveMaximum", 12, Bool),
        ("minimum", 13, Double),
        ("exclusiveMinimum", 14, Bool),
        ("maxLength", 15, Int64),
        ("minLength", 16, Int64),
        ("pattern", 17, Str),
        ("maxItems", 18, Int64),
        ("minItems", 19, Int64),
        ("uniqueItems", 20, Bool),
        ("enum", 21, Anys),
        ("multipleOf", 22, Double),
    ],
    23,
);
static RESPONSE_KIND: Kind = Custom(response_message);
static RESPONSE: Desc = desc(
    &[
        ("description", 1, Str),
        ("schema", 2, Custom(schema_item)),
        ("headers", 3, Named(&HEADER_KIND)),
        ("examples", 4, Custom(examples)),
    ],
    5,
);
static OPERATION: Desc = desc(
    &[
        ("tags", 1, Strings),
        ("summary", 2, Str),
        ("description", 3, Str),
        ("externalDocs", 4, Msg(&EXTERNAL_DOCS)),
        ("operationId", 5, Str),
        ("produces", 6, Strings),
        ("consumes", 7, Strings),
        ("parameters", 8, Repeated(parameters_items)),
        ("responses", 9, Custom(responses)),
        ("schemes", 10, Strings),
        ("deprecated", 11, Bool),
        ("security", 12, Repeated(security_requirements)),
    ],
    13,
);
static PATH_ITEM: Desc = desc(
    &[
        ("$ref", 1, Str),
        ("get", 2, Msg(&OPERATION)),
        ("put", 3, Msg(&OPERATION)),
        ("post", 4, Msg(&OPERATION)),
        ("delete", 5, Msg(&OPERATION)),
        ("options", 6, Msg(&OPERATION)),
        ("head", 7, Msg(&OPERATION)),
        ("patch", 8, Msg(&OPERATION)),
        ("parameters", 9, Repeated(parameters_items)),
    ],
    10,
);
static PARAMETER_KIND: Kind = Custom(parameter);
static TAG: Desc = desc(
    &[
        ("name", 1, Str),
        ("description", 2, Str),
        ("externalDocs", 3, Msg(&EXTERNAL_DOCS)),
    ],
    4,
);
static DOCUMENT: Desc = desc(
    &[
        ("swagger", 1, Str),
        ("info", 2, Msg(&INFO)),
        ("host", 3, Str),
        ("basePath", 4, Str),
        ("schemes", 5, Strings),
        ("consumes", 6, Strings),
        ("produces", 7, Strings),
        ("paths", 8, Custom(paths)),
        ("definitions", 9, Named(&SCHEMA_KIND)),
        ("parameters", 10, Named(&PARAMETER_KIND)),
        ("responses", 11, Named(&RESPONSE_KIND)),
        ("security", 12, Repeated(security_requirements)),
        ("securityDefinitions", 13, Custom(security_definitions)),
        ("tags", 14, Repeated(tags)),
        ("externalDocs", 15, Msg(&EXTERNAL_DOCS)),
    ],
    16,
);

/// Encodes an OpenAPI v2 JSON document as a gnostic `openapi.v2.Document`.
pub fn encode_document(doc: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 << 20);
    if let Value::Object(map) = doc {
        message_body(map, &DOCUMENT, &mut out);
    }
    out
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn tag(number: u32, wire: u8, out: &mut Vec<u8>) {
    varint((u64::from(number) << 3) | u64::from(wire), out);
}

fn bytes_field(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    tag(number, 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// Writes `number` as a length-delimited field whose body `body` writes.
fn nested(number: u32, out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    body(&mut inner);
    bytes_field(number, &inner, out);
}

fn string_field(number: u32, value: &Value, out: &mut Vec<u8>) {
    if let Some(s) = value.as_str() {
        bytes_field(number, s.as_bytes(), out);
    }
}

fn any_field(number: u32, value: &Value, out: &mut Vec<u8>) {
    let text = value.to_string();
    nested(number, out, |o| bytes_field(2, text.as_bytes(), o));
}

fn vendor_extension(number: u32, name: &str, value: &Value, out: &mut Vec<u8>) {
    nested(number, out, |o| {
        bytes_field(1, name.as_bytes(), o);
        any_field(2, value, o);
    });
}

fn message_body(map: &Map<String, Value>, desc: &Desc, out: &mut Vec<u8>) {
    for (key, value) in map {
        if let Some((_, number, kind)) = desc.fields.iter().find(|(name, _, _)| name == key) {
            field(*number, kind, value, out);
        } else if let (Some(number), true) = (desc.vendor, key.starts_with("x-")) {
            vendor_extension(number, key, value, out);
        }
    }
}

fn field(number: u32, kind: &Kind, value: &Value, out: &mut Vec<u8>) {
    match kind {
        Str => string_field(number, value, out),
        Bool => {
            if let Some(b) = value.as_bool() {
                tag(number, 0, out);
                out.push(u8::from(b));
            }
        }
        Double => {
            if let Some(f) = value.as_f64() {
                tag(number, 1, out);
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
        Int64 => {
            if let Some(i) = value.as_i64() {
                tag(number, 0, out);
                varint(i as u64, out);
            }
        }
        Strings => {
            for s in value.as_array().into_iter().flatten() {
                string_field(number, s, out);
            }
        }
        Any => any_field(number, value, out),
        Anys => {
            for item in value.as_array().into_iter().flatten() {
                any_field(number, item, out);
            }
        }
        Msg(desc) => {
            if let Value::Object(map) = value {
                nested(number, out, |o| message_body(map, desc, o));
            }
        }
        Named(inner) => {
            if let Value::Object(map) = value {
                nested(number, out, |o| named_entries(map, inner, 1, o));
            }
        }
        Custom(encode) => nested(number, out, |o| encode(value, o)),
        Repeated(encode) => encode(number, value, out),
    }
}

/// `Named…{name = 1, value = 2}` entries of a map, at field `number`.
fn named_entries(map: &Map<String, Value>, kind: &Kind, number: u32, out: &mut Vec<u8>) {
    for (name, value) in map {
        nested(number, out, |o| {
            bytes_field(1, name.as_bytes(), o);
            field(2, kind, value, o);
        });
    }
}

/// `AdditionalPropertiesItem`: a schema (1) or a boolean (2).
fn additional_properties(value: &Value, out: &mut Vec<u8>) {
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
fn type_item(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::String(_) => string_field(1, value, out),
        Value::Array(items) => items.iter().for_each(|v| string_field(1, v, out)),
        _ => {}
    }
}

/// `ItemsItem`: one schema or a list of them.
fn items_item(value: &Value, out: &mut Vec<u8>) {
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
fn all_of(number: u32, value: &Value, out: &mut Vec<u8>) {
    for v in value.as_array().into_iter().flatten() {
        if let Value::Object(map) = v {
            nested(number, out, |o| message_body(map, &SCHEMA, o));
        }
    }
}

/// `SchemaItem`: a file schema (2) when `type` is `file`, else a schema (1).
fn schema_item(value: &Value, out: &mut Vec<u8>) {
    if let Value::Object(map) = value {
        if map.get("type").and_then(Value::as_str) == Some("file") {
            nested(2, out, |o| message_body(map, &FILE_SCHEMA, o));
        } else {
            nested(1, out, |o| message_body(map, &SCHEMA, o));
        }
    }
}

/// `Examples`: named `Any` values.
fn examples(value: &Value, out: &mut Vec<u8>) {
    if let Value::Object(map) = value {
        named_entries(map, &Any, 1, out);
    }
}

/// `Parameter`: body (1) or non-body (2) by `in`.
fn parameter(value: &Value, out: &mut Vec<u8>) {
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
fn json_reference(map: &Map<String, Value>, number: u32, out: &mut Vec<u8>) -> bool {
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
fn parameters_items(number: u32, value: &Value, out: &mut Vec<u8>) {
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
fn response_message(value: &Value, out: &mut Vec<u8>) {
    if let Value::Object(map) = value {
        message_body(map, &RESPONSE, out);
    }
}

/// `Responses`: `response_code` (1) entries of `ResponseValue`, extensions at 2.
fn responses(value: &Value, out: &mut Vec<u8>) {
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
fn paths(value: &Value, out: &mut Vec<u8>) {
    let Value::Object(map) = value else {
        return;
    };
    for (path, v) in map {
        if path.starts_with("x-") {
            vendor_extension(1, path, v, out);
        } else if let Value::Object(item) = v {
            nested(2, out, |o| {
                bytes_field(1, path.as_bytes(), o);
                nested(2, o, |o| message_body(item, &PATH_ITEM, o));
            });
        }
    }
}

/// `repeated SecurityRequirement`: each a map of name → `StringArray`.
fn security_requirements(number: u32, value: &Value, out: &mut Vec<u8>) {
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

static BASIC_SECURITY: Desc = desc(&[("type", 1, Str), ("description", 2, Str)], 3);
static API_KEY_SECURITY: Desc = desc(
    &[
        ("type", 1, Str),
        ("name", 2, Str),
        ("in", 3, Str),
        ("description", 4, Str),
    ],
    5,
);
static OAUTH2_SCOPES: Kind = Str;
static OAUTH2_ACCESS_CODE: Desc = desc(
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
static OAUTH2_IMPLICIT: Desc = desc(
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
static OAUTH2_TOKEN: Desc = desc(
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
fn security_definitions(value: &Value, out: &mut Vec<u8>) {
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
fn tags(number: u32, value: &Value, out: &mut Vec<u8>) {
    for v in value.as_array().into_iter().flatten() {
        if let Value::Object(map) = v {
            nested(number, out, |o| message_body(map, &TAG, o));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodes_known_bytes() {
        // swagger = "2.0" (field 1), info.title = "t" (field 2 → field 1).
        let doc = json!({"swagger": "2.0", "info": {"title": "t"}});
        assert_eq!(
            encode_document(&doc),
            vec![0x0a, 3, b'2', b'.', b'0', 0x12, 3, 0x0a, 1, b't']
        );
    }

    #[test]
    fn definitions_are_named_schemas_with_extensions_as_yaml() {
        let doc = json!({"definitions": {"A": {"type": "object", "x-k": [1]}}});
        let bytes = encode_document(&doc);
        // definitions (9) { additional_properties (1) { name "A", value (2) { type (22) {
        //   value "object" }, vendor_extension (31) { name "x-k", value { yaml "[1]" } } } } }
        let schema = [
            &[0xb2, 0x01, 8, 0x0a, 6][..],
            b"object",
            &[0xfa, 0x01, 12, 0x0a, 3],
            b"x-k",
            &[0x12, 5, 0x12, 3],
            b"[1]",
        ]
        .concat();
        let named = [&[0x0a, 1, b'A', 0x12, schema.len() as u8][..], &schema].concat();
        let definitions = [&[0x0a, named.len() as u8][..], &named].concat();
        let expected = [&[0x4a, definitions.len() as u8][..], &definitions].concat();
        assert_eq!(bytes, expected);
    }

    #[test]
    fn repeated_custom_fields_get_their_number() {
        let doc = json!({"tags": [{"name": "a"}, {"name": "b"}]});
        assert_eq!(
            encode_document(&doc),
            vec![0x72, 3, 0x0a, 1, b'a', 0x72, 3, 0x0a, 1, b'b']
        );
    }
}
