//! `apiagg`: the command line of the gateway.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use apiagg_config::Sources;
use apiagg_gateway::availability::{AvailabilityController, ProbeOptions};
use apiagg_gateway::controller::ConfigController;
use apiagg_gateway::discovery::DiscoveryController;
use apiagg_gateway::openapi::OpenApiController;
use apiagg_gateway::proxy::ApiaggProxy;
use apiagg_gateway::shutdown::GracefulShutdown;
use apiagg_gateway::state::{Gateway, Options};
use clap::{Parser, Subcommand, ValueEnum};
use pingora_core::listeners::tls::TlsSettings;
use pingora_core::listeners::{L4BufferSettings, ListenerConfig, TcpSocketOptions};
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::{RunArgs, Server};
use pingora_core::services::background::background_service;

/// glibc malloc showed up at about 15% of the proxy's CPU; mimalloc handles its many small,
/// short-lived allocations much better.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A Kubernetes API aggregation gateway.
#[derive(Parser)]
#[command(name = "apiagg", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Show every APIService's availability as a running gateway sees it.
    Status {
        /// Base URL of the gateway.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        server: String,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// Validate a config file (and every APIService file it names) and exit.
    Check {
        /// Config file.
        #[arg(long, short)]
        config: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Parser)]
struct ServeArgs {
    /// Config file (YAML).
    #[arg(long, short)]
    config: PathBuf,
    /// Listen address; overrides `listen` in the config.
    #[arg(long)]
    listen: Option<String>,
    /// After SIGTERM, keep serving this long (readyz failing) before refusing new requests.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    shutdown_delay: Duration,
    /// Upper bound on waiting for in-flight requests (watches included) during shutdown.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    shutdown_drain_timeout: Duration,
    /// How often config files are checked for changes (SIGHUP reloads at once).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    reload_interval: Duration,
    /// How often the delegate's group-versions are re-read.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    delegate_refresh: Duration,
    /// How often every backend's discovery is re-read (also on every registry change).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    discovery_refresh: Duration,
    /// How often every OpenAPI document is re-read (also on every registry change).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    openapi_refresh: Duration,
    /// Upper bound of one OpenAPI download (upstream: 60s).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    openapi_timeout: Duration,
    /// Stop serving `apidiscovery.k8s.io/v2beta1` (as kube-apiserver 1.33+ does).
    #[arg(long)]
    disable_discovery_v2beta1: bool,
    /// Time between two availability probes of a backend endpoint.
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    probe_interval: Duration,
    /// Timeout of one availability probe.
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    probe_timeout: Duration,
    /// Do not record per-request metrics (only to measure what they cost).
    #[arg(long, hide = true)]
    disable_request_metrics: bool,
    /// Worker threads of the proxy.
    #[arg(long, default_value_t = default_threads())]
    threads: usize,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Parses `500ms`, `5s`, `2m` or a bare number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (use 500ms, 5s, 2m)"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use ms, s, m or h)"
            ))
        }
    };
    Ok(Duration::from_secs_f64(seconds))
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let sources = Sources::read(&args.config)
        .with_context(|| format!("reading config {}", args.config.display()))?;
    let config = sources
        .parse()
        .with_context(|| format!("invalid config {}", args.config.display()))?;
    let listen = args.listen.clone().unwrap_or_else(|| config.listen.clone());
    let options = Options {
        shutdown_delay: args.shutdown_delay,
        drain_timeout: args.shutdown_drain_timeout,
        reload_interval: args.reload_interval,
        delegate_refresh: args.delegate_refresh,
        serving_tls: config.tls.is_some(),
        discovery_refresh: args.discovery_refresh,
        negotiate: apiagg_discovery::NegotiateOptions {
            serve_v2beta1: !args.disable_discovery_v2beta1,
        },
        probes: ProbeOptions {
            interval: args.probe_interval,
            timeout: args.probe_timeout,
        },
        request_metrics: !args.disable_request_metrics,
        openapi_refresh: args.openapi_refresh,
        openapi_timeout: args.openapi_timeout,
    };
    let gateway = Gateway::new(options).context("creating metrics")?;

    let conf = ServerConf {
        threads: args.threads.max(1),
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let mut proxy = pingora_proxy::http_proxy_service_with_name(
        &server.configuration,
        ApiaggProxy::new(gateway.clone()),
        "apiagg",
    );
    // A write buffer large enough for a response head plus a typical document, so both leave
    // in one write (pingora flushes explicitly wherever streaming needs it).
    let buffers = L4BufferSettings::default().write(64 * 1024);
    let (listen, reservation) = reserve_port(&listen)?;
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut listener = ListenerConfig::tcp(listen.to_string()).l4_buffer(buffers);
    if reservation.is_some() {
        let mut options = TcpSocketOptions::default();
        options.so_reuseport = Some(true);
        listener = listener.tcp_socket_options(options);
    }
    if let Some(tls) = &config.tls {
        let cert = tls.cert_file.to_string_lossy();
        let key = tls.key_file.to_string_lossy();
        let mut settings = TlsSettings::intermediate(&cert, &key)
            .map_err(|e| anyhow::anyhow!("serving certificate {cert} / {key}: {e}"))?;
        settings.enable_h2();
        listener = listener.tls(settings);
    }
    proxy.add_listener(listener);
    let controller = ConfigController::new(gateway.clone(), args.config.clone(), sources, config)
        .map_err(|e| anyhow::anyhow!("config {}: {e}", args.config.display()))?;
    server.add_service(background_service("config controller", controller));
    server.add_service(background_service(
        "availability controller",
        AvailabilityController::new(gateway.clone()),
    ));
    server.add_service(background_service(
        "discovery controller",
        DiscoveryController::new(gateway.clone()),
    ));
    server.add_service(background_service(
        "openapi controller",
        OpenApiController::new(gateway.clone()),
    ));
    server.add_service(proxy);
    tracing::info!(%listen, "apiagg starting");
    // The first line on stdout says where to connect (tests and scripts read it).
    println!("listening on {scheme}://{listen}");
    server.run(RunArgs {
        shutdown_signal: Box::new(GracefulShutdown::new(gateway)),
    });
    drop(reservation);
    Ok(())
}

/// Resolves the listen address. Port 0 picks a free port: a socket bound to it (never listening,
/// so it takes no connection) keeps it ours for the life of the process, and the listener joins
/// it with `SO_REUSEPORT`.
fn reserve_port(listen: &str) -> anyhow::Result<(SocketAddr, Option<socket2::Socket>)> {
    let addr = listen
        .to_socket_addrs()
        .with_context(|| format!("listen address {listen:?}"))?
        .next()
        .with_context(|| format!("listen address {listen:?} resolves to nothing"))?;
    if addr.port() != 0 {
        return Ok((addr, None));
    }
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_port(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("binding {addr}"))?;
    let bound = socket
        .local_addr()?
        .as_socket()
        .context("the reserved socket has no address")?;
    Ok((bound, Some(socket)))
}

fn check(config: PathBuf) -> anyhow::Result<()> {
    let loaded = apiagg_config::GatewayConfig::load(&config)
        .with_context(|| format!("invalid config {}", config.display()))?;
    apiagg_config::Registry::build(&loaded, &[])?;
    println!(
        "{}: ok ({} APIServices, {} services)",
        config.display(),
        loaded.api_services.len(),
        loaded.services.len()
    );
    Ok(())
}

/// Fetches `/debug/apiagg/status` and prints a table like `kubectl get apiservices -o wide`.
fn status(server: &str, json: bool) -> anyhow::Result<()> {
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
        "{:<44} {:<40} {:<32} MESSAGE / ENDPOINTS",
        "NAME", "SERVICE", "AVAILABLE"
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
        println!(
            "{:<44} {:<40} {:<32} {} {}",
            item["name"].as_str().unwrap_or(""),
            item["service"].as_str().unwrap_or(""),
            available,
            c["message"].as_str().unwrap_or(""),
            endpoints.join(",")
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Check { config } => check(config),
        Command::Status { server, json } => status(&server, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("apiagg: {e:#}");
            ExitCode::FAILURE
        }
    }
}
