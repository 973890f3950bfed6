//! Command-line interface.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// A small extension API server for end-to-end tests of apiagg.
#[derive(Debug, Clone, Parser)]
#[command(name = "sample-apiserver", disable_version_flag = true)]
pub struct Args {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,

    /// API group of the generated resource.
    #[arg(long, default_value = "wardle.example.com")]
    pub group: String,

    /// Version of the generated group.
    #[arg(long, default_value = "v1alpha1")]
    pub version: String,

    /// Plural resource name of the generated resource.
    #[arg(long, default_value = "flunders")]
    pub resource: String,

    /// Kind of the generated resource.
    #[arg(long, default_value = "Flunder")]
    pub kind: String,

    /// Serve the resource under `namespaces/<ns>/` as well as cluster-wide lists.
    #[arg(long)]
    pub namespaced: bool,

    /// Folder of discovery fixtures (`apis__<group>__<version>.json` naming).
    #[arg(long)]
    pub fixtures: Option<PathBuf>,

    /// File served at `/openapi/v2`, read on every request (so a test can change it) and sent
    /// as it is, even when it is not JSON. Overrides the fixtures' and the generated document.
    #[arg(long)]
    pub openapi_v2: Option<PathBuf>,

    /// Folder of OpenAPI v3 documents (`<path with / as __>_openapi.json`, e.g.
    /// `apis__apps__v1_openapi.json`), read on every request and sent as they are. `/openapi/v3`
    /// lists them with a `hash` of their bytes unless the folder holds `v3-discovery.json`.
    #[arg(long)]
    pub openapi_v3_dir: Option<PathBuf>,

    /// Speak no CBOR, as a server without KEP-4222: a request body in `application/cbor` gets
    /// `415 Unsupported Media Type`, `Accept: application/cbor` alone `406 Not Acceptable`.
    /// By default the generated resource reads and writes CBOR as kube-apiserver 1.32+ does
    /// with the feature on (see `cbor.rs`).
    #[arg(long)]
    pub no_cbor: bool,

    /// Serve HTTPS.
    #[arg(long, requires = "cert_dir")]
    pub tls: bool,

    /// Folder with `ca.crt`, `tls.crt`, `tls.key`; generated there when missing.
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,

    /// DNS names (or IPs) for the generated serving certificate; 127.0.0.1 is always added.
    #[arg(long = "hostname", default_value = "localhost")]
    pub hostnames: Vec<String>,

    /// Label echoed in the `X-Sample-Server` header (default: the group).
    #[arg(long)]
    pub name: Option<String>,

    /// Offer `h2` in TLS ALPN (plain HTTP always accepts h2c prior knowledge).
    #[arg(long)]
    pub h2: bool,

    /// Shut each connection down gracefully once it has received this many requests: an
    /// HTTP/2 one with GOAWAY (its streams in flight finish), an HTTP/1.1 one with
    /// `Connection: close` on the last answer.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub goaway_after: Option<u64>,

    /// CA of front proxies (kube-apiserver's flag of the same name): a connection whose client
    /// certificate chains to it (and whose CN is allowed) may name the caller in `X-Remote-User`,
    /// `X-Remote-Uid`, `X-Remote-Group` and `X-Remote-Extra-<key>`. Every other request must
    /// then authenticate, but for `/healthz`, `/livez`, `/readyz` and `/debug/*`.
    #[arg(long, requires = "tls")]
    pub requestheader_client_ca_file: Option<PathBuf>,

    /// Common names a front proxy's client certificate may have (repeatable, comma separated);
    /// none means any certificate of `--requestheader-client-ca-file`.
    #[arg(long, value_delimiter = ',', requires = "requestheader_client_ca_file")]
    pub requestheader_allowed_names: Vec<String>,

    /// CA of callers' client certificates (kube-apiserver's `--client-ca-file`): a certificate
    /// chaining to it authenticates its CN as user, its O values as groups.
    #[arg(long, requires = "tls")]
    pub client_ca_file: Option<PathBuf>,

    /// Static token file (`token,user,uid,"group1,group2"[,key=value…]`), read on every
    /// request: callers must send `Authorization: Bearer <token>` of a listed token (or come
    /// through a trusted front proxy). Enables `POST /apis/authentication.k8s.io/v1/tokenreviews`.
    #[arg(long, value_name = "FILE")]
    pub require_token: Option<PathBuf>,

    /// Authorization policy (JSON rules of users or groups, verbs, resources, nonResourceURLs,
    /// namespaces; see `sar.rs`), read on every review: enables `POST
    /// /apis/authorization.k8s.io/v1/subjectaccessreviews`, answered as RBAC would.
    #[arg(long, value_name = "FILE")]
    pub authorization_policy: Option<PathBuf>,

    /// Also serve core `services`, `discovery.k8s.io/v1` `endpointslices` and the
    /// cluster-scoped `flowcontrol.apiserver.k8s.io/v1` `flowschemas` and
    /// `prioritylevelconfigurations` (list with `labelSelector`, watch, create, replace,
    /// delete), as a cluster's API server does.
    #[arg(long)]
    pub cluster: bool,

    /// Which discovery `/apis` (and the fixtures' `/api`) speaks: `v2` answers an aggregated
    /// `Accept` in v2 or v2beta1 (v2 preferred, as kube-apiserver 1.30–1.32 does); `v2beta1`
    /// only in `apidiscovery.k8s.io/v2beta1` (as kube-apiserver 1.26–1.29); `legacy` ignores
    /// aggregated clauses and answers the legacy `APIGroupList` (as a pre-1.26 server).
    #[arg(long, value_enum, default_value_t = DiscoveryMode::V2)]
    pub discovery: DiscoveryMode,

    /// The first N `GET /apis` are answered 500 (a backend whose discovery fails for a while).
    #[arg(long, default_value_t = 0)]
    pub fail_discovery: u64,

    /// What a streaming list (`watch=true&sendInitialEvents=true`, KEP-3157) gets: `ignore`
    /// treats it as a plain watch (no annotated BOOKMARK: a WatchList client never syncs, as
    /// with many extension servers); `native` honours it as kube-apiserver 1.27+ does;
    /// `reject` refuses `sendInitialEvents` with 422, as a server without the feature.
    #[arg(long, value_enum, default_value_t = WatchListMode::Ignore)]
    pub watch_list: WatchListMode,

    /// Changes kept for watches from a resourceVersion; older ones get 410 `Expired`.
    #[arg(long, default_value_t = crate::store::DEFAULT_HISTORY)]
    pub watch_history: usize,
    /// A watch from a resourceVersion the history no longer holds is answered `410 Gone` with
    /// the Status, instead of the in-stream `ERROR` event kube-apiserver sends.
    #[arg(long)]
    pub watch_expired_status: bool,
}

/// See [`Args::watch_list`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WatchListMode {
    Ignore,
    Native,
    Reject,
}

/// See [`Args::discovery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DiscoveryMode {
    /// Aggregated v2 and v2beta1, v2 preferred.
    V2,
    /// Aggregated v2beta1 only.
    V2beta1,
    /// Legacy documents only.
    Legacy,
}

impl Args {
    /// The label for `X-Sample-Server`.
    pub fn server_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.group.clone())
    }
}
