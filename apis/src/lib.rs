//! What every apiagg crate needs to know about APIServices, and nothing else: the
//! `apiregistration.k8s.io/v1` APIService object with kube-apiserver's defaulting and validation
//! (kube-aggregator's `pkg/apis/apiregistration/validation/validation.go`), the kube-aware order
//! of versions and APIServices (k8s.io/apimachinery's `pkg/version/helpers.go`, kube-aggregator's
//! `pkg/apis/apiregistration/v1/helper/helpers.go`), the priorities kube-apiserver gives its
//! built-in groups, the content hash used for ETags and OpenAPI v3 `hash` values, the
//! `metav1.Status` failure every crate answers with, and CBOR as kube-apiserver writes it.
//!
//! Pure and small on purpose: `apiagg-discovery` and `apiagg-openapi-merge` depend on this crate
//! only, so they build without the config loader (YAML, kube-client) or the write strategy
//! (JSON Patch). The modules are private; every item has one path, at the crate root.

/// The Kubernetes minor release (`1.<minor>`) whose API apiagg serves: the discovery
/// priorities, flow-control defaults, validation messages and error negotiation are
/// kube-apiserver 1.37's. apiagg's own `/version` reports it, so that clients judge their
/// version skew against the API they get.
pub const KUBERNETES_MINOR: u32 = 37;

mod apiservice;
mod cbor;
mod content_hash;
mod priorities;
mod status;
mod version;
mod watch_list;

pub use apiservice::{
    apply_defaults, go_quote, validate, validate_update, APIService, APIServiceSpec, FieldError,
    ServiceReference, ValidationErrors, DEFAULT_SERVICE_PORT, GROUP_VERSION,
};
pub use cbor::{from_cbor, json_to_cbor, to_cbor, CborError, CBOR, SELF_DESCRIBED_CBOR};
pub use content_hash::{sha512_upper_hex, strong_etag};
pub use priorities::{builtin_priority, GROUP_PRIORITIES};
pub use status::{failure_status, failure_status_cbor, Failure, Reason};
pub use version::{compare_apiservices, compare_kube_aware, compare_versions};
pub use watch_list::{WatchListMode, WATCH_LIST_ANNOTATION};
