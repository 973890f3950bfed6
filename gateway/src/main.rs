//! `apiagg`: the command line of the gateway.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[path = "cli/controls.rs"]
mod controls;
#[path = "cli/flags.rs"]
mod flags;

use apiagg_gateway::app::{self, Launch, StoreChoice};
use apiagg_gateway::{OpenApiV2, Options, ProbeOptions};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

/// glibc malloc showed up at about 15% of the proxy's CPU; mimalloc handles its many small,
/// short-lived allocations much better.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_arena_eager_commit` (mimalloc.h, the same index in mimalloc v2 and v3).
#[cfg(not(feature = "system-allocator"))]
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// mimalloc commits its arenas eagerly on Linux by default, and memory it frees then stays in
/// RSS: start-up's transient megabytes (OpenAPI downloads and merge) stayed as ~80 MiB. With
/// arenas committed on demand, purged memory leaves RSS. The option must be set before the first
/// allocation reserves the first arena, so this runs as a constructor, after mimalloc's own
/// (priority 101) and before `main`.
#[cfg(not(feature = "system-allocator"))]
extern "C" fn tune_allocator() {
    // SAFETY: sets a documented mimalloc option to a valid value; no memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) };
}

#[cfg(not(feature = "system-allocator"))]
#[used]
#[cfg_attr(target_os = "linux", link_section = ".init_array")]
static TUNE_ALLOCATOR: extern "C" fn() = tune_allocator;

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
    Serve(Box<ServeArgs>),
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
        /// A tracing file (`TracingConfiguration`) to validate too.
        #[arg(long)]
        tracing_config_file: Option<PathBuf>,
        /// An authentication file (`AuthenticationConfiguration`) to validate too.
        #[arg(long)]
        authentication_config: Option<PathBuf>,
        /// An authorization file (`AuthorizationConfiguration`) to validate too.
        #[arg(long)]
        authorization_config: Option<PathBuf>,
        /// Then test this APIService's backend as the availability probe does (TLS handshake
        /// with its CA bundle and the proxy client certificate, its discovery document) and
        /// print each endpoint's verdict; fails when one is not available.
        #[arg(long, value_name = "NAME")]
        apiservice: Option<String>,
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
    /// Listen address; overrides `listen` in the config. Port 0 picks a free port; the first
    /// line on stdout says which.
    #[arg(long)]
    listen: Option<String>,
    /// Where APIServices registered through the API are kept (default: `apiagg-data` beside
    /// the config file).
    #[arg(long, conflicts_with = "etcd_servers")]
    data_dir: Option<PathBuf>,
    /// Keep registered APIServices in etcd instead (comma-separated URLs), shared by replicas.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// Key prefix in etcd.
    #[arg(long, default_value = "/registry")]
    etcd_prefix: String,
    /// CA bundle verifying etcd's serving certificate.
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate presented to etcd.
    #[arg(long, requires = "etcd_keyfile")]
    etcd_certfile: Option<PathBuf>,
    /// Key of `--etcd-certfile`.
    #[arg(long, requires = "etcd_certfile")]
    etcd_keyfile: Option<PathBuf>,
    /// After SIGTERM, keep serving this long (readyz failing) before refusing new requests.
    #[arg(long, value_parser = delay, default_value = "0s")]
    shutdown_delay: Duration,
    /// Upper bound on waiting for in-flight requests (watches included) during shutdown.
    #[arg(long, value_parser = interval, default_value = "60s")]
    shutdown_drain_timeout: Duration,
    /// How often config files are checked for changes (SIGHUP reloads at once).
    #[arg(long, value_parser = interval, default_value = "1s")]
    reload_interval: Duration,
    /// How often the delegate's group-versions are re-read.
    #[arg(long, value_parser = interval, default_value = "60s")]
    delegate_refresh: Duration,
    /// How often every backend's discovery is re-read (also on every registry change).
    #[arg(long, value_parser = interval, default_value = "60s")]
    discovery_refresh: Duration,
    /// How often every OpenAPI document is re-read (also on every registry change).
    #[arg(long, value_parser = interval, default_value = "60s")]
    openapi_refresh: Duration,
    /// Upper bound of one OpenAPI download (upstream: 60s).
    #[arg(long, value_parser = interval, default_value = "30s")]
    openapi_timeout: Duration,
    /// Upper bound on waiting for the delegate's OpenAPI documents before readyz turns green.
    #[arg(long, value_parser = interval, default_value = "10s")]
    openapi_startup_timeout: Duration,
    /// Serve `/openapi/v2`, merged when first asked after a change (`false`: v3 only, and v2
    /// answers 404; nothing of v2 is downloaded or held).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    openapi_v2: bool,
    /// Largest body read from a backend or the delegate (discovery, OpenAPI), e.g. `64MiB`.
    #[arg(long, value_parser = body_limit, default_value = "64MiB")]
    backend_body_limit: u64,
    /// Bound of a forwarded request that is not long-running (watch, proxy, exec, attach, log,
    /// portforward): 504 Status after it. `?timeout=` may ask for less.
    #[arg(long, value_parser = interval, default_value = "60s")]
    request_timeout: Duration,
    /// Bound of connecting to a backend or the delegate, TLS handshake included: proxied
    /// requests, upgrades (exec, port-forward) and apiagg's own requests (probes, discovery,
    /// OpenAPI, reviews). A black-holed endpoint answers 503 after it.
    #[arg(long, value_parser = interval, default_value = "5s")]
    backend_connect_timeout: Duration,
    /// A watch without `timeoutSeconds` ends after a random time between this and twice this,
    /// so clients re-watch and spread over replicas (seconds, as kube-apiserver's flag, or a
    /// duration; 0: watches are not bounded).
    #[arg(long, value_parser = seconds, default_value = "1800")]
    min_request_timeout: Duration,
    /// The chance (0 to 0.02, as kube-apiserver's flag) that an HTTP/2 connection is sent a
    /// graceful GOAWAY after an answer (never after a watch), so long-lived clients reconnect
    /// and spread over replicas behind a load balancer. 0: never.
    #[arg(long, value_parser = goaway_chance, default_value = "0")]
    goaway_chance: f64,
    /// Comma-separated list of numeric TLS group IDs (Go's crypto/tls CurveID values, as
    /// kube-apiserver's flag), the key exchanges the listener accepts; the order is ignored,
    /// X25519MLKEM768 (4588) leads where the crypto provider has it. Default: the provider's.
    #[arg(long, value_delimiter = ',', value_parser = app::curve_id, value_name = "IDS")]
    tls_curve_preferences: Vec<u16>,
    /// On SIGTERM, after the shutdown delay, open watches are ended one at a time (their
    /// number over this period a second, at least 200) instead of all at once; those left at
    /// its end go then.
    #[arg(long, value_parser = delay, default_value = "30s")]
    shutdown_watch_termination_grace_period: Duration,
    /// As kube-apiserver's flag: after the shutdown delay, new requests get 429 with
    /// `Retry-After: 5` and `Connection: close` until the in-flight ones drained. Without it,
    /// apiagg stops taking requests: idle connections close, a request that still comes gets
    /// 503 with `Retry-After: 1` and its connection closes.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true")]
    shutdown_send_retry_after: bool,
    /// Requests (not long-running) in flight to one APIService's backend at most, all its
    /// endpoints together: one slow backend holds at most this share of the gateway; more get
    /// 429 with Retry-After.
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u32).range(1..))]
    max_requests_inflight_per_apiservice: u32,
    /// The same bound per endpoint of a backend (requests go to endpoints with room).
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u32).range(1..))]
    max_requests_inflight_per_endpoint: u32,
    /// Stop serving `apidiscovery.k8s.io/v2beta1` (as kube-apiserver 1.33+ does).
    #[arg(long)]
    disable_discovery_v2beta1: bool,
    /// Time between two availability probes of a backend endpoint.
    #[arg(long, value_parser = interval, default_value = "500ms")]
    probe_interval: Duration,
    /// Timeout of one availability probe.
    #[arg(long, value_parser = interval, default_value = "500ms")]
    probe_timeout: Duration,
    /// Probes that must time out or fail in a row before an endpoint is ejected; a refused
    /// connection, or a failure on the proxy path, ejects at once.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    probe_failure_threshold: u32,
    /// Do not record per-request metrics (only to measure what they cost).
    #[arg(long, hide = true)]
    disable_request_metrics: bool,
    /// Client connections served at once; more are dropped at accept (default: three quarters
    /// of the open-file limit, keeping the rest for connections to backends).
    #[arg(long)]
    max_connections: Option<usize>,
    /// A client's TLS handshake must end within this, and a request head arrive within this of
    /// its first byte (the first request's, of the handshake's end), as kube-apiserver's
    /// `ReadHeaderTimeout`.
    #[arg(long, value_parser = interval, default_value = "32s")]
    read_header_timeout: Duration,
    /// A client connection with no request in progress (HTTP/1.1 between requests, HTTP/2 with
    /// no stream open) is closed after this, as kube-apiserver's `IdleTimeout`.
    #[arg(long, value_parser = interval, default_value = "90s")]
    idle_timeout: Duration,
    /// An HTTP/2 client must send its preface and first SETTINGS frame within this of the TLS
    /// handshake.
    #[arg(long, value_parser = interval, default_value = "10s")]
    http2_preface_timeout: Duration,
    /// Worker threads of the proxy.
    #[arg(long, default_value_t = default_threads())]
    threads: usize,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// OpenTelemetry tracing, as kube-apiserver: a `TracingConfiguration` file
    /// (`apiserver.config.k8s.io/v1`, `v1beta1` or `v1alpha1`) with the collector's `endpoint`
    /// (OTLP/gRPC, default `localhost:4317`) and `samplingRatePerMillion` (default 0: only
    /// requests whose caller sampled them). Off without it.
    #[arg(long)]
    tracing_config_file: Option<PathBuf>,
    /// Structured authentication, as kube-apiserver: an `AuthenticationConfiguration` file
    /// (`apiserver.config.k8s.io/v1`, `v1beta1` or `v1alpha1`) with JWT issuers (`jwt`) and
    /// the anonymous rule (`anonymous`), re-read when it changes.
    #[arg(long)]
    authentication_config: Option<PathBuf>,
    /// Structured authorization, as kube-apiserver: an `AuthorizationConfiguration` file
    /// (`apiserver.config.k8s.io/v1`, `v1beta1` or `v1alpha1`), an ordered chain of `Webhook`
    /// (match conditions, failure policy), `RBAC` (decided here from the cluster's Roles and
    /// bindings, followed at the delegate), `AlwaysAllow` and `AlwaysDeny`, re-read when it
    /// changes. Not together with the config file's `authorization:`.
    #[arg(long)]
    authorization_config: Option<PathBuf>,
    #[command(flatten)]
    controls: controls::ControlArgs,
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// The longest duration any option takes.
const LONGEST: Duration = Duration::from_secs(24 * 3600);

/// A command-line value that cannot be used.
#[derive(Debug, thiserror::Error)]
enum ArgError {
    #[error("{0:?} is not a duration (use 500ms, 5s, 2m): {1}")]
    Duration(String, humantime::DurationError),
    #[error("{0:?} is longer than a day")]
    TooLong(String),
    #[error("{0:?} must be at least 1ms")]
    Zero(String),
    #[error("{0:?} is not a size (use 64MiB): {1}")]
    Size(String, String),
    #[error("{0:?} is below 1KiB")]
    TooSmall(String),
    #[error("{0:?} is not a chance between 0 and 0.02")]
    Chance(String),
}

/// `--goaway-chance`: a number in `[0, 0.02]`.
fn goaway_chance(text: &str) -> Result<f64, ArgError> {
    match text.trim().parse::<f64>() {
        Ok(chance) if (0.0..=apiagg_gateway::app::MAX_GOAWAY_CHANCE).contains(&chance) => {
            Ok(chance)
        }
        _ => Err(ArgError::Chance(text.into())),
    }
}

/// A duration (`500ms`, `5s`, `2m`, `1h 30m`) from zero up to a day.
fn delay(text: &str) -> Result<Duration, ArgError> {
    let duration =
        humantime::parse_duration(text).map_err(|e| ArgError::Duration(text.into(), e))?;
    if duration > LONGEST {
        return Err(ArgError::TooLong(text.into()));
    }
    Ok(duration)
}

/// A duration above zero and up to a day (intervals and timeouts).
fn interval(text: &str) -> Result<Duration, ArgError> {
    let duration = delay(text)?;
    if duration < Duration::from_millis(1) {
        return Err(ArgError::Zero(text.into()));
    }
    Ok(duration)
}

/// Whole seconds (`1800`, as kube-apiserver's integer flags) or a duration (`30m`), up to a day.
fn seconds(text: &str) -> Result<Duration, ArgError> {
    match text.parse::<u64>() {
        Ok(n) if n <= LONGEST.as_secs() => Ok(Duration::from_secs(n)),
        Ok(_) => Err(ArgError::TooLong(text.into())),
        Err(_) => delay(text),
    }
}

/// A byte size (`64MiB`, `1GB`, `1048576`) of at least 1 KiB.
fn body_limit(text: &str) -> Result<u64, ArgError> {
    let size: bytesize::ByteSize = text
        .parse()
        .map_err(|e: String| ArgError::Size(text.into(), e))?;
    if size.as_u64() < 1024 {
        return Err(ArgError::TooSmall(text.into()));
    }
    Ok(size.as_u64())
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

/// `flags`: the flags as `/flagz` lists them.
fn launch(args: ServeArgs, flags: Vec<(String, String)>) -> Launch {
    let options = Options {
        shutdown_delay: args.shutdown_delay,
        drain_timeout: args.shutdown_drain_timeout,
        reload_interval: args.reload_interval,
        delegate_refresh: args.delegate_refresh,
        discovery_refresh: args.discovery_refresh,
        negotiate: apiagg_discovery::NegotiateOptions {
            serve_v2beta1: !args.disable_discovery_v2beta1,
        },
        probes: ProbeOptions {
            interval: args.probe_interval,
            timeout: args.probe_timeout,
            failure_threshold: args.probe_failure_threshold,
        },
        request_metrics: !args.disable_request_metrics,
        openapi_refresh: args.openapi_refresh,
        openapi_timeout: args.openapi_timeout,
        openapi_startup_timeout: args.openapi_startup_timeout,
        openapi_v2: if args.openapi_v2 {
            OpenApiV2::OnDemand
        } else {
            OpenApiV2::Off
        },
        backend_body_limit: args.backend_body_limit,
        request_timeout: args.request_timeout,
        connect_timeout: args.backend_connect_timeout,
        min_request_timeout: args.min_request_timeout,
        watch_termination_grace: args.shutdown_watch_termination_grace_period,
        send_retry_after: args.shutdown_send_retry_after,
        max_requests_per_apiservice: args.max_requests_inflight_per_apiservice as usize,
        max_requests_per_endpoint: args.max_requests_inflight_per_endpoint as usize,
        flags: flags.into(),
        ..Options::default()
    };
    let store = if args.etcd_servers.is_empty() {
        let data_dir = args.data_dir.unwrap_or_else(|| {
            let dir = args.config.parent().filter(|p| !p.as_os_str().is_empty());
            dir.map_or_else(|| PathBuf::from("apiagg-data"), |d| d.join("apiagg-data"))
        });
        StoreChoice::Embedded(data_dir)
    } else {
        StoreChoice::Etcd {
            servers: args.etcd_servers,
            prefix: args.etcd_prefix,
            ca_file: args.etcd_cafile,
            cert_file: args.etcd_certfile,
            key_file: args.etcd_keyfile,
        }
    };
    Launch {
        config: args.config,
        store,
        listen: args.listen,
        threads: args.threads,
        max_connections: args.max_connections,
        connection_timeouts: apiagg_gateway::app::ConnectionTimeouts {
            read_header: args.read_header_timeout,
            idle: args.idle_timeout,
            http2_preface: args.http2_preface_timeout,
        },
        flow: args.controls.flow(),
        audit: args.controls.audit(),
        tracing: args.tracing_config_file,
        authentication: args.authentication_config,
        authorization: args.authorization_config,
        goaway_chance: args.goaway_chance,
        tls_curves: args.tls_curve_preferences,
        options,
    }
}

fn main() -> ExitCode {
    let command = Cli::command();
    let matches = command.clone().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Serve(args) => {
            init_logging(args.log_format);
            let serve = command
                .find_subcommand("serve")
                .zip(matches.subcommand_matches("serve"));
            let flags = serve.map(|(c, m)| flags::of(c, m)).unwrap_or_default();
            app::serve(launch(*args, flags))
        }
        Command::Check {
            config,
            tracing_config_file,
            authentication_config,
            authorization_config,
            apiservice,
        } => app::check(
            &config,
            authentication_config.as_deref(),
            authorization_config.as_deref(),
        )
        .and_then(|()| match tracing_config_file {
            Some(path) => app::check_tracing(&path),
            None => Ok(()),
        })
        .and_then(|()| match apiservice {
            Some(name) => app::check_backend(&config, &name),
            None => Ok(()),
        }),
        Command::Status { server, json } => app::print_status(&server, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("apiagg: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_checked() {
        let message = |r: Result<Duration, ArgError>| r.map_err(|e| e.to_string()).unwrap_err();
        assert_eq!(interval("500ms").ok(), Some(Duration::from_millis(500)));
        assert_eq!(delay("0s").ok(), Some(Duration::ZERO));
        assert!(message(interval("0s")).contains("at least"));
        assert!(message(interval("400d")).contains("longer than a day"));
        assert!(interval("5").is_err());
        assert!(message(interval("fast")).contains("not a duration"));
    }

    #[test]
    fn body_limits_are_sizes() {
        assert_eq!(body_limit("64MiB").ok(), Some(64 << 20));
        assert!(body_limit("12").is_err());
        assert!(body_limit("lots").is_err());
    }
}
