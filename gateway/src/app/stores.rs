//! Opens the APIService store the command line chose: the embedded one, or etcd with its sync
//! loop on a thread of its own (the mirror must follow etcd whatever the proxy threads do).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use apiagg_store::{Embedded, Etcd, EtcdOptions, Store};

/// Where APIServices registered through the API are kept.
#[derive(Debug, Clone)]
pub enum StoreChoice {
    /// A redb file in this folder.
    Embedded(PathBuf),
    /// etcd (kube-apiserver's `--etcd-*` flags).
    Etcd {
        /// Server URLs.
        servers: Vec<String>,
        /// Key prefix.
        prefix: String,
        /// CA bundle.
        ca_file: Option<PathBuf>,
        /// Client certificate.
        cert_file: Option<PathBuf>,
        /// Client key.
        key_file: Option<PathBuf>,
    },
}

fn read(path: &Option<PathBuf>) -> anyhow::Result<Option<Vec<u8>>> {
    path.as_ref()
        .map(|p| std::fs::read(p).with_context(|| p.display().to_string()))
        .transpose()
}

/// Opens the store; for etcd, connects and lists before returning.
pub fn open(choice: &StoreChoice) -> anyhow::Result<Arc<dyn Store>> {
    let (servers, prefix, ca_file, cert_file, key_file) = match choice {
        StoreChoice::Embedded(dir) => {
            let store =
                Embedded::open(dir).with_context(|| format!("--data-dir {}", dir.display()))?;
            return Ok(Arc::new(store));
        }
        StoreChoice::Etcd {
            servers,
            prefix,
            ca_file,
            cert_file,
            key_file,
        } => (servers, prefix, ca_file, cert_file, key_file),
    };
    let identity = match (read(cert_file)?, read(key_file)?) {
        (Some(cert), Some(key)) => Some((cert, key)),
        _ => None,
    };
    let options = EtcdOptions {
        servers: servers.clone(),
        prefix: prefix.clone(),
        ca: read(ca_file)?,
        identity,
    };
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("etcd".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = sender.send(Err(anyhow::anyhow!("etcd runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                match Etcd::connect(&options).await {
                    Ok((store, sync)) => {
                        let _ = sender.send(Ok(store));
                        sync.await;
                    }
                    Err(e) => {
                        let _ = sender.send(Err(anyhow::anyhow!(e)));
                    }
                }
            });
        })
        .context("starting the etcd thread")?;
    let store = receiver.recv().context("the etcd thread ended")??;
    Ok(store)
}
