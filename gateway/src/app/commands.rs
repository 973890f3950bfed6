//! `apiagg check` and `apiagg status`: validate a config, print a running gateway's view.

use std::path::Path;

use anyhow::Context;

/// Validates a config file (and every APIService file it names) without starting anything.
pub fn check(
    config: &Path,
    authentication: Option<&Path>,
    authorization: Option<&Path>,
) -> anyhow::Result<()> {
    let loaded = apiagg_config::GatewayConfig::load(config)
        .with_context(|| format!("invalid config {}", config.display()))?;
    // The files the config names must be usable too: certificates, keys, CA bundles, tokens.
    crate::auth::Authenticator::new(&loaded.authentication)?;
    if let Some(file) = authentication {
        let metrics = crate::auth::AuthnMetrics::register(&prometheus::Registry::new())?;
        let anonymous_set = loaded.authentication.anonymous_set;
        crate::auth::StructuredAuthn::load(file, anonymous_set, metrics)?;
    }
    if let Some(file) = authorization {
        let metrics = crate::auth::AuthzMetrics::register(&prometheus::Registry::new())?;
        let configured = loaded.authorization.configured;
        crate::auth::StructuredAuthz::load(file, configured, metrics)?;
    }
    if let Some(tls) = &loaded.tls {
        super::serving::ServingCertificates::load(tls).map_err(|e| anyhow::anyhow!("tls: {e}"))?;
    }
    if let Some(delegate) = &loaded.delegate {
        crate::backends::delegate_credentials(delegate)?;
    }
    if let Some(proxy) = &loaded.proxy_client {
        let source = apiagg_config::CertSource::Files {
            cert: proxy.cert_file.clone(),
            key: proxy.key_file.clone(),
        };
        crate::backends::ClientIdentity::load(&source).context("proxyClient")?;
    }
    println!(
        "{}: ok ({} APIServices, {} services)",
        config.display(),
        loaded.api_services.len(),
        loaded.services.len()
    );
    Ok(())
}

/// Validates a tracing file (`--tracing-config-file`) without starting anything.
pub fn check_tracing(path: &Path) -> anyhow::Result<()> {
    let settings = apiagg_observe::load_tracing(path)?;
    println!(
        "{}: ok (endpoint {}, {} sampled per million)",
        path.display(),
        settings.endpoint,
        settings.sampling_rate_per_million
    );
    Ok(())
}

/// Fetches `/debug/apiagg/status` and prints a table like `kubectl get apiservices -o wide`.
pub fn print_status(server: &str, json: bool) -> anyhow::Result<()> {
    let url = format!("{}/debug/apiagg/status", server.trim_end_matches('/'));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let text = runtime
        .block_on(async {
            let response = reqwest::get(&url).await?.error_for_status()?;
            response.text().await
        })
        .with_context(|| format!("GET {url}"))?;
    if json {
        println!("{text}");
        return Ok(());
    }
    let doc: serde_json::Value = serde_json::from_str(&text).context("status document")?;
    println!(
        "{:<44} {:<40} {:<32} {:<10} MESSAGE / ENDPOINTS",
        "NAME", "SERVICE", "AVAILABLE", "WATCHLIST"
    );
    for item in doc["items"].as_array().into_iter().flatten() {
        let c = &item["conditions"][0];
        let available = match (c["status"].as_str(), c["reason"].as_str()) {
            (Some("True"), _) => "True".to_string(),
            (Some(s), Some(r)) => format!("{s} ({r})"),
            _ => "Unknown".to_string(),
        };
        let endpoints: Vec<String> = item["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let mark = if e["healthy"] == true { "+" } else { "-" };
                format!("{mark}{}", e["url"].as_str().unwrap_or(""))
            })
            .collect();
        // How streaming lists are served: native, emulated, unknown (remote APIServices).
        let watch_list = item["watchList"]["mode"].as_str().unwrap_or("-");
        println!(
            "{:<44} {:<40} {:<32} {:<10} {} {}",
            item["name"].as_str().unwrap_or(""),
            item["service"].as_str().unwrap_or(""),
            available,
            watch_list,
            c["message"].as_str().unwrap_or(""),
            endpoints.join(",")
        );
    }
    Ok(())
}
