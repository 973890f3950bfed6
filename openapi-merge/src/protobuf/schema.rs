//! The gnostic `openapi.v2` messages: each lists its JSON keys with field numbers and kinds;
//! the few messages with oneofs or special shapes have hand-written encoders.

use serde_json::Value;

use super::shapes::*;
use Kind::*;

/// How a JSON value maps to a protobuf field.
pub(super) enum Kind {
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

/// `(JSON key, field number, kind)` of each field of a message.
pub(super) type Fields = &'static [(&'static str, u32, Kind)];

/// A message: its own fields, whether it repeats the primitive fields, and the number of its
/// `vendor_extension` field.
pub(super) struct Desc {
    fields: Fields,
    /// `Some(offset)` when the message also has the fields of [`PRIMITIVE_FIELDS`], numbered
    /// `offset` higher (gnostic's `PrimitivesItems`, `Header` and non-body parameters).
    primitives: Option<u32>,
    pub(super) vendor: u32,
}

impl Desc {
    /// The field number and kind of a JSON key, if the message has such a field.
    pub(super) fn field(&self, key: &str) -> Option<(u32, &'static Kind)> {
        let find = |fields: Fields| fields.iter().find(|(name, _, _)| *name == key);
        if let Some((_, number, kind)) = find(self.fields) {
            return Some((*number, kind));
        }
        let offset = self.primitives?;
        find(&PRIMITIVE_FIELDS).map(|(_, number, kind)| (number + offset, kind))
    }
}

/// A message with only its own fields.
pub(super) const fn desc(fields: Fields, vendor: u32) -> Desc {
    Desc {
        fields,
        primitives: None,
        vendor,
    }
}

/// A message with its own fields and [`PRIMITIVE_FIELDS`] numbered `offset` higher.
const fn with_primitives(fields: Fields, offset: u32, vendor: u32) -> Desc {
    Desc {
        fields,
        primitives: Some(offset),
        vendor,
    }
}

pub(super) static EXTERNAL_DOCS: Desc = desc(&[("description", 1, Str), ("url", 2, Str)], 3);
pub(super) static CONTACT: Desc = desc(&[("name", 1, Str), ("url", 2, Str), ("email", 3, Str)], 4);
pub(super) static LICENSE: Desc = desc(&[("name", 1, Str), ("url", 2, Str)], 3);
pub(super) static INFO: Desc = desc(
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
pub(super) static XML: Desc = desc(
    &[
        ("name", 1, Str),
        ("namespace", 2, Str),
        ("prefix", 3, Str),
        ("attribute", 4, Bool),
        ("wrapped", 5, Bool),
    ],
    6,
);
pub(super) static SCHEMA_KIND: Kind = Msg(&SCHEMA);
pub(super) static SCHEMA: Desc = desc(
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
pub(super) static FILE_SCHEMA: Desc = desc(
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
/// The fields of `PrimitivesItems`, numbered from 1; `Header` and the non-body parameter
/// messages repeat them at an offset.
static PRIMITIVE_FIELDS: [(&str, u32, Kind); 17] = [
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
];
pub(super) static PRIMITIVES_ITEMS: Desc = with_primitives(&[], 0, 18);
pub(super) static HEADER_KIND: Kind = Msg(&HEADER);
pub(super) static HEADER: Desc = with_primitives(&[("description", 18, Str)], 0, 19);
pub(super) static BODY_PARAMETER: Desc = desc(
    &[
        ("description", 1, Str),
        ("name", 2, Str),
        ("in", 3, Str),
        ("required", 4, Bool),
        ("schema", 5, Msg(&SCHEMA)),
    ],
    6,
);
/// Header and path parameters: `required`, `in`, `description`, `name`, then the primitive
/// fields from 5.
pub(super) static HEADER_OR_PATH_PARAMETER: Desc = with_primitives(
    &[
        ("required", 1, Bool),
        ("in", 2, Str),
        ("description", 3, Str),
        ("name", 4, Str),
    ],
    4,
    22,
);
/// Query and formData parameters: as header and path ones with `allowEmptyValue` at 5, then the
/// primitive fields from 6.
pub(super) static QUERY_OR_FORM_PARAMETER: Desc = with_primitives(
    &[
        ("required", 1, Bool),
        ("in", 2, Str),
        ("description", 3, Str),
        ("name", 4, Str),
        ("allowEmptyValue", 5, Bool),
    ],
    5,
    23,
);
pub(super) static RESPONSE_KIND: Kind = Custom(response_message);
pub(super) static RESPONSE: Desc = desc(
    &[
        ("description", 1, Str),
        ("schema", 2, Custom(schema_item)),
        ("headers", 3, Named(&HEADER_KIND)),
        ("examples", 4, Custom(examples)),
    ],
    5,
);
pub(super) static OPERATION: Desc = desc(
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
pub(super) static PATH_ITEM: Desc = desc(
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
pub(super) static PARAMETER_KIND: Kind = Custom(parameter);
pub(super) static TAG: Desc = desc(
    &[
        ("name", 1, Str),
        ("description", 2, Str),
        ("externalDocs", 3, Msg(&EXTERNAL_DOCS)),
    ],
    4,
);
pub(super) static DOCUMENT: Desc = desc(
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
