//! A client for a service a kubeconfig names (the audit webhook; later the authentication and
//! authorization webhooks): its URL with the path, its CA or `insecure-skip-tls-verify`, the
//! client certificate and the bearer token, built with the one TLS stack of [`client_config`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::credentials::{BearerToken, ClientIdentity};
use super::tls::{client_config, parse_ca_pem};
use apiagg_observe::error_chain;

/// What a kubeconfig's current context says about reaching its server.
pub struct KubeconfigClient {
    /// HTTP/1.1 over the context's TLS trust, with its client certificate.
    pub http: reqwest::Client,
    /// The server URL, path included.
    pub url: String,
    /// The bearer token, if the context has one; a token file is re-read by the file watcher
    /// (it is a `Reload`).
    pub token: Option<Arc<BearerToken>>,
}

/// Reads the kubeconfig at `path` and builds its client; the error names what is wrong.
pub fn kubeconfig_client(
    path: &Path,
    connect_timeout: Duration,
) -> Result<KubeconfigClient, String> {
    let config = apiagg_config::from_kubeconfig(path).map_err(|e| e.to_string())?;
    let identity = config
        .client_cert
        .as_ref()
        .map(ClientIdentity::load)
        .transpose()
        .map_err(|e| e.to_string())?;
    let token = config
        .token
        .clone()
        .map(BearerToken::load)
        .transpose()
        .map_err(|e| e.to_string())?;
    let ca = config
        .ca_pem
        .as_deref()
        .map(parse_ca_pem)
        .transpose()
        .map_err(|e| format!("certificate-authority: {e}"))?;
    let tls = client_config(
        ca.as_deref(),
        config.insecure_skip_tls_verify,
        &[b"http/1.1"],
        identity.as_ref(),
    )
    .map_err(|e| e.to_string())?;
    let http = reqwest::Client::builder()
        .use_preconfigured_tls((*tls).clone())
        .connect_timeout(connect_timeout)
        .user_agent(concat!("apiagg/", env!("CARGO_PKG_VERSION")))
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| error_chain(&e))?;
    Ok(KubeconfigClient {
        http,
        url: config.url.to_string(),
        token: token.map(Arc::new),
    })
}
