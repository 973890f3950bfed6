//! Reads which group-versions the delegate API server serves (its legacy `/api` and `/apis`).

use std::time::Duration;

use apiagg_config::LocalGroupVersion;
use serde::Deserialize;

use crate::fetch::BackendClient;
use crate::routes::Upstream;

#[derive(Deserialize)]
struct ApiVersions {
    #[serde(default)]
    versions: Vec<String>,
}

#[derive(Deserialize)]
struct GroupList {
    #[serde(default)]
    groups: Vec<Group>,
}

#[derive(Deserialize)]
struct Group {
    name: String,
    #[serde(default)]
    versions: Vec<GroupVersion>,
}

#[derive(Deserialize)]
struct GroupVersion {
    version: String,
}

async fn get<T: for<'de> Deserialize<'de>>(
    client: &BackendClient,
    path: &str,
) -> Result<T, String> {
    let fetched = client.get(path, "application/json", None).await?;
    if fetched.status != 200 {
        return Err(format!("GET {path}: status {}", fetched.status));
    }
    serde_json::from_slice(&fetched.body).map_err(|e| format!("GET {path}: invalid document: {e}"))
}

/// The group-versions the delegate lists (`/api` then `/apis`).
pub async fn group_versions(delegate: &Upstream) -> Result<Vec<LocalGroupVersion>, String> {
    let client = BackendClient::new(delegate, 0, Duration::from_secs(5))?;
    let core: ApiVersions = get(&client, "/api").await?;
    let groups: GroupList = get(&client, "/apis").await?;
    let mut out: Vec<LocalGroupVersion> = core
        .versions
        .into_iter()
        .map(|version| LocalGroupVersion {
            group: String::new(),
            version,
        })
        .collect();
    for g in groups.groups {
        for v in g.versions {
            out.push(LocalGroupVersion {
                group: g.name.clone(),
                version: v.version,
            });
        }
    }
    Ok(out)
}
