//! Structured authorization (`--authorization-config`, kube-apiserver's
//! `AuthorizationConfiguration`): the chain a file describes, re-read when it changes (the
//! file watcher's rounds). A bad file keeps the previous chain and says why in the log and in
//! `apiserver_authorization_config_controller_automatic_reloads_total{status="failure"}`; every
//! webhook is built anew on a good reload (its cache starts empty), the RBAC objects stay.
//! As upstream, RBAC may only be part of a reloaded file when it was there at start, and every
//! non-webhook type present at start must stay. Validation itself lives in `apiagg-authz`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiagg_authz::validate::{AuthorizerSpec, Connection, Loaded, ValidationErrors};
use arc_swap::ArcSwap;

use super::chain::{Chain, Link, RbacSource};
use super::metrics::AuthzMetrics;
use super::webhook::Webhook;
use crate::backends::{kubeconfig_client, Reload, ReloadCounter};

/// Upstream's refusal of an RBAC authorizer a reload adds.
const RBAC_NOT_AT_START: &str =
    "authorizer type RBAC is not allowed if it was not enabled at initial server startup";

/// Upper bound of connecting to a webhook.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the authorization configuration file cannot be used. At start the gateway does not
/// start; on a reload the previous chain keeps serving. Not retryable until the file changes.
#[derive(Debug, thiserror::Error)]
pub enum AuthzConfigError {
    /// The file cannot be read.
    #[error("authorization config {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid `AuthorizationConfiguration`.
    #[error("authorization config {}: {errors}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem, with its field.
        errors: ValidationErrors,
    },
    /// A rule kube-apiserver applies to the file beyond its validation: names of non-webhook
    /// authorizers, and the types a reload may not add or remove.
    #[error("authorization config {}: {why}", path.display())]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why, in upstream's words.
        why: String,
    },
    /// A webhook's kubeconfig cannot be used.
    #[error("authorization config {}: authorizers[{index}].connectionInfo.kubeConfigFile: {why}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Which authorizer.
        index: usize,
        /// Why.
        why: String,
    },
    /// The config file's `authorization:` is set too (kube-apiserver refuses
    /// `--authorization-mode` beside `--authorization-config`).
    #[error("--authorization-config can not be used when the config file sets authorization: (mode, cache TTLs or allowAnyone…); set who decides in one place")]
    Twice,
}

/// The file and the chain it configures now.
pub struct StructuredAuthz {
    path: PathBuf,
    chain: Arc<ArcSwap<Chain>>,
    rbac: Option<Arc<RbacSource>>,
    /// Non-webhook types of the file at start: a reload must keep them.
    required: Vec<&'static str>,
    last: Mutex<Vec<u8>>,
    metrics: AuthzMetrics,
    /// Reloads counted as kube-apiserver counts them.
    reloads: ReloadCounter,
}

impl StructuredAuthz {
    /// Reads and validates the file (it must be valid now). `configured`: the config file sets
    /// `authorization:` itself, which is an error beside this file.
    pub fn load(
        path: &Path,
        configured: bool,
        metrics: AuthzMetrics,
    ) -> Result<StructuredAuthz, AuthzConfigError> {
        if configured {
            return Err(AuthzConfigError::Twice);
        }
        let bytes = read(path)?;
        let loaded = validated(path, &bytes)?;
        let has_rbac = loaded
            .authorizers
            .iter()
            .any(|a| matches!(a, AuthorizerSpec::Rbac { .. }));
        let rbac = has_rbac.then(|| Arc::new(RbacSource::default()));
        let required = non_webhook_types(&loaded);
        let chain = build(path, loaded, rbac.as_ref(), &metrics)?;
        metrics.reloaded(true);
        Ok(StructuredAuthz {
            path: path.to_path_buf(),
            chain: Arc::new(ArcSwap::from_pointee(chain)),
            rbac,
            required,
            last: Mutex::new(bytes),
            metrics,
            reloads: ReloadCounter::default(),
        })
    }

    /// The chain, as requests read it.
    pub fn chain(&self) -> Arc<ArcSwap<Chain>> {
        self.chain.clone()
    }

    /// The RBAC objects the RBAC controller keeps, when the chain has an RBAC authorizer.
    pub fn rbac(&self) -> Option<Arc<RbacSource>> {
        self.rbac.clone()
    }

    /// Reads the file again; `Ok(true)` when it changed and now serves.
    fn read_again(&self) -> Result<bool, AuthzConfigError> {
        let bytes = read(&self.path)?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == bytes {
            return Ok(false);
        }
        let loaded = validated(&self.path, &bytes)?;
        let types = non_webhook_types(&loaded);
        let refused = |why: String| AuthzConfigError::Refused {
            path: self.path.clone(),
            why,
        };
        if types.contains(&"RBAC") && self.rbac.is_none() {
            return Err(refused(RBAC_NOT_AT_START.into()));
        }
        let missing: Vec<&str> = self
            .required
            .iter()
            .filter(|t| !types.contains(t))
            .copied()
            .collect();
        if !missing.is_empty() {
            return Err(refused(format!(
                "missing required types: [{}]",
                missing.join(" ")
            )));
        }
        let chain = build(&self.path, loaded, self.rbac.as_ref(), &self.metrics)?;
        self.chain.store(Arc::new(chain));
        *last = bytes;
        Ok(true)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, AuthzConfigError> {
    std::fs::read(path).map_err(|source| AuthzConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The file validated, and its non-webhook authorizers named as kube-apiserver requires
/// (`rbac`, `alwaysallow`, `alwaysdeny`: the lower-case type).
fn validated(path: &Path, bytes: &[u8]) -> Result<Loaded, AuthzConfigError> {
    let loaded =
        apiagg_authz::validate::load(bytes).map_err(|errors| AuthzConfigError::Invalid {
            path: path.to_path_buf(),
            errors,
        })?;
    let misnamed: Vec<String> = loaded
        .authorizers
        .iter()
        .filter(|a| !matches!(a, AuthorizerSpec::Webhook(_)))
        .filter(|a| a.name() != a.type_name().to_lowercase())
        .map(|a| {
            format!(
                "expected name {} for authorizer {} instead of {}",
                a.type_name().to_lowercase(),
                a.type_name(),
                a.name()
            )
        })
        .collect();
    if !misnamed.is_empty() {
        return Err(AuthzConfigError::Invalid {
            path: path.to_path_buf(),
            errors: ValidationErrors(misnamed),
        });
    }
    Ok(loaded)
}

fn non_webhook_types(loaded: &Loaded) -> Vec<&'static str> {
    loaded
        .authorizers
        .iter()
        .filter(|a| !matches!(a, AuthorizerSpec::Webhook(_)))
        .map(AuthorizerSpec::type_name)
        .collect()
}

/// The chain of a validated file.
fn build(
    path: &Path,
    loaded: Loaded,
    rbac: Option<&Arc<RbacSource>>,
    metrics: &AuthzMetrics,
) -> Result<Chain, AuthzConfigError> {
    let mut links = Vec::with_capacity(loaded.authorizers.len());
    for (index, spec) in loaded.authorizers.into_iter().enumerate() {
        links.push(match spec {
            AuthorizerSpec::Webhook(webhook) => {
                let client = match &webhook.connection {
                    Connection::KubeConfigFile(file) => {
                        Some(kubeconfig_client(Path::new(file), CONNECT_TIMEOUT).map_err(
                            |why| AuthzConfigError::Kubeconfig {
                                path: path.to_path_buf(),
                                index,
                                why,
                            },
                        )?)
                    }
                    // The cluster apiagg fronts: its delegate, with apiagg's credentials.
                    Connection::InClusterConfig => None,
                };
                Link::Webhook(Box::new(Webhook::new(webhook, client)))
            }
            AuthorizerSpec::Rbac { .. } => match rbac {
                Some(source) => Link::Rbac(source.clone()),
                None => {
                    return Err(AuthzConfigError::Refused {
                        path: path.to_path_buf(),
                        why: RBAC_NOT_AT_START.into(),
                    })
                }
            },
            AuthorizerSpec::AlwaysAllow { .. } => Link::AlwaysAllow,
            AuthorizerSpec::AlwaysDeny { .. } => Link::AlwaysDeny,
        });
    }
    Ok(Chain::new(links, metrics.clone()))
}

impl Reload for StructuredAuthz {
    type Error = AuthzConfigError;

    fn name(&self) -> String {
        format!("authorization config {}", self.path.display())
    }

    fn reload(&self) -> Result<bool, AuthzConfigError> {
        let result = self.read_again();
        self.reloads.count(result, |ok| self.metrics.reloaded(ok))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RBAC_ONLY: &str = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: RBAC\n  name: rbac\n";
    const ALLOW_ONLY: &str = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: AlwaysAllow\n  name: alwaysallow\n";

    fn metrics() -> (prometheus::Registry, AuthzMetrics) {
        let registry = prometheus::Registry::new();
        let metrics = AuthzMetrics::register(&registry).expect("metrics");
        (registry, metrics)
    }

    fn reloads(registry: &prometheus::Registry, status: &str) -> f64 {
        registry
            .gather()
            .iter()
            .filter(|f| {
                f.name() == "apiserver_authorization_config_controller_automatic_reloads_total"
            })
            .flat_map(|f| f.get_metric().iter())
            .filter(|m| m.get_label().iter().any(|l| l.value() == status))
            .map(|m| m.get_counter().value())
            .sum()
    }

    #[test]
    fn the_file_and_the_config_files_authorization_together_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("authz.yaml");
        std::fs::write(&file, RBAC_ONLY).expect("write");
        let refused = StructuredAuthz::load(&file, true, metrics().1).err();
        assert!(
            matches!(refused, Some(AuthzConfigError::Twice)),
            "{refused:?}"
        );
    }

    #[test]
    fn names_and_kubeconfigs_are_checked_at_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("authz.yaml");
        std::fs::write(&file, RBAC_ONLY.replace("name: rbac", "name: cluster-rbac"))
            .expect("write");
        let refused = StructuredAuthz::load(&file, false, metrics().1)
            .err()
            .expect("refused");
        assert!(
            refused
                .to_string()
                .contains("expected name rbac for authorizer RBAC instead of cluster-rbac"),
            "{refused}"
        );
        let webhook = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: Webhook\n  name: w\n  webhook:\n    timeout: 3s\n    subjectAccessReviewVersion: v1\n    failurePolicy: Deny\n    connectionInfo: {type: KubeConfigFile, kubeConfigFile: /nonexistent/w.kubeconfig}\n";
        std::fs::write(&file, webhook).expect("write");
        let refused = StructuredAuthz::load(&file, false, metrics().1)
            .err()
            .expect("refused");
        let text = refused.to_string();
        assert!(
            text.contains("authorizers[0].connectionInfo.kubeConfigFile"),
            "{text}"
        );
        assert!(text.contains("/nonexistent/w.kubeconfig"), "{text}");
    }

    #[test]
    fn a_reload_keeps_the_types_of_start_and_a_bad_file_the_chain() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("authz.yaml");
        std::fs::write(&file, ALLOW_ONLY).expect("write");
        let (registry, metrics) = metrics();
        let authz = StructuredAuthz::load(&file, false, metrics).expect("load");
        assert!(authz.rbac().is_none());
        assert_eq!(reloads(&registry, "success"), 1.0, "the start counts");
        let before = Arc::as_ptr(&authz.chain().load_full());

        // RBAC was not there at start: refused, counted once however often it is read.
        std::fs::write(&file, RBAC_ONLY).expect("write");
        for _ in 0..3 {
            let refused = Reload::reload(&authz).expect_err("RBAC added");
            assert!(
                refused
                    .to_string()
                    .contains("not allowed if it was not enabled"),
                "{refused}"
            );
        }
        assert_eq!(reloads(&registry, "failure"), 1.0);
        assert_eq!(
            Arc::as_ptr(&authz.chain().load_full()),
            before,
            "the old chain serves"
        );

        // AlwaysAllow was there at start and must stay.
        let deny = ALLOW_ONLY.replace(
            "AlwaysAllow\n  name: alwaysallow",
            "AlwaysDeny\n  name: alwaysdeny",
        );
        std::fs::write(&file, &deny).expect("write");
        let refused = Reload::reload(&authz).expect_err("AlwaysAllow dropped");
        assert!(
            refused
                .to_string()
                .contains("missing required types: [AlwaysAllow]"),
            "{refused}"
        );

        // A good file serves; reading it again changes nothing.
        let both = format!("{ALLOW_ONLY}- type: AlwaysDeny\n  name: alwaysdeny\n");
        std::fs::write(&file, both).expect("write");
        assert!(Reload::reload(&authz).expect("good"));
        assert!(!Reload::reload(&authz).expect("same"));
        assert_eq!(reloads(&registry, "success"), 2.0);
        assert_eq!(
            authz.chain().load().describe(),
            ["AlwaysAllow \"alwaysallow\"", "AlwaysDeny \"alwaysdeny\""]
        );
    }
}
