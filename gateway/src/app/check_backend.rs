//! `apiagg check --apiservice NAME`: one APIService's backend tested from the command line, as
//! the availability controller tests it (the TLS handshake with the APIService's CA bundle and
//! the proxy client certificate, then `GET /apis/<group>/<version>`), each endpoint's verdict
//! printed in the words its `Available` condition would carry.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::backends::{build_table, ClientIdentity, Clients, HealthBook, Names};
use crate::controllers::probe_endpoint;

/// How long one endpoint may take to answer (the probes' default).
const TIMEOUT: Duration = Duration::from_secs(5);

/// Tests the backend of the APIService `name` of the config `config`; an error when it is not
/// available (the reason printed), as its `Available` condition would be `False`.
pub fn check_backend(config: &std::path::Path, name: &str) -> anyhow::Result<()> {
    let sources = apiagg_config::Sources::read(config)
        .and_then(|s| s.parse())
        .with_context(|| format!("invalid config {}", config.display()))?;
    let registry = apiagg_config::Registry::build(&sources, &[]);
    let Some(index) = registry.entries().iter().position(|e| e.name == name) else {
        bail!("{}: no APIService {name}", config.display());
    };
    let entry = &registry.entries()[index];
    let path = format!("/apis/{}/{}", entry.group, entry.version);
    let local = matches!(entry.backend, apiagg_config::Backend::Delegate);
    let identity = match &sources.proxy_client {
        Some(proxy) => Some(ClientIdentity::load(&apiagg_config::CertSource::Files {
            cert: proxy.cert_file.clone(),
            key: proxy.key_file.clone(),
        })?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (book, names) = (HealthBook::default(), Names::default());
        let metrics = apiagg_observe::Metrics::new()?;
        let registry = Arc::new(registry);
        let table = build_table(registry, None, identity.as_ref(), &book, &metrics, &names)?;
        let Some(upstream) = table.upstreams[index].clone() else {
            let why = match table.broken.get(&index) {
                Some(why) => why.clone(),
                None if local => "a local APIService: served by the delegate".into(),
                None => "its Service has no endpoints (the `services` table lists none)".into(),
            };
            bail!("{name}: {why}");
        };
        let clients = Clients::new(1 << 20, TIMEOUT);
        let mut failed = 0;
        for (i, endpoint) in upstream.endpoints.iter().enumerate() {
            let client = clients.endpoint(&upstream, i)?;
            match probe_endpoint(&client, &endpoint.url, &path, TIMEOUT).await {
                None => println!("{name}: {}{path}: ok", endpoint.url),
                Some(message) => {
                    failed += 1;
                    println!("{name}: {message}");
                }
            }
        }
        match failed {
            0 => Ok(()),
            n => bail!(
                "{name}: {n} of {} endpoints failed",
                upstream.endpoints.len()
            ),
        }
    })
}
