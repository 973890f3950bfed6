//! API Priority and Fairness objects from the delegate's cluster (`--flow-control-from-cluster`):
//! apiagg lists and watches the delegate's FlowSchemas and PriorityLevelConfigurations with its
//! own token, applies them (a `Reject` level refuses beyond its seat, every answer names the
//! cluster's objects by UID), follows replacements and deletions without a restart, and keeps
//! the last good configuration serving when the cluster holds an object it refuses.

use std::time::Duration;

use apiagg_tests::trust::delegate_tokens;
use apiagg_tests::*;
use serde_json::{json, Value};

const GV: &str = "/apis/wardle.example.com/v1alpha1";
const FLOW: &str = "/apis/flowcontrol.apiserver.k8s.io/v1";
/// apiagg's own token at the delegate.
const TOKEN: &str = "apiagg-token-1";
/// Callers apiagg authenticates itself: `eve` is in the group the cluster's FlowSchema routes.
const TOKENS: &str = "tok-admin,admin,1,\"system:masters\"\ntok-eve,eve,4,\"refused\"\n";
const APPLY_LIMIT: Duration = Duration::from_secs(20);

/// A one-seat PriorityLevelConfiguration that lends and borrows nothing.
fn level(name: &str, limit_response: Value) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": limit_response}}
    })
}

fn reject() -> Value {
    json!({"type": "Reject"})
}

fn queue() -> Value {
    json!({"type": "Queue", "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 100}})
}

/// A FlowSchema sending every request of `group` to `level`.
fn schema(name: &str, group: &str, level: &str, precedence: u32) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "Group", "group": {"name": group}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "namespaces": ["*"], "clusterScope": true}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
            }]
        }
    })
}

/// One answer: status, `Retry-After`, and the UIDs of the FlowSchema and priority level.
#[derive(Debug, Clone)]
struct Answer {
    code: u16,
    retry_after: Option<String>,
    schema_uid: Option<String>,
    level_uid: Option<String>,
}

struct World {
    gw: Apiagg,
    delegate: Sample,
    _backend: Sample,
    _dir: tempfile::TempDir,
    client: reqwest::Client,
    /// UIDs the delegate gave the objects created before apiagg started.
    refuser_uid: String,
    tiny_uid: String,
    refused_uid: String,
}

impl World {
    /// A token-checking delegate serving the cluster's flow-control objects (a `Reject` level
    /// `refuser`, a queuing level `tiny`, FlowSchema `refused` sending group `refused` to
    /// `refuser`), a slow backend, and apiagg following the delegate's objects.
    async fn start() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = |name: &str| dir.path().join(name).to_str().expect("utf8").to_string();
        std::fs::write(path("delegate-tokens.csv"), delegate_tokens(TOKEN)).expect("tokens");
        std::fs::write(path("apiagg-token"), TOKEN).expect("token");
        std::fs::write(path("tokens.csv"), TOKENS).expect("tokens");
        let tokens = path("delegate-tokens.csv");
        let delegate = kube_delegate(false, &["--require-token", &tokens, "--cluster"]);
        let backend = sample(G, "wardle", false);
        let client = client();
        let mut created = Vec::new();
        // A real cluster also holds kube-apiserver's suggested levels (245 shares in 1.37),
        // which apiagg takes as given and does not add: one level of 245 shares stands for
        // them, so the test's one-share levels get one seat of the 200.
        let mut others = level("suggested-levels", queue());
        others["spec"]["limited"]["nominalConcurrencyShares"] = json!(245);
        for (collection, object) in [
            ("prioritylevelconfigurations", level("refuser", reject())),
            ("prioritylevelconfigurations", level("tiny", queue())),
            ("flowschemas", schema("refused", "refused", "refuser", 500)),
            ("prioritylevelconfigurations", others),
        ] {
            let url = format!("{}{FLOW}/{collection}", delegate.url);
            created.push(write(&client, reqwest::Method::POST, &url, &object).await);
        }
        let uid = |i: usize| created[i]["metadata"]["uid"].as_str().map(str::to_string);
        let config = format!(
            "delegate: {{url: \"{}\", bearerTokenFile: {}}}\n\
             authentication: {{anonymous: true, tokenFile: {}}}\n{}",
            delegate.url,
            path("apiagg-token"),
            path("tokens.csv"),
            one_backend("wardle", &backend)
        );
        let gw = Apiagg::start_logged(
            &config,
            &[
                "--max-requests-inflight",
                "100",
                "--max-mutating-requests-inflight",
                "100",
                "--flow-control-from-cluster",
            ],
        );
        gw.wait_ready().await;
        World {
            gw,
            delegate,
            _backend: backend,
            _dir: dir,
            client,
            refuser_uid: uid(0).expect("refuser uid"),
            tiny_uid: uid(1).expect("tiny uid"),
            refused_uid: uid(2).expect("refused uid"),
        }
    }

    /// Replaces (PUT) or creates (POST, `name` empty) an object at the delegate.
    async fn put(&self, collection: &str, name: &str, object: &Value) -> Value {
        let (method, url) = match name {
            "" => (reqwest::Method::POST, format!("{FLOW}/{collection}")),
            n => (reqwest::Method::PUT, format!("{FLOW}/{collection}/{n}")),
        };
        let url = format!("{}{url}", self.delegate.url);
        write(&self.client, method, &url, object).await
    }

    async fn delete(&self, collection: &str, name: &str) {
        let url = format!("{}{FLOW}/{collection}/{name}", self.delegate.url);
        let r = self.client.delete(&url).bearer_auth(TOKEN).send().await;
        let r = r.expect("delete at the delegate");
        assert!(r.status().is_success(), "DELETE {url}: {}", r.status());
    }

    /// The priority levels in force, by name (apiagg's dump, read as an exempt admin).
    async fn levels(&self) -> Vec<String> {
        let dump_path = "/debug/api_priority_and_fairness/dump_priority_levels";
        let r = self
            .client
            .get(self.gw.url(dump_path))
            .bearer_auth("tok-admin");
        let r = r.send().await.expect("dump");
        assert_eq!(r.status(), 200, "the dump");
        let text = r.text().await.expect("dump text");
        let names = text.lines().skip(1);
        names
            .filter_map(|l| l.split([',', ' ']).next().map(str::to_string))
            .collect()
    }

    /// Waits until apiagg's dump lists (or no longer lists) the level `name`.
    async fn wait_level(&self, name: &str, present: bool) {
        wait_until(
            &format!("level {name} present: {present} (the levels observed)"),
            APPLY_LIMIT,
            || self.levels(),
            |levels| levels.iter().any(|l| l == name) == present,
        )
        .await;
    }

    /// `n` slow requests of eve at once.
    async fn burst(&self, n: usize, ms: u64) -> Vec<Answer> {
        let url = self.gw.url(&format!("{GV}/slow?ms={ms}"));
        let tasks: Vec<_> = (0..n)
            .map(|_| tokio::spawn(send(self.client.clone(), url.clone())))
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.expect("join"));
        }
        answers
    }

    /// A burst meets the `refuser` level of the cluster: one seat served, the rest refused with
    /// `Retry-After`, every answer classified by the cluster's FlowSchema and level.
    async fn assert_refused_beyond_one_seat(&self) {
        let answers = self.burst(6, 1500).await;
        let served = answers.iter().filter(|a| a.code == 200).count();
        let refused: Vec<_> = answers.iter().filter(|a| a.code == 429).collect();
        assert_eq!((served, refused.len()), (1, 5), "{answers:?}");
        assert!(
            refused.iter().all(|a| a.retry_after.is_some()),
            "{answers:?}"
        );
        for a in &answers {
            assert_eq!(a.schema_uid.as_ref(), Some(&self.refused_uid), "{a:?}");
            assert_eq!(a.level_uid.as_ref(), Some(&self.refuser_uid), "{a:?}");
        }
    }

    /// Waits until a burst is all served, and returns it.
    async fn wait_all_served(&self) -> Vec<Answer> {
        wait_until(
            "a burst to be all served (the last burst observed)",
            APPLY_LIMIT,
            || self.burst(4, 300),
            |answers| answers.iter().all(|a| a.code == 200),
        )
        .await
    }

    /// Waits until apiagg's log has `needle`.
    async fn wait_log(&self, needle: &str) {
        wait_until(
            &format!("{needle:?} in apiagg's log (the log observed)"),
            APPLY_LIMIT,
            || async { Text(self.gw.log()) },
            |log| log.0.contains(needle),
        )
        .await;
    }
}

/// Sends `object` with apiagg's token; the stored object.
async fn write(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: &Value,
) -> Value {
    let r = client
        .request(method.clone(), url)
        .bearer_auth(TOKEN)
        .json(body);
    let r = r.send().await.expect("write to the delegate");
    assert!(r.status().is_success(), "{method} {url}: {}", r.status());
    json_of(r).await
}

async fn send(client: reqwest::Client, url: String) -> Answer {
    let r = client
        .get(url)
        .bearer_auth("tok-eve")
        .send()
        .await
        .expect("request");
    let header = |name: &str| {
        let value = r.headers().get(name)?.to_str().ok();
        value.map(str::to_string)
    };
    Answer {
        code: r.status().as_u16(),
        retry_after: header("retry-after"),
        schema_uid: header("x-kubernetes-pf-flowschema-uid"),
        level_uid: header("x-kubernetes-pf-prioritylevel-uid"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clusters_objects_apply_and_changes_follow_without_a_restart() {
    let w = World::start().await;
    // Listed at start: the cluster's levels join the built-in ones.
    w.wait_level("refuser", true).await;
    let levels = w.levels().await;
    assert!(levels.iter().any(|l| l == "tiny"), "{levels:?}");
    assert!(levels.iter().any(|l| l == "exempt"), "{levels:?}");
    w.assert_refused_beyond_one_seat().await;

    // Replaced in the cluster: the same FlowSchema now queues eve in `tiny`.
    let moved = schema("refused", "refused", "tiny", 500);
    w.put("flowschemas", "refused", &moved).await;
    let answers = w.wait_all_served().await;
    for a in &answers {
        assert_eq!(a.schema_uid.as_ref(), Some(&w.refused_uid), "{a:?}");
        assert_eq!(a.level_uid.as_ref(), Some(&w.tiny_uid), "{a:?}");
    }

    // Deleted in the cluster: eve falls to a built-in FlowSchema, and a removed level leaves.
    w.delete("flowschemas", "refused").await;
    let url = w.gw.url(&format!("{GV}/slow?ms=1"));
    wait_until(
        "eve to fall to another FlowSchema than the deleted one (the last answer observed)",
        APPLY_LIMIT,
        || send(w.client.clone(), url.clone()),
        |a| {
            a.code == 200 && a.schema_uid.is_some() && a.schema_uid.as_ref() != Some(&w.refused_uid)
        },
    )
    .await;
    w.delete("prioritylevelconfigurations", "refuser").await;
    w.wait_level("refuser", false).await;
    let levels = w.levels().await;
    assert!(levels.iter().any(|l| l == "tiny"), "{levels:?}");
    let log = w.gw.log();
    assert!(
        !log.contains("cannot read the cluster's flow-control objects"),
        "apiagg's own token was refused at the delegate:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_the_gateway_cannot_use_leave_the_last_good_configuration_serving() {
    let w = World::start().await;
    w.wait_level("refuser", true).await;
    w.assert_refused_beyond_one_seat().await;

    // A FlowSchema naming a level that does not exist, ahead of eve's: skipped and reported.
    w.put(
        "flowschemas",
        "",
        &schema("ghost", "refused", "nowhere", 100),
    )
    .await;
    w.wait_log("FlowSchema \"ghost\" skipped: priority level \"nowhere\" does not exist")
        .await;
    w.assert_refused_beyond_one_seat().await;

    // A FlowSchema that cannot be decoded: ignored and reported, the version before stays.
    let mut garbled = schema("refused", "refused", "tiny", 500);
    garbled["spec"]["matchingPrecedence"] = json!("first");
    w.put("flowschemas", "refused", &garbled).await;
    w.wait_log("ignoring an undecodable object").await;
    w.assert_refused_beyond_one_seat().await;

    // A level that fails validation (Queue without queuing): the whole change is refused, the
    // last good configuration (where `refuser` rejects) stays.
    let queue_without_queuing = level("refuser", json!({"type": "Queue"}));
    w.put(
        "prioritylevelconfigurations",
        "refuser",
        &queue_without_queuing,
    )
    .await;
    w.wait_log("the cluster's flow-control objects are refused, the last good configuration stays")
        .await;
    let log = w.gw.log();
    assert!(
        log.contains("PriorityLevelConfiguration \"refuser\"")
            && log.contains("spec.limited.limitResponse.queuing: Required value"),
        "the refusal does not name the object and field:\n{log}"
    );
    w.assert_refused_beyond_one_seat().await;
    let levels = w.levels().await;
    assert!(levels.iter().any(|l| l == "refuser"), "{levels:?}");

    // Fixed in the cluster: applied again, without a restart.
    w.put(
        "prioritylevelconfigurations",
        "refuser",
        &level("refuser", queue()),
    )
    .await;
    let answers = w.wait_all_served().await;
    for a in &answers {
        assert_eq!(a.level_uid.as_ref(), Some(&w.refuser_uid), "{a:?}");
    }
}
