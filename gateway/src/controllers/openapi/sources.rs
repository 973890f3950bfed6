//! What the controller knows of each source between rounds, and one source's download.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use apiagg_openapi_merge::{v3_key, PreparedV2, SourceDoc, V2Inputs, V2Served};
use tokio::time::Instant;

use super::download::{prepare_local, prepare_remote, Download, Error, V2Answer, V2State, V3State};
use crate::backends::Upstream;
use crate::controllers::backoff::Backoff;
use crate::controllers::targets::{ApiRef, ServiceKey, Target};

/// What is known about the delegate.
#[derive(Default)]
pub struct LocalSource {
    /// Which delegate this is (its state is dropped when the delegate changes).
    pub identity: String,
    pub v2: V2State,
    pub spec: Option<Arc<PreparedV2>>,
    pub v3: V3State,
    pub backoff: Backoff,
}

/// What is known about one backend Service.
#[derive(Default)]
pub struct ServiceSource {
    pub v2: V2State,
    /// The last accepted document (prepared again for APIServices added later).
    pub doc: Option<Arc<SourceDoc>>,
    /// Prepared document per APIService name.
    pub specs: HashMap<String, Arc<PreparedV2>>,
    pub v3: V3State,
    pub backoff: Backoff,
}

/// Everything carried between rounds.
#[derive(Default)]
pub struct Sources {
    pub local: Option<LocalSource>,
    pub services: HashMap<ServiceKey, ServiceSource>,
    /// The inputs of the published v2 document and the document itself.
    pub v2_inputs: Option<V2Inputs>,
    pub v2: Option<Arc<V2Served>>,
}

impl Sources {
    /// The earliest retry of a failing source.
    pub fn next_retry(&self) -> Option<Instant> {
        let local = self.local.as_ref().and_then(|l| l.backoff.retry_at);
        self.services
            .values()
            .filter_map(|s| s.backoff.retry_at)
            .chain(local)
            .min()
    }
}

pub fn delegate_identity(delegate: &Upstream) -> String {
    let endpoints: Vec<&str> = delegate
        .endpoints
        .iter()
        .map(|e| e.authority.as_str())
        .collect();
    format!("{} {}", delegate.server_name, endpoints.join(","))
}

/// Downloads one Service's v2 document and prepares it for its APIServices.
async fn refresh_service_v2(
    download: &Download<'_>,
    target: &Target,
    source: &mut ServiceSource,
) -> Result<(), Error> {
    source
        .specs
        .retain(|name, _| target.apiservices.iter().any(|a| &a.name == name));
    match source.v2.fetch(download).await? {
        V2Answer::Missing => {
            source.v2.clear();
            source.doc = None;
            source.specs.clear();
            Ok(())
        }
        V2Answer::New { etag, hash, doc } => {
            let group_versions = target
                .apiservices
                .iter()
                .map(|a| (a.group.clone(), a.version.clone()))
                .collect();
            let specs = prepare_remote(Arc::clone(&doc), group_versions).await?;
            source.v2.accept(etag, hash);
            source.doc = Some(doc);
            source.specs = target
                .apiservices
                .iter()
                .map(|a| a.name.clone())
                .zip(specs)
                .collect();
            Ok(())
        }
        V2Answer::Unchanged => {
            // APIServices added behind an unchanged document are prepared from it.
            let Some(doc) = source.doc.clone() else {
                return Ok(());
            };
            let missing: Vec<&ApiRef> = target
                .apiservices
                .iter()
                .filter(|a| !source.specs.contains_key(&a.name))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            let group_versions = missing
                .iter()
                .map(|a| (a.group.clone(), a.version.clone()))
                .collect();
            let specs = prepare_remote(doc, group_versions).await?;
            for (a, spec) in missing.into_iter().zip(specs) {
                source.specs.insert(a.name.clone(), spec);
            }
            Ok(())
        }
    }
}

/// Downloads everything one Service offers for its APIServices.
pub async fn refresh_service(
    download: &Download<'_>,
    target: &Target,
    source: &mut ServiceSource,
) -> Result<(), Error> {
    let mut errors = Vec::new();
    if download.v2 {
        if let Err(e) = refresh_service_v2(download, target, source).await {
            errors.push(e);
        }
    }
    let keys: HashSet<String> = target
        .apiservices
        .iter()
        .map(|a| v3_key(&a.group, &a.version))
        .collect();
    if let Err(e) = source.v3.fetch(download, |k| keys.contains(k)).await {
        errors.push(e);
    }
    Error::all(errors)
}

/// Downloads the delegate's documents.
pub async fn refresh_local(download: &Download<'_>, source: &mut LocalSource) -> Result<(), Error> {
    let mut errors = Vec::new();
    let v2 = match download.v2 {
        true => Some(source.v2.fetch(download).await),
        false => None,
    };
    match v2 {
        None | Some(Ok(V2Answer::Unchanged)) => {}
        Some(Ok(V2Answer::Missing)) => {
            source.v2.clear();
            source.spec = None;
        }
        Some(Ok(V2Answer::New { etag, hash, doc })) => match prepare_local(doc).await {
            Ok(spec) => {
                source.v2.accept(etag, hash);
                source.spec = Some(spec);
            }
            Err(e) => errors.push(e),
        },
        Some(Err(e)) => errors.push(e),
    }
    if let Err(e) = source.v3.fetch(download, |_| true).await {
        errors.push(e);
    }
    Error::all(errors)
}
