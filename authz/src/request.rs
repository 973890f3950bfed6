//! The [`Attributes`] of a request, from its one parse ([`RequestInfo`]), as kube-apiserver
//! 1.34+ fills `authorizer.AttributesRecord` (`GetAuthorizerAttributes`) and its webhook
//! authorizer turns them into a SubjectAccessReview:
//!
//! - path segments are decoded as Go's `URL.Path`; the path is kept for non-resource requests;
//! - selectors (KEP-4601) only for `list`, `watch` and `deletecollection`, and not when the verb
//!   came from the path (`/api/v1/watch/pods`, upstream's `verbViaPathPrefix`), from the first
//!   `fieldSelector` and `labelSelector` parameters (`URL.Query()[key][0]`);
//! - a selector that does not parse is dropped (upstream keeps the error beside no requirements,
//!   and the webhook sends none): selectors only narrow, so without them the check is broader;
//! - field terms `=`/`==` become `In` and `!=` `NotIn`, one value each; label requirements `=`,
//!   `==`, `in` become `In`, `!=`, `notin` `NotIn`, and `Exists`/`DoesNotExist` stay; `gt` and
//!   `lt` have no SubjectAccessReview form and are left out, and a selector left with no
//!   requirement is none (`fieldSelectorToAuthorizationAPI`, `labelSelectorToAuthorizationAPI`);
//! - no `rawSelector` is sent, only requirements.
//!
//! A query holding a pair Go's `url.ParseQuery` skips (a `;`, or an invalid `%` escape) never
//! gets here: the one parse refuses it (`InfoError::AmbiguousQuery`), so authorization never
//! sees a selector other than the one the backend reads.

use std::borrow::Cow;

use apiagg_requestinfo::{
    decode_segment, decode_value, FieldSelector, LabelOperator, LabelSelector, RequestInfo,
};

use crate::attributes::{Attributes, Operator, Requirement};

/// Verbs whose selectors are authorized (upstream's `verbsWithSelectors`).
const VERBS_WITH_SELECTORS: [&str; 3] = ["list", "watch", "deletecollection"];

/// The attributes of a request, as kube-apiserver's authorizer reads its `RequestInfo`.
pub fn attributes(info: &RequestInfo<'_>) -> Attributes {
    if !info.resource_request {
        return Attributes {
            verb: info.verb.to_string(),
            path: decode_segment(info.path).into_owned(),
            ..Attributes::default()
        };
    }
    let text = |s: &str| decode_segment(s).into_owned();
    let mut attributes = Attributes {
        verb: info.verb.to_string(),
        resource_request: true,
        path: String::new(),
        namespace: text(info.namespace),
        group: text(info.group),
        version: text(info.version),
        resource: text(info.resource),
        subresource: text(info.subresource),
        // A name from the path is still encoded; one from a field selector was decoded.
        name: match &info.name {
            Cow::Borrowed(raw) => text(raw),
            Cow::Owned(decoded) => decoded.clone(),
        },
        field_selector: None,
        label_selector: None,
    };
    if VERBS_WITH_SELECTORS.contains(&&*info.verb) && !verb_from_path(info) {
        let query = &info.query;
        attributes.field_selector = query
            .field_selector
            .and_then(|value| field_requirements(&decode_value(value)));
        attributes.label_selector = query
            .label_selector
            .and_then(|value| label_requirements(&decode_value(value)));
    }
    attributes
}

/// A (decoded) field selector's requirements as the SubjectAccessReview carries them; `None`
/// when it is empty or does not parse.
pub fn field_requirements(selector: &str) -> Option<Vec<Requirement>> {
    if selector.is_empty() || selector.len() > LabelSelector::MAX_BYTES {
        return None;
    }
    let parsed = FieldSelector::parse(selector).ok()?;
    let requirements: Vec<Requirement> = parsed
        .terms
        .into_iter()
        .map(|term| Requirement {
            key: term.field,
            operator: if term.equal {
                Operator::In
            } else {
                Operator::NotIn
            },
            values: vec![term.value],
        })
        .collect();
    (!requirements.is_empty()).then_some(requirements)
}

/// A (decoded) label selector's requirements as the SubjectAccessReview carries them (`gt` and
/// `lt` left out); `None` when it is empty, does not parse or keeps no requirement.
pub fn label_requirements(selector: &str) -> Option<Vec<Requirement>> {
    if selector.is_empty() {
        return None;
    }
    let parsed = LabelSelector::parse(selector).ok()?;
    let requirements: Vec<Requirement> = parsed
        .requirements
        .into_iter()
        .filter_map(|r| {
            let operator = match r.operator {
                LabelOperator::Equals | LabelOperator::DoubleEquals | LabelOperator::In => {
                    Operator::In
                }
                LabelOperator::NotEquals | LabelOperator::NotIn => Operator::NotIn,
                LabelOperator::Exists => Operator::Exists,
                LabelOperator::DoesNotExist => Operator::DoesNotExist,
                LabelOperator::GreaterThan | LabelOperator::LessThan => return None,
            };
            Some(Requirement {
                key: r.key,
                operator,
                values: r.values,
            })
        })
        .collect();
    (!requirements.is_empty()).then_some(requirements)
}

/// Whether the verb came from a path segment (`/api/v1/watch/…`, `/apis/g/v/watch/…`): the
/// segment after the version is `watch` or `proxy` (the parse succeeded, so it was the verb).
fn verb_from_path(info: &RequestInfo<'_>) -> bool {
    let at = if info.api_prefix == "apis" { 3 } else { 2 };
    matches!(info.segment(at), "watch" | "proxy")
}

#[cfg(test)]
mod tests;
