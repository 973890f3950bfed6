//! What the control plane is started with: its PKI and kubeconfig, the request-header flags, and
//! the objects that register sample-apiserver in kube-apiserver.

use std::process::Command;

use base64::Engine;
use serde_json::{json, Value};

use super::{RealKube, KUBE_PROXY_CN};
use crate::pki::write_pair;

impl RealKube {
    /// The PKI and kubeconfig files in the folder.
    pub(super) fn write_pki(&self) {
        let dir = &self.dir;
        self.client_ca.write_ca(dir, "client-ca");
        self.front_proxy_ca.write_ca(dir, "front-proxy-ca");
        self.serving_ca.write_ca(dir, "serving-ca");
        let local = ["localhost", "127.0.0.1"];
        write_pair(dir, "kube-apiserver", &self.serving_ca.server(&local));
        let sample = ["api.wardle.svc", "localhost", "127.0.0.1"];
        write_pair(dir, "sample-apiserver", &self.serving_ca.server(&sample));
        let proxy = self.front_proxy_ca.client(KUBE_PROXY_CN, &[]);
        write_pair(dir, "front-proxy-client", &proxy);
        let key = rcgen::KeyPair::generate().expect("service-account key");
        std::fs::write(dir.join("service-account.key"), key.serialize_pem()).expect("key");
        std::fs::write(dir.join("service-account.pub"), key.public_key_pem()).expect("pub");
        // sample-apiserver's identity toward kube-apiserver (TokenReview, SubjectAccessReview,
        // informers): system:masters here; upstream's e2e binds a service account to
        // system:auth-delegator and extension-apiserver-authentication-reader.
        let identity = self
            .client_ca
            .client("wardle-apiserver", &["system:masters"]);
        let kubeconfig = self.kubeconfig(&identity);
        std::fs::write(dir.join("sample-apiserver.kubeconfig"), kubeconfig).expect("kubeconfig");
    }

    /// A kubeconfig for kube-apiserver with the client certificate `identity`.
    pub fn kubeconfig(&self, identity: &(String, String)) -> String {
        self.kubeconfig_at(&self.kube_url(""), identity)
    }

    /// A kubeconfig for `server` (kube-apiserver, or apiagg: both serve certificates of the
    /// serving CA) with the client certificate `identity`.
    pub fn kubeconfig_at(&self, server: &str, identity: &(String, String)) -> String {
        let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: kube\n\
             clusters:\n- name: kube\n  cluster: {{server: \"{}\", certificate-authority-data: {}}}\n\
             users:\n- name: u\n  user: {{client-certificate-data: {}, client-key-data: {}}}\n\
             contexts:\n- name: kube\n  context: {{cluster: kube, user: u}}\n",
            server,
            b64(&self.serving_ca.cert_pem),
            b64(&identity.0),
            b64(&identity.1),
        )
    }

    /// The APIService both aggregators serve wardle by (kube-apiserver's copy is stored, apiagg's
    /// is in its config file).
    pub fn wardle_apiservice(&self) -> Value {
        self.apiservice("wardle.example.com", "v1alpha1", "api", self.sample_port)
    }

    /// An APIService `<version>.<group>` (priorities as wardle's) served by the Service
    /// `wardle/<service>`, which reaches loopback `port` (see [`RealKube::register`]), verified
    /// with the serving CA.
    pub fn apiservice(&self, group: &str, version: &str, service: &str, port: u16) -> Value {
        json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{version}.{group}")},
            "spec": {
                "group": group, "version": version,
                "groupPriorityMinimum": 2000, "versionPriority": 200,
                "service": {"namespace": "wardle", "name": service, "port": port},
                "caBundle": base64::engine::general_purpose::STANDARD
                    .encode(&self.serving_ca.cert_pem),
            }
        })
    }

    /// Stores `apiservice` (from [`RealKube::apiservice`]) in kube-apiserver with its Service:
    /// type ExternalName `localhost` (kube-aggregator reaches `localhost:<the APIService's
    /// port>`, verifying the name `<service>.wardle.svc`).
    pub async fn register(&self, apiservice: &Value) {
        let spec = &apiservice["spec"]["service"];
        let port = spec["port"].clone();
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": spec["name"], "namespace": "wardle"},
            "spec": {"type": "ExternalName", "externalName": "localhost",
                "ports": [{"port": port, "targetPort": port}]}
        });
        self.create("/api/v1/namespaces/wardle/services", service)
            .await;
        self.create(APISERVICES, apiservice.clone()).await;
    }

    /// Deletes `apiservice` and its Service from kube-apiserver.
    pub async fn unregister(&self, apiservice: &Value) {
        let name = apiservice["metadata"]["name"].as_str().expect("name");
        let service = apiservice["spec"]["service"]["name"]
            .as_str()
            .expect("service");
        for path in [
            format!("{APISERVICES}/{name}"),
            format!("/api/v1/namespaces/wardle/services/{service}"),
        ] {
            let (code, body) = self.admin("DELETE", &path, None).await;
            assert!(code == 200 || code == 404, "DELETE {path}: {code} {body}");
        }
    }

    pub(super) async fn register_wardle(&self) {
        self.namespace("wardle").await;
        self.register(&self.wardle_apiservice()).await;
    }
}

const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// The request-header flags both servers share (the names of upstream's setup).
pub(super) fn requestheader(c: &mut Command) {
    c.args(["--requestheader-client-ca-file", "front-proxy-ca.crt"]);
    c.args(["--requestheader-username-headers", "X-Remote-User"]);
    c.args(["--requestheader-uid-headers", "X-Remote-Uid"]);
    c.args(["--requestheader-group-headers", "X-Remote-Group"]);
    c.args(["--requestheader-extra-headers-prefix", "X-Remote-Extra-"]);
}
