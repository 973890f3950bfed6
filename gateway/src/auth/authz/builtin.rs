//! The rule apiagg applies without an authorizer (`authorization.mode: AlwaysAllow`): requests it
//! forwards go on (every backend and the delegate authorize them), but what apiagg serves itself
//! and what changes its routes is never open to everybody by default.
//!
//! | request | allowed to |
//! |---|---|
//! | APIService API writes (create, update, patch, delete) | `system:masters` |
//! | APIService API reads (get, list, watch) | authenticated callers (not anonymous) |
//! | `/metrics`, `/statusz`, `/flagz`, `/debug/apiagg/…`, `/debug/api_priority_and_fairness/…` | `system:masters`, `system:monitoring` |
//! | everything else | everybody apiagg let in |
//!
//! `allowAnyoneToChangeAPIServices` and `allowAnyoneToReadMetrics` open the first and the third
//! row to every caller, anonymous ones included.

use super::*;

/// The group kube-apiserver's `system:monitoring` role is bound to.
const MONITORING_GROUP: &str = "system:monitoring";

/// What the built-in rule protects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protected {
    /// Creating, changing or deleting APIServices: who does it receives everyone's requests.
    ApiServiceWrite,
    /// Reading APIServices (backends, CA bundles, availability).
    ApiServiceRead,
    /// `/metrics`, `/statusz`, `/flagz` and `/debug/apiagg/…` (apiagg's own).
    Monitoring,
}

impl Protected {
    /// What `info` asks for, if the rule protects it.
    pub fn of(info: &RequestInfo<'_>) -> Option<Protected> {
        if info.group_version_key() == Some(apiagg_apis::GROUP_VERSION) {
            // The group-version's discovery document is discovery, open as `/apis` is.
            if info.resource.is_empty() && !info.is_write() {
                return None;
            }
            return Some(if info.is_write() {
                Protected::ApiServiceWrite
            } else {
                Protected::ApiServiceRead
            });
        }
        // What apiagg answers itself; other `/debug/…` paths are the delegate's to authorize.
        let own = match info.segment(0) {
            "metrics" | "statusz" | "flagz" => info.total_segments() == 1,
            "debug" => matches!(info.segment(1), "apiagg" | "api_priority_and_fairness"),
            _ => false,
        };
        own.then_some(Protected::Monitoring)
    }

    /// Who may, as words for the refusal and the start-up log.
    pub fn who(self) -> &'static str {
        match self {
            Protected::ApiServiceWrite => "members of system:masters",
            Protected::ApiServiceRead => "authenticated callers",
            Protected::Monitoring => "members of system:masters or system:monitoring",
        }
    }
}

/// The built-in rule's settings.
#[derive(Debug, Clone, Copy, Default)]
pub struct Builtin {
    /// `allowAnyoneToChangeAPIServices`.
    pub anyone_changes_api_services: bool,
    /// `allowAnyoneToReadMetrics`.
    pub anyone_reads_metrics: bool,
}

impl Builtin {
    /// The rule `config` asks for.
    pub fn new(config: &Authorization) -> Builtin {
        Builtin {
            anyone_changes_api_services: config.allow_anyone_to_change_api_services,
            anyone_reads_metrics: config.allow_anyone_to_read_metrics,
        }
    }

    /// `Ok` when `user` may do what `request` asks.
    pub fn check(&self, request: &AuthzRequest<'_>, user: &User) -> Result<(), Refusal> {
        let Some(protected) = Protected::of(request.info) else {
            return Ok(());
        };
        let member = |group: &str| user.groups.iter().any(|g| g == group);
        let allowed = match protected {
            Protected::ApiServiceWrite => {
                self.anyone_changes_api_services || member(PRIVILEGED_GROUP)
            }
            Protected::ApiServiceRead => self.anyone_changes_api_services || user.name != ANONYMOUS,
            Protected::Monitoring => {
                self.anyone_reads_metrics || member(PRIVILEGED_GROUP) || member(MONITORING_GROUP)
            }
        };
        if allowed {
            return Ok(());
        }
        let reason = format!(
            "without an authorizer apiagg allows this only to {} (set authorization.mode: Webhook \
             to let the delegate's RBAC decide)",
            protected.who()
        );
        let attributes = apiagg_authz::request::attributes(request.info);
        Err(forbidden(user, &attributes, &reason))
    }

    /// One line per protected kind of request: who may, for the start-up log.
    pub fn describe(&self, anonymous: bool) -> Vec<String> {
        let who = |open: bool, protected: Protected| {
            if open && anonymous {
                "ANYONE, anonymous callers included".to_string()
            } else if open {
                "every authenticated caller".to_string()
            } else {
                protected.who().to_string()
            }
        };
        vec![
            format!(
                "APIService writes: {}",
                who(self.anyone_changes_api_services, Protected::ApiServiceWrite)
            ),
            format!(
                "APIService reads: {}",
                who(self.anyone_changes_api_services, Protected::ApiServiceRead)
            ),
            format!(
                "/metrics, /statusz, /flagz and /debug/apiagg: {}",
                who(self.anyone_reads_metrics, Protected::Monitoring)
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_apiagg_serves_itself_is_protected() {
        let of = |method: &str, target: &str| {
            let (path, query) = target
                .split_once('?')
                .map_or((target, None), |(p, q)| (p, Some(q)));
            let info = RequestInfo::new(method, path, query).expect("info");
            Protected::of(&info)
        };
        let api = "/apis/apiregistration.k8s.io/v1/apiservices";
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            assert_eq!(
                of(method, &format!("{api}/x")),
                Some(Protected::ApiServiceWrite)
            );
        }
        assert_eq!(of("DELETE", api), Some(Protected::ApiServiceWrite));
        assert_eq!(of("GET", api), Some(Protected::ApiServiceRead));
        assert_eq!(
            of("GET", &format!("{api}?watch=1")),
            Some(Protected::ApiServiceRead)
        );
        // The group-version's discovery document is discovery, as `/apis` is.
        assert_eq!(of("GET", "/apis/apiregistration.k8s.io/v1"), None);
        assert_eq!(of("GET", "/metrics"), Some(Protected::Monitoring));
        assert_eq!(of("GET", "/statusz"), Some(Protected::Monitoring));
        assert_eq!(of("GET", "/flagz"), Some(Protected::Monitoring));
        assert_eq!(
            of("GET", "/debug/apiagg/status"),
            Some(Protected::Monitoring)
        );
        for other in [
            "/metrics/x",
            "/flagz/x",
            "/debug/whoami",
            "/apis/apps/v1/deployments",
            "/apis",
        ] {
            assert_eq!(of("GET", other), None, "{other}");
        }
        assert_eq!(of("POST", "/apis/apps/v1/namespaces/n/deployments"), None);
    }
}
