//! Authorization attributes from the request's one parse ([`RequestInfo`]): what the
//! SubjectAccessReview carries, with path segments decoded as Go's `URL.Path` decodes them.

use std::borrow::Cow;

use apiagg_requestinfo::decode_segment;

use super::*;

/// The attributes of a request, as k8s.io/apiserver's authorizer reads its `RequestInfo`.
pub fn attributes(request: &AuthzRequest<'_>) -> Attributes {
    let info = request.info;
    if !info.resource_request {
        return Attributes {
            verb: info.verb.to_string(),
            path: decode_segment(info.path).into_owned(),
            ..Attributes::default()
        };
    }
    let text = |s: &str| decode_segment(s).into_owned();
    Attributes {
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
    }
}
