//! apiagg in front of the real control plane: kube-apiserver is its delegate (apiagg presents a
//! `system:masters` client certificate), sample-apiserver a remote APIService of its config file
//! (the same APIService kube-apiserver stores, its Service mapped to sample-apiserver's port), and
//! apiagg's proxy client certificate comes from the front-proxy CA sample-apiserver trusts.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::{send, RealKube, WARDLE};
use crate::pki::write_pair;
use crate::{wait_until, Apiagg};

/// The CN of apiagg's proxy client certificate (one of sample-apiserver's
/// `--requestheader-allowed-names`).
pub const APIAGG_PROXY_CN: &str = "apiagg-front-proxy";

const FLOW_SCHEMAS: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas";

/// Where apiagg finds the Services of the APIServices [`RealKube::apiagg_finding`] adds to its
/// config file (wardle's is always in its `services` table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// Its `services` table maps each to `https://127.0.0.1:<port>`, but for the Services named
    /// here, which the table lacks.
    Table {
        /// Services left out of the table.
        missing: &'a [&'a str],
    },
    /// `serviceResolution: cluster`: apiagg looks them up in kube-apiserver, as kube-aggregator
    /// does.
    Cluster,
}

/// A running apiagg in front of [`RealKube`], killed when dropped.
pub struct Front {
    /// The process (its folder holds `apiagg.yaml` and `apiagg.log`).
    pub gw: Apiagg,
}

impl Front {
    /// `https://127.0.0.1:<apiagg>` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.gw.port)
    }

    /// apiagg's log so far.
    pub fn log(&self) -> String {
        self.gw.log()
    }

    /// Two kubeconfig files in apiagg's folder with the client certificate `identity`, named
    /// `<name>-apiagg.kubeconfig` and `<name>-kube.kubeconfig`: one for apiagg, one for
    /// kube-apiserver.
    pub fn kubeconfigs(
        &self,
        kube: &RealKube,
        name: &str,
        identity: &(String, String),
    ) -> (PathBuf, PathBuf) {
        let write = |to: &str, server: &str| {
            let path = self.gw.dir.path().join(format!("{name}-{to}.kubeconfig"));
            std::fs::write(&path, kube.kubeconfig_at(server, identity)).expect("kubeconfig");
            path
        };
        (
            write("apiagg", &self.url("")),
            write("kube", &kube.kube_url("")),
        )
    }
}

impl RealKube {
    /// Starts apiagg in front of the control plane with `authorization` (the `authorization:`
    /// line's value, a YAML flow mapping; none: apiagg's default, AlwaysAllow with its secure
    /// defaults) and flow control from the cluster's objects, and waits until it serves wardle
    /// to the admin. Callers authenticate as at
    /// kube-apiserver: client certificates of the same CA, service-account tokens by TokenReview,
    /// anonymous.
    pub async fn apiagg(&self, authorization: Option<&str>) -> Front {
        self.apiagg_with(authorization, &[]).await
    }

    /// [`RealKube::apiagg`] with `more` APIServices (from [`RealKube::apiservice`]) in its
    /// config file beside wardle's, each Service mapped to `https://127.0.0.1:<its port>`.
    pub async fn apiagg_with(&self, authorization: Option<&str>, more: &[Value]) -> Front {
        let table = Lookup::Table { missing: &[] };
        self.apiagg_finding(authorization, more, table).await
    }

    /// [`RealKube::apiagg_with`], the Services of `more` found as `lookup` says.
    pub async fn apiagg_finding(
        &self,
        authorization: Option<&str>,
        more: &[Value],
        lookup: Lookup<'_>,
    ) -> Front {
        self.start_front(authorization, more, lookup, &[], &[])
            .await
    }

    /// [`RealKube::apiagg_with`] with `files` (name, contents) written beside its config and
    /// `args` added to its command line (e.g. `--authorization-config`, `--audit-policy-file`),
    /// where `{dir}` stands for apiagg's folder.
    pub async fn apiagg_configured(
        &self,
        authorization: Option<&str>,
        more: &[Value],
        files: &[(&str, &str)],
        args: &[&str],
    ) -> Front {
        let table = Lookup::Table { missing: &[] };
        self.start_front(authorization, more, table, files, args)
            .await
    }

    async fn start_front(
        &self,
        authorization: Option<&str>,
        more: &[Value],
        lookup: Lookup<'_>,
        files: &[(&str, &str)],
        args: &[&str],
    ) -> Front {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path();
        for (name, contents) in files {
            std::fs::write(path.join(name), contents).expect("file");
        }
        self.client_ca.write_ca(path, "client-ca");
        self.serving_ca.write_ca(path, "serving-ca");
        write_pair(
            path,
            "serving",
            &self.serving_ca.server(&["localhost", "127.0.0.1"]),
        );
        let proxy = self.front_proxy_ca.client(APIAGG_PROXY_CN, &[]);
        write_pair(path, "proxy-client", &proxy);
        let delegate = self.client_ca.client("apiagg", &["system:masters"]);
        write_pair(path, "delegate", &delegate);
        let authorization =
            authorization.map_or_else(String::new, |a| format!("authorization: {a}\n"));
        let (mut services, mut apiservices) = (String::new(), String::new());
        let wardle = self.wardle_apiservice();
        for apiservice in std::iter::once(&wardle).chain(more) {
            let service = &apiservice["spec"]["service"];
            let port = &service["port"];
            let listed = match lookup {
                _ if apiservice == &wardle => true,
                Lookup::Table { missing } => !missing.iter().any(|m| service["name"] == *m),
                Lookup::Cluster => false,
            };
            let entry = format!(
                "  - {{namespace: wardle, name: {}, port: {port}, endpoints: [\"https://127.0.0.1:{port}\"]}}\n",
                service["name"]
            );
            // A Service of several APIServices is listed once.
            if listed && !services.contains(&entry) {
                services += &entry;
            }
            apiservices += &format!("  - {apiservice}\n");
        }
        let resolution = match lookup {
            Lookup::Table { .. } => "",
            Lookup::Cluster => "serviceResolution: cluster\n",
        };
        let config = format!(
            "tls: {{certFile: serving.crt, keyFile: serving.key}}\n\
             authentication: {{anonymous: true, clientCAFile: client-ca.crt, tokenReview: true}}\n\
             {authorization}{resolution}\
             proxyClient: {{certFile: proxy-client.crt, keyFile: proxy-client.key}}\n\
             delegate: {{url: \"{}\", caFile: serving-ca.crt, certFile: delegate.crt, keyFile: delegate.key}}\n\
             services:\n{services}\
             apiServices:\n{apiservices}",
            self.kube_url(""),
        );
        let folder = path.display().to_string();
        let args: Vec<String> = args.iter().map(|a| a.replace("{dir}", &folder)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let front = Front {
            // Flow control from the cluster's own FlowSchemas and PriorityLevelConfigurations,
            // as in front of a real cluster: the X-Kubernetes-PF-* UIDs are the cluster's.
            gw: Apiagg::start_in_secure(
                dir,
                &config,
                &[&["--flow-control-from-cluster"], &args[..]].concat(),
            ),
        };
        let began = std::time::Instant::now();
        let admin = &self.client(Some(&self.admin));
        let front_ref = &front;
        wait_until(
            "apiagg to serve /readyz and wardle to the admin",
            Duration::from_secs(30),
            move || async move {
                let (ready, _) = send(admin, "GET", &front_ref.url("/readyz"), None).await;
                let (wardle, _) = send(admin, "GET", &front_ref.url(WARDLE), None).await;
                (ready, wardle)
            },
            |codes| *codes == (200, 200),
        )
        .await;
        let ready = began.elapsed();
        // Ready is not yet applied: until the cluster's objects are, apiagg classifies by its
        // built-in configuration (other UIDs).
        let (_, exempt) = self
            .admin("GET", &format!("{FLOW_SCHEMAS}/exempt"), None)
            .await;
        let exempt = exempt["metadata"]["uid"].as_str().map(str::to_string);
        wait_until(
            "apiagg to classify the admin by the cluster's FlowSchema exempt",
            Duration::from_secs(30),
            move || async move {
                let answer = admin.get(front_ref.url(WARDLE)).send().await;
                let header = answer.ok().and_then(|a| {
                    let uid = a.headers().get("x-kubernetes-pf-flowschema-uid")?;
                    uid.to_str().ok().map(str::to_string)
                });
                header
            },
            |uid| *uid == exempt,
        )
        .await;
        eprintln!(
            "apiagg ready in {ready:?}, the cluster's flow control applied in {:?}",
            began.elapsed()
        );
        front
    }
}
