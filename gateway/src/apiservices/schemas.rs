//! The schema of `apiregistration.k8s.io/v1` APIService and its list, as kube-apiserver
//! publishes it, for apiagg's own OpenAPI documents.

use serde_json::{json, Value};

/// Definition prefix of the group's kinds.
pub(super) const PREFIX: &str = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1";
/// Definition prefix of the meta kinds.
pub(super) const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

/// `x-kubernetes-group-version-kind` of a kind of the group.
pub(super) fn gvk(kind: &str) -> Value {
    json!({"group": "apiregistration.k8s.io", "version": "v1", "kind": kind})
}

/// Schemas by name; `$ref`s are written as `{ref:Name}` and rewritten per format.
pub(super) fn schemas() -> Vec<(String, Value)> {
    let s = |kind: &str| format!("{{ref:{PREFIX}.{kind}}}");
    let m = |kind: &str| format!("{{ref:{META}.{kind}}}");
    let string = |d: &str| json!({"type": "string", "description": d});
    let time = |d: &str| json!({"type": "string", "format": "date-time", "description": d});
    let int = |d: &str| json!({"type": "integer", "format": "int32", "description": d});
    vec![
        (
            format!("{PREFIX}.APIService"),
            json!({
                "description": "APIService represents a server for a particular GroupVersion. Name must be \"version.group\".",
                "type": "object",
                "properties": {
                    "apiVersion": string("APIVersion of this representation: apiregistration.k8s.io/v1."),
                    "kind": string("Kind of this object: APIService."),
                    "metadata": {"$ref": m("ObjectMeta"), "description": "Standard object metadata."},
                    "spec": {"$ref": s("APIServiceSpec"), "description": "How to reach and order the API server of the group-version."},
                    "status": {"$ref": s("APIServiceStatus"), "description": "The last observed status of the APIService."},
                },
                "x-kubernetes-group-version-kind": [gvk("APIService")],
            }),
        ),
        (
            format!("{PREFIX}.APIServiceList"),
            json!({
                "description": "APIServiceList is a list of APIService objects.",
                "type": "object", "required": ["items"],
                "properties": {
                    "apiVersion": string("APIVersion of this representation."),
                    "kind": string("Kind of this object: APIServiceList."),
                    "metadata": {"$ref": m("ListMeta"), "description": "Standard list metadata."},
                    "items": {"type": "array", "items": {"$ref": s("APIService")}, "description": "The APIServices."},
                },
                "x-kubernetes-group-version-kind": [gvk("APIServiceList")],
            }),
        ),
        (
            format!("{PREFIX}.APIServiceSpec"),
            json!({
                "description": "APIServiceSpec says where the API server of a group-version is and how it is ordered in discovery.",
                "type": "object", "required": ["groupPriorityMinimum", "versionPriority"],
                "properties": {
                    "service": {"$ref": s("ServiceReference"), "description": "The Service of the API server; none means the group-version is served locally."},
                    "group": string("The API group name this server hosts."),
                    "version": string("The API version this server hosts, e.g. v1."),
                    "insecureSkipTLSVerify": {"type": "boolean", "description": "Do not verify the serving certificate of the API server."},
                    "caBundle": {"type": "string", "format": "byte", "description": "PEM CA bundle that verifies the API server's serving certificate.", "x-kubernetes-list-type": "atomic"},
                    "groupPriorityMinimum": int("Priority of the group (1 to 20000); higher groups come first."),
                    "versionPriority": int("Priority of this version within its group (1 to 1000); higher versions come first."),
                },
            }),
        ),
        (
            format!("{PREFIX}.ServiceReference"),
            json!({
                "description": "ServiceReference names a Service.",
                "type": "object",
                "properties": {
                    "namespace": string("Namespace of the Service."),
                    "name": string("Name of the Service."),
                    "port": int("Port of the Service; 443 when omitted. Must be 1 to 65535."),
                },
            }),
        ),
        (
            format!("{PREFIX}.APIServiceStatus"),
            json!({
                "description": "APIServiceStatus holds the conditions of an APIService.",
                "type": "object",
                "properties": {
                    "conditions": {"type": "array", "items": {"$ref": s("APIServiceCondition")},
                        "description": "Current service state of the APIService.",
                        "x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map",
                        "x-kubernetes-patch-merge-key": "type", "x-kubernetes-patch-strategy": "merge"},
                },
            }),
        ),
        (
            format!("{PREFIX}.APIServiceCondition"),
            json!({
                "description": "APIServiceCondition describes the state of an APIService at a point in time.",
                "type": "object", "required": ["type", "status"],
                "properties": {
                    "type": string("Type of the condition: Available."),
                    "status": string("True, False or Unknown."),
                    "lastTransitionTime": time("When the condition last changed status."),
                    "reason": string("A CamelCase reason for the last transition."),
                    "message": string("A human-readable message about the last transition."),
                },
            }),
        ),
        (
            format!("{META}.ObjectMeta"),
            json!({
                "description": "ObjectMeta is the metadata every persisted resource has.",
                "type": "object",
                "properties": {
                    "name": string("Name, unique for the resource."),
                    "generateName": string("Prefix for a generated name."),
                    "namespace": string("Namespace (empty for cluster-scoped resources)."),
                    "uid": string("Unique identifier set by the server."),
                    "resourceVersion": string("Version of the object, for optimistic concurrency and watches."),
                    "generation": {"type": "integer", "format": "int64", "description": "Sequence number of spec changes."},
                    "creationTimestamp": time("When the object was created."),
                    "deletionTimestamp": time("When the object will be deleted (set when deletion is requested)."),
                    "deletionGracePeriodSeconds": {"type": "integer", "format": "int64", "description": "Seconds allowed to terminate gracefully."},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Labels for selection."},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Unstructured key-value data."},
                    "finalizers": {"type": "array", "items": {"type": "string"}, "description": "Must be empty before the object is deleted.", "x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"},
                    "ownerReferences": {"type": "array", "items": {"type": "object"}, "description": "Objects this object depends on.", "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge"},
                    "managedFields": {"type": "array", "items": {"type": "object"}, "description": "Which manager owns which fields."},
                },
            }),
        ),
        (
            format!("{META}.ListMeta"),
            json!({
                "description": "ListMeta is the metadata of lists.",
                "type": "object",
                "properties": {
                    "resourceVersion": string("Version of the list, for watches."),
                    "continue": string("Token to get the next page of a limited list."),
                    "remainingItemCount": {"type": "integer", "format": "int64", "description": "Items not in this page, when known."},
                },
            }),
        ),
        (
            format!("{META}.Status"),
            json!({
                "description": "Status is the answer of calls that do not return an object.",
                "type": "object",
                "properties": {
                    "kind": string("Status"), "apiVersion": string("v1"),
                    "status": string("Success or Failure."), "message": string("Description of the status."),
                    "reason": string("Machine-readable reason."), "code": int("HTTP status code."),
                    "details": {"type": "object", "description": "Extended data of the reason."},
                },
            }),
        ),
    ]
}
