//! `/healthz`, `/livez`, `/readyz` with named checks, per-check paths, `verbose` and `exclude`
//! (k8s.io/apiserver's `pkg/server/healthz/healthz.go`).

use super::lifecycle::{Lifecycle, Milestone};

/// Which health endpoint is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/healthz`
    Healthz,
    /// `/livez`
    Livez,
    /// `/readyz`
    Readyz,
}

impl Endpoint {
    /// The endpoint for a path's first segment.
    pub fn from_segment(segment: &str) -> Option<Endpoint> {
        match segment {
            "healthz" => Some(Endpoint::Healthz),
            "livez" => Some(Endpoint::Livez),
            "readyz" => Some(Endpoint::Readyz),
            _ => None,
        }
    }

    /// The endpoint's path (`/readyz`, …).
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Healthz => "/healthz",
            Endpoint::Livez => "/livez",
            Endpoint::Readyz => "/readyz",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
        }
    }
}

/// A health answer: status code and plain-text body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// 200 or 500.
    pub code: u16,
    /// Body text.
    pub body: String,
}

impl Answer {
    fn new(code: u16, body: impl Into<String>) -> Answer {
        Answer {
            code,
            body: body.into(),
        }
    }
}

/// One named check: the milestones it needs, and what it says when one is missing.
struct Check {
    name: &'static str,
    needs: &'static [Milestone],
    /// A milestone that fails the check once reached (shutdown).
    failed_by: Option<Milestone>,
    failure: &'static str,
}

impl Check {
    const fn new(name: &'static str, needs: &'static [Milestone], failure: &'static str) -> Self {
        Check {
            name,
            needs,
            failed_by: None,
            failure,
        }
    }

    fn run(&self, lc: &Lifecycle) -> Result<(), &'static str> {
        let missing = self.needs.iter().any(|m| !lc.reached(*m));
        let failed = self.failed_by.is_some_and(|m| lc.reached(m));
        if missing || failed {
            Err(self.failure)
        } else {
            Ok(())
        }
    }
}

use Milestone::*;

/// Checks of every endpoint.
const ALWAYS: [Check; 2] = [Check::new("ping", &[], ""), Check::new("log", &[], "")];

/// Start-up checks of `/healthz` and `/readyz`, in kube-apiserver's order.
const START_UP: [Check; 6] = [
    Check::new("config", &[ConfigLoaded], "no valid config loaded yet"),
    Check::new(
        "poststarthook/apiservice-registration-controller",
        &[ConfigLoaded, DelegateRegistered],
        "not finished",
    ),
    Check::new(
        "poststarthook/apiservice-discovery-controller",
        &[DiscoverySynced],
        "not finished",
    ),
    Check::new(
        "poststarthook/apiservice-openapi-controller",
        &[OpenApiSynced],
        "the first OpenAPI merge is not done",
    ),
    Check::new(
        "poststarthook/apiservice-openapiv3-controller",
        &[OpenApiSynced],
        "the first OpenAPI merge is not done",
    ),
    Check::new(
        "autoregister-completion",
        &[DelegateRegistered],
        "the delegate's group-versions are not registered yet",
    ),
];

/// `/readyz` only: red until the RBAC authorizer listed the cluster's roles and bindings
/// (kube-apiserver's `informer-sync`).
const INFORMER_SYNC: Check = Check::new(
    "informer-sync",
    &[AuthorizerSynced],
    "the cluster's RBAC objects are not listed yet",
);

/// `/readyz` only: red until the cluster's FlowSchemas and PriorityLevelConfigurations are
/// applied (`--flow-control-from-cluster`; kube-apiserver's hook of the same name waits for
/// its flow-control informers): before, requests are classified by the built-in objects.
const FLOW_CONTROL_SYNC: Check = Check::new(
    "poststarthook/priority-and-fairness-config-consumer",
    &[FlowControlSynced],
    "the cluster's flow-control objects are not applied yet",
);

/// `/readyz` only: red from SIGTERM on.
const SHUTDOWN: Check = Check {
    name: "shutdown",
    needs: &[],
    failed_by: Some(ShuttingDown),
    failure: "process is shutting down",
};

/// The checks of an endpoint, in registration order.
fn checks(endpoint: Endpoint) -> Vec<&'static Check> {
    let mut list: Vec<&'static Check> = ALWAYS.iter().collect();
    if endpoint != Endpoint::Livez {
        list.extend(START_UP.iter());
    }
    if endpoint == Endpoint::Readyz {
        list.push(&INFORMER_SYNC);
        list.push(&FLOW_CONTROL_SYNC);
        list.push(&SHUTDOWN);
    }
    list
}

/// Answers `/<endpoint>` (`check` empty) or `/<endpoint>/<check>` with the raw query string;
/// `None` for a check the endpoint does not have (the caller answers 404, as for any path
/// nothing serves).
pub fn answer(
    endpoint: Endpoint,
    check: &str,
    query: Option<&str>,
    lc: &Lifecycle,
) -> Option<Answer> {
    let list = checks(endpoint);
    if !check.is_empty() {
        let c = list.iter().find(|c| c.name == check)?;
        return Some(match c.run(lc) {
            Ok(()) => Answer::new(200, "ok"),
            Err(e) => Answer::new(500, format!("internal server error: {e}\n")),
        });
    }

    let mut verbose = false;
    let mut excludes: Vec<String> = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "verbose" => verbose = true,
            "exclude" => excludes.push(value.into_owned()),
            _ => {}
        }
    }

    let mut lines = String::new();
    let mut failed = false;
    for c in &list {
        let name = c.name;
        if excludes.iter().any(|e| e == name) {
            lines.push_str(&format!("[+]{name} excluded: ok\n"));
            continue;
        }
        match c.run(lc) {
            Ok(()) => lines.push_str(&format!("[+]{name} ok\n")),
            Err(e) => {
                tracing::info!(
                    check = name,
                    endpoint = endpoint.name(),
                    "health check failed: {e}"
                );
                failed = true;
                lines.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    let unmatched: Vec<String> = excludes
        .iter()
        .filter(|e| !list.iter().any(|c| c.name == e.as_str()))
        .map(|e| format!("{e:?}"))
        .collect();
    if !unmatched.is_empty() {
        lines.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            unmatched.join(",")
        ));
    }
    let name = endpoint.name();
    Some(if failed {
        Answer::new(500, format!("{lines}{name} check failed\n"))
    } else if verbose {
        Answer::new(200, format!("{lines}{name} check passed\n"))
    } else {
        Answer::new(200, "ok")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer of a check or an endpoint that exists.
    fn answer(endpoint: Endpoint, check: &str, query: Option<&str>, lc: &Lifecycle) -> Answer {
        super::answer(endpoint, check, query, lc).expect("an existing check")
    }

    fn ready() -> std::sync::Arc<Lifecycle> {
        let lc = Lifecycle::new();
        for m in [
            ConfigLoaded,
            DelegateRegistered,
            DiscoverySynced,
            OpenApiSynced,
            AuthorizerSynced,
            FlowControlSynced,
        ] {
            lc.reach(m);
        }
        lc
    }

    #[test]
    fn passing_plain_and_verbose() {
        let lc = ready();
        assert_eq!(answer(Endpoint::Readyz, "", None, &lc).body, "ok");
        let v = answer(Endpoint::Readyz, "", Some("verbose=false"), &lc);
        assert_eq!(v.code, 200);
        assert!(v.body.starts_with("[+]ping ok\n[+]log ok\n"));
        assert!(v.body.contains("[+]shutdown ok\n"));
        assert!(v.body.ends_with("readyz check passed\n"));
    }

    #[test]
    fn failing_lists_and_withholds_reasons() {
        let lc = Lifecycle::new();
        let a = answer(Endpoint::Readyz, "", None, &lc);
        assert_eq!(a.code, 500);
        assert!(a.body.contains(
            "[-]poststarthook/apiservice-registration-controller failed: reason withheld\n"
        ));
        assert!(a.body.ends_with("readyz check failed\n"));
        let one = answer(
            Endpoint::Readyz,
            "poststarthook/apiservice-registration-controller",
            None,
            &lc,
        );
        assert_eq!(
            (one.code, one.body.as_str()),
            (500, "internal server error: not finished\n")
        );
        assert_eq!(answer(Endpoint::Livez, "", None, &lc).code, 200);
    }

    #[test]
    fn readyz_waits_for_the_authorizers_objects_and_healthz_does_not() {
        let lc = Lifecycle::new();
        for m in [
            ConfigLoaded,
            DelegateRegistered,
            DiscoverySynced,
            OpenApiSynced,
        ] {
            lc.reach(m);
        }
        let a = answer(Endpoint::Readyz, "", Some("verbose"), &lc);
        assert_eq!(a.code, 500, "{}", a.body);
        assert!(a.body.contains("[-]informer-sync failed"), "{}", a.body);
        let flow = "[-]poststarthook/priority-and-fairness-config-consumer failed";
        assert!(a.body.contains(flow), "{}", a.body);
        assert_eq!(answer(Endpoint::Healthz, "", None, &lc).code, 200);
        lc.reach(AuthorizerSynced);
        assert_eq!(answer(Endpoint::Readyz, "", None, &lc).code, 500);
        lc.reach(FlowControlSynced);
        assert_eq!(answer(Endpoint::Readyz, "", None, &lc).code, 200);
    }

    #[test]
    fn exclude_and_unknown_names() {
        let lc = ready();
        lc.reach(ShuttingDown);
        let a = answer(
            Endpoint::Readyz,
            "",
            Some("verbose&exclude=shutdown&exclude=nope&exclude=poststarthook%2Fapiservice-registration-controller"),
            &lc,
        );
        assert_eq!(a.code, 200, "{}", a.body);
        assert!(a.body.contains("[+]shutdown excluded: ok\n"));
        assert!(a
            .body
            .contains("[+]poststarthook/apiservice-registration-controller excluded: ok\n"));
        assert!(a
            .body
            .contains("warn: some health checks cannot be excluded: no matches for \"nope\"\n"));
        assert_eq!(answer(Endpoint::Healthz, "", None, &lc).code, 200);
        assert_eq!(
            answer(Endpoint::Readyz, "shutdown", None, &lc).body,
            "internal server error: process is shutting down\n"
        );
        assert!(super::answer(Endpoint::Readyz, "nope", None, &lc).is_none());
    }
}
