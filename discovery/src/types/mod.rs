//! Discovery document types with the JSON names Kubernetes uses.
//!
//! Every struct keeps fields it does not know in `extra`, so documents round-trip. Fields that
//! Kubernetes marks `omitempty` are skipped when empty; required ones are always written.

mod aggregated;
mod legacy;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

pub use aggregated::*;
pub use legacy::*;

/// `apiVersion` of the legacy discovery documents.
pub const LEGACY_API_VERSION: &str = "v1";
/// Group of the aggregated discovery types.
pub const APIDISCOVERY_GROUP: &str = "apidiscovery.k8s.io";
/// `apiVersion` of aggregated discovery v2.
pub const APIDISCOVERY_V2: &str = "apidiscovery.k8s.io/v2";
/// `apiVersion` of aggregated discovery v2beta1.
pub const APIDISCOVERY_V2BETA1: &str = "apidiscovery.k8s.io/v2beta1";
/// Kind of the aggregated discovery list.
pub const APIGROUP_DISCOVERY_LIST_KIND: &str = "APIGroupDiscoveryList";

/// Unknown fields kept for round trips.
pub type Extra = Map<String, Value>;

/// Reads `null` as the type's default (Go writes nil slices as `null`).
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
