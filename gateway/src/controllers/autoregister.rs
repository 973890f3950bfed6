//! Delegate auto-registration: reads which group-versions the delegate API server serves (its
//! legacy `/api` and `/apis`) so the registry gets one local APIService per group-version.

use std::time::Duration;

use apiagg_config::LocalGroupVersion;
use serde::Deserialize;
use tokio::time::Instant;

use super::backoff::Backoff;
use crate::backends::{Client, Clients, FetchError, Upstream};

/// Upper bound of one read of the delegate's group lists.
const TIMEOUT: Duration = Duration::from_secs(5);

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

/// The group-versions the delegate lists (`/api` then `/apis`).
async fn group_versions(client: &Client) -> Result<Vec<LocalGroupVersion>, FetchError> {
    let core: ApiVersions = client
        .get("/api", "application/json", None, TIMEOUT)
        .await?
        .json()?;
    let groups: GroupList = client
        .get("/apis", "application/json", None, TIMEOUT)
        .await?
        .json()?;
    let core = core.versions.into_iter().map(|version| LocalGroupVersion {
        group: String::new(),
        version,
    });
    let named = groups.groups.into_iter().flat_map(|g| {
        g.versions.into_iter().map(move |v| LocalGroupVersion {
            group: g.name.clone(),
            version: v.version,
        })
    });
    Ok(core.chain(named).collect())
}

/// What is known of the delegate's group-versions, and when to read them again.
pub struct DelegateGroups {
    /// The last list read; `None` until the first success.
    pub groups: Option<Vec<LocalGroupVersion>>,
    next: Instant,
    backoff: Backoff,
}

impl Default for DelegateGroups {
    fn default() -> Self {
        DelegateGroups {
            groups: None,
            next: Instant::now(),
            backoff: Backoff::new(Duration::from_millis(250), Duration::from_secs(10)),
        }
    }
}

impl DelegateGroups {
    /// When the next read is due.
    pub fn next(&self) -> Instant {
        self.next
    }

    /// Reads the list again; returns the new list when it changed. On failure the last list
    /// stays and the next read is scheduled with backoff.
    pub async fn refresh(
        &mut self,
        delegate: &Upstream,
        clients: &Clients,
        refresh: Duration,
    ) -> Option<Vec<LocalGroupVersion>> {
        let read = match clients.pick(delegate) {
            Ok(client) => group_versions(&client).await,
            Err(e) => Err(e),
        };
        match read {
            Ok(groups) => {
                self.backoff.succeeded();
                self.next = Instant::now() + refresh;
                let changed = self.groups.as_ref() != Some(&groups);
                self.groups = Some(groups.clone());
                changed.then_some(groups)
            }
            Err(e) => {
                let delay = self.backoff.failed();
                self.next = Instant::now() + delay;
                tracing::warn!("reading the delegate's groups failed (retrying in {delay:?}): {e}");
                None
            }
        }
    }
}
