//! apiagg's own OpenAPI input: the description of its APIService API, prepared once (the merge
//! sees the same `Arc` every round and is not redone for it).

use std::sync::{Arc, OnceLock};

use apiagg_openapi_merge::{LocalSpec, PreparedV2, V3Input, V3Served};
use bytes::Bytes;

use crate::apiservices::{v2_spec, v3_document, V3_KEY};

/// The v2 input, named like a delegate document.
pub fn v2() -> Option<LocalSpec> {
    static SPEC: OnceLock<Option<Arc<PreparedV2>>> = OnceLock::new();
    let spec = SPEC
        .get_or_init(|| PreparedV2::local(&v2_spec()).ok().map(Arc::new))
        .clone()?;
    Some(LocalSpec {
        name: "apiagg".into(),
        spec,
    })
}

/// The v3 document `apis/apiregistration.k8s.io/v1`.
pub fn v3() -> V3Input {
    static DOC: OnceLock<Arc<V3Served>> = OnceLock::new();
    let doc = DOC.get_or_init(|| {
        let json = Bytes::from(v3_document().to_string());
        Arc::new(V3Served::new(V3_KEY, json))
    });
    V3Input {
        name: "apiagg".into(),
        docs: vec![doc.clone()],
    }
}
