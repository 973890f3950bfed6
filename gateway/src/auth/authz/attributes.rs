//! Request attributes as k8s.io/apiserver's `requestinfo.go` derives them.

use super::*;

/// The attributes of a request, as k8s.io/apiserver's `RequestInfoFactory.NewRequestInfo`
/// derives them (`/api` and `/apis` prefixes, `api` without a group). `Err` for a path upstream
/// cannot describe either (`/api/v1/watch` with nothing after it).
pub fn attributes(request: &AuthzRequest<'_>) -> Result<Attributes, String> {
    let path = percent_decode(request.path);
    let info = Attributes {
        verb: request.method.to_ascii_lowercase(),
        path,
        ..Attributes::default()
    };
    let trimmed = info.path.trim_matches('/');
    let mut parts: Vec<&str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return Ok(info);
    }
    let grouped = parts[0] == "apis";
    parts.remove(0);
    let mut group = "";
    if grouped {
        if parts.len() < 3 {
            return Ok(info);
        }
        group = parts.remove(0);
    }
    let version = parts.remove(0);
    let mut verb = match request.method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    if matches!(parts[0], "proxy" | "watch") {
        if parts.len() < 2 {
            return Err(format!(
                "failed to create RequestInfo: unable to determine kind and namespace from url, {}",
                request.path
            ));
        }
        verb = if parts[0] == "proxy" {
            "proxy"
        } else {
            "watch"
        };
        parts.remove(0);
    }
    let mut namespace = "";
    if parts[0] == "namespaces" && parts.len() > 1 {
        namespace = parts[1];
        // `namespaces/<ns>/<resource>…`, unless it is the namespace's own subresource.
        if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
            parts.drain(..2);
        }
    }
    let (resource, mut name, subresource) = match parts.as_slice() {
        [resource, name, subresource, ..] if verb != "proxy" => (*resource, *name, *subresource),
        [resource, name, ..] => (*resource, *name, ""),
        [resource] => (*resource, "", ""),
        [] => ("", "", ""),
    };
    let mut selected_name = String::new();
    if name.is_empty() && verb == "get" {
        let (watch, field_name) = list_options(request.query);
        verb = if watch { "watch" } else { "list" };
        if let Some(n) = field_name {
            selected_name = n;
        }
    }
    if !selected_name.is_empty() {
        name = &selected_name;
    }
    if name.is_empty() && verb == "delete" {
        verb = "deletecollection";
    }
    Ok(Attributes {
        verb: verb.to_string(),
        resource_request: true,
        path: String::new(),
        namespace: namespace.to_string(),
        group: group.to_string(),
        version: version.to_string(),
        resource: resource.to_string(),
        subresource: subresource.to_string(),
        name: name.to_string(),
    })
}

/// `watch` and the `metadata.name` a `fieldSelector` pins, from a list's query (upstream's
/// `ListOptions` decoding: `watch` is true unless absent, `0` or `false`).
pub(super) fn list_options(query: Option<&str>) -> (bool, Option<String>) {
    let Some(query) = query else {
        return (false, None);
    };
    let mut watch = None;
    let mut selector = None;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "watch" if watch.is_none() => {
                watch = Some(!(value == "0" || value.eq_ignore_ascii_case("false")));
            }
            "fieldSelector" if selector.is_none() => selector = Some(value.into_owned()),
            _ => {}
        }
    }
    let name = selector.as_deref().and_then(selected_name);
    (watch.unwrap_or(false), name)
}

/// The name an exact `metadata.name=` (or `==`) term of a field selector requires, when it is
/// a valid path segment (upstream's `RequiresExactMatch` and `IsValidPathSegmentName`).
pub(super) fn selected_name(selector: &str) -> Option<String> {
    let mut found = None;
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (field, value, exact) = if let Some((f, v)) = term.split_once("!=") {
            (f, v, false)
        } else if let Some((f, v)) = term.split_once("==") {
            (f, v, true)
        } else if let Some((f, v)) = term.split_once('=') {
            (f, v, true)
        } else {
            // Not a selector upstream parses: the whole ListOptions is ignored.
            return None;
        };
        if exact && field.trim() == "metadata.name" && found.is_none() {
            found = Some(value.trim().to_string());
        }
    }
    found.filter(|n| n != "." && n != ".." && !n.contains('/') && !n.contains('%'))
}
