//! The `--authorization-config` file (`AuthorizationConfiguration`) through the loader the
//! gateway calls (`apiagg_authz::validate::load`, from `gateway/src/auth/authz/structured.rs`):
//! strict YAML or JSON decoding, upstream's defaults, every check of
//! `ValidateAuthorizationConfiguration` and `ValidateWebhookConfiguration`, each match
//! condition compiled. A file that loads then has every webhook's match conditions evaluated on
//! two fixed SubjectAccessReview specs (a service account listing pods with selectors, and a
//! user reading a non-resource path), as `gateway/src/auth/authz/webhook.rs` does.
//!
//! Input: the file's bytes.
//!
//! Checked beyond "no panic": a refused file names at least one problem; a loaded file has at
//! least one authorizer, unique names, webhook timeouts in (0s, 30s].
#![no_main]

use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::Duration;

use apiagg_authz::review::review_spec;
use apiagg_authz::validate::{AuthorizerSpec, MAX_TIMEOUT};
use apiagg_authz::{Attributes, Operator, Requirement, Subject};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn specs() -> &'static [Value; 2] {
    static SPECS: OnceLock<[Value; 2]> = OnceLock::new();
    SPECS.get_or_init(|| {
        let groups = vec![
            "system:serviceaccounts".to_string(),
            "system:serviceaccounts:team-a".to_string(),
            "system:authenticated".to_string(),
        ];
        let extra = vec![(
            "authentication.kubernetes.io/pod-name".to_string(),
            vec!["runner-7f9".to_string()],
        )];
        let account = Subject {
            name: "system:serviceaccount:team-a:runner",
            uid: "0c9e",
            groups: &groups,
            extra: &extra,
        };
        let list = Attributes {
            verb: "list".into(),
            resource_request: true,
            namespace: "team-a".into(),
            version: "v1".into(),
            resource: "pods".into(),
            field_selector: Some(vec![Requirement {
                key: "spec.nodeName".into(),
                operator: Operator::In,
                values: vec!["node-1".into()],
            }]),
            label_selector: Some(vec![Requirement {
                key: "app".into(),
                operator: Operator::Exists,
                values: vec![],
            }]),
            ..Attributes::default()
        };
        let user_groups = vec!["oidc:dev".to_string()];
        let user = Subject {
            name: "alice@example.com",
            uid: "",
            groups: &user_groups,
            extra: &[],
        };
        let path = Attributes {
            verb: "get".into(),
            path: "/apis/metrics.k8s.io/v1beta1".into(),
            ..Attributes::default()
        };
        [review_spec(&account, &list), review_spec(&user, &path)]
    })
}

fuzz_target!(|data: &[u8]| {
    match apiagg_authz::validate::load(data) {
        Err(errors) => {
            assert!(!errors.0.is_empty(), "refused without a reason");
            let _ = errors.to_string();
        }
        Ok(loaded) => {
            assert!(!loaded.authorizers.is_empty(), "a chain of no authorizer");
            let mut names = HashSet::new();
            for authorizer in &loaded.authorizers {
                assert!(
                    names.insert(authorizer.name()),
                    "{:?} twice",
                    authorizer.name()
                );
                let _ = authorizer.type_name();
                if let AuthorizerSpec::Webhook(webhook) = authorizer {
                    assert!(webhook.timeout > Duration::ZERO, "{webhook:?}");
                    assert!(
                        webhook.timeout.as_nanos() <= MAX_TIMEOUT.0 as u128,
                        "{webhook:?}"
                    );
                    for spec in specs() {
                        let _ = webhook.match_conditions.evaluate(spec);
                    }
                }
            }
        }
    }
});
