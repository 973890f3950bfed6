//! Reads which group-versions the delegate API server serves (its legacy `/api` and `/apis`).

use std::time::Duration;

use apiagg_config::{DelegateConfig, LocalGroupVersion};
use serde::Deserialize;

use crate::tls;

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

/// HTTP client for the delegate.
pub struct DelegateClient {
    base: String,
    client: reqwest::Client,
}

impl DelegateClient {
    /// Builds a client that trusts the delegate as configured.
    pub fn new(config: &DelegateConfig) -> Result<DelegateClient, String> {
        let ca = config
            .ca_pem
            .as_deref()
            .map(tls::parse_ca_pem)
            .transpose()
            .map_err(|e| format!("delegate caFile: {e}"))?;
        let tls = tls::client_config(
            ca.as_deref(),
            config.insecure_skip_tls_verify,
            &[b"h2", b"http/1.1"],
        )?;
        let client = reqwest::Client::builder()
            .use_preconfigured_tls((*tls).clone())
            .timeout(Duration::from_secs(5))
            .user_agent(concat!("apiagg/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("delegate client: {e}"))?;
        Ok(DelegateClient {
            base: config.url.as_str().trim_end_matches('/').to_string(),
            client,
        })
    }

    async fn get<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T, String> {
        let url = format!("{}{path}", self.base);
        let response = self
            .client
            .get(&url)
            .header("Accept", "application/json")
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {url}: status {status}"));
        }
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("GET {url}: invalid document: {e}"))
    }

    /// The group-versions the delegate lists (`/api` then `/apis`).
    pub async fn group_versions(&self) -> Result<Vec<LocalGroupVersion>, String> {
        let core: ApiVersions = self.get("/api").await?;
        let groups: GroupList = self.get("/apis").await?;
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
}
