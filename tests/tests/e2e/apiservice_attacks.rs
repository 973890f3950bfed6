//! Attacks on the APIService API, as rows of the hostile-request table: route takeovers of groups
//! the delegate or Kubernetes owns, made-up subresources, and patch and alias bombs. Each row says
//! what apiagg answered and what the extension server and the delegate received.

use std::time::Duration;

use apiagg_tests::api::send;
use apiagg_tests::{kube_delegate, sample, status_code, wait_until, Apiagg, G, V};
use serde_json::json;

const API: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// Route takeovers through the API (docs/apiservice-api.md, "Groups that belong to someone
/// else": nothing takes over a group Kubernetes or the delegate owns; SECURITY.md, check 4) and
/// made-up subresources. Caller: an anonymous client the config authorizes for the API. Each
/// step: the attack, what apiagg answered, what the extension server and the delegate received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeovers_and_made_up_subresources_are_refused() {
    use reqwest::Method;
    let extension = sample(G, "extension", false);
    let held = apiagg_tests::hold_port();
    let config = |delegate: &str| {
        format!(
            "delegate: {{url: \"{delegate}\"}}\nservices:\n{}",
            apiagg_tests::service("extension", &extension.url)
        )
    };
    let gw = Apiagg::start(&config(&format!("http://127.0.0.1:{}", held.port)), &[]);
    let api = gw.url(API);
    let post =
        |object: serde_json::Value| send(Method::POST, &api, Some(("application/json", object)));

    // 1. The delegate is down, so its group-versions are unknown: core and apps are refused by
    //    name (422); any other remote APIService waits for them (503 + Retry-After).
    for (group, version) in [("", "v1"), ("apps", "v1")] {
        let (code, body) = post(apiagg_tests::api::remote(group, version, "extension")).await;
        assert_eq!(code, 422, "{body}");
        assert_eq!(
            body["details"]["causes"][0]["reason"], "FieldValueForbidden",
            "{body}"
        );
        let message = body["message"].as_str().unwrap_or("");
        assert!(
            message.contains(&format!("{group:?} is a built-in group of Kubernetes")),
            "{message}"
        );
    }
    let wardle = serde_json::to_vec(&apiagg_tests::api::remote(G, V, "extension")).expect("json");
    let (code, retry, body, _) =
        apiagg_tests::api::send_bytes(Method::POST, &api, "application/json", wardle.clone()).await;
    assert_eq!((code, retry.as_deref()), (503, Some("1")), "{body}");
    let secrets = gw.url("/api/v1/namespaces/kube-system/secrets");
    assert_ne!(status_code(&secrets).await, 200);
    assert_eq!(
        extension
            .requests("/api/v1/namespaces/kube-system/secrets")
            .await,
        0
    );

    // 2. The delegate comes up: the registration goes through once its groups are read.
    let delegate = kube_delegate(false, &["--listen", &format!("127.0.0.1:{}", held.port)]);
    wait_until(
        "the registration to go through (the last answer observed)",
        Duration::from_secs(20),
        || {
            let body = wardle.clone();
            apiagg_tests::api::send_bytes(Method::POST, &api, "application/json", body)
        },
        |(code, ..)| *code == 201,
    )
    .await;
    gw.wait_ready().await;
    // The delegate's group-versions are its local APIServices now: a create of one exists
    // already (409, as kube-apiserver answers); another version of a built-in group is refused
    // by name (422).
    let (code, body) = post(apiagg_tests::api::remote("apps", "v1", "extension")).await;
    assert_eq!(code, 409, "{body}");
    let (code, body) = post(apiagg_tests::api::remote("apps", "v9", "extension")).await;
    assert_eq!(code, 422, "{body}");
    let flunders = gw.url(&format!("/apis/{G}/{V}/flunders"));
    wait_until(
        "the backend to be served",
        Duration::from_secs(10),
        || status_code(&flunders),
        |code| *code == 200,
    )
    .await;
    assert!(status_code(&gw.url("/apis/apps/v1/deployments")).await == 200);
    assert_eq!(delegate.requests("/apis/apps/v1/deployments").await, 1);
    assert_eq!(extension.requests("/apis/apps/v1/deployments").await, 0);

    // 3. Only `status` is a subresource: a patch of `scale` (which authorization checks as
    //    `apiservices/scale`) re-points nothing, for every verb.
    let name = format!("{V}.{G}");
    let repoint = json!({"spec": {"service": {"name": "elsewhere"}}});
    for method in ["GET", "PUT", "PATCH", "POST", "DELETE"] {
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        let url = format!("{api}/{name}/scale");
        let (code, body) = send(
            method.clone(),
            &url,
            Some(("application/merge-patch+json", repoint.clone())),
        )
        .await;
        assert_eq!(code, 404, "{method} scale: {body}");
        assert_eq!(
            body["message"],
            "the server could not find the requested resource"
        );
    }
    let (_, object) = send(Method::GET, &format!("{api}/{name}"), None).await;
    assert_eq!(object["spec"]["service"]["name"], "extension", "{object}");
    assert_eq!(delegate.requests(&format!("{API}/{name}/scale")).await, 0);
    let before = extension.requests(&format!("/apis/{G}/{V}/flunders")).await;
    assert_eq!(status_code(&flunders).await, 200);
    assert_eq!(
        extension.requests(&format!("/apis/{G}/{V}/flunders")).await,
        before + 1
    );

    // 4. The delegate is replaced by one that serves wardle itself: the stored APIService never
    //    routes again and says why; GET and DELETE reach the stored object.
    let owner = apiagg_tests::api::wardle_delegate(gw.dir.path());
    gw.write_config(&config(&owner.url));
    let stored = format!("{api}/{name}");
    let (_, object) = wait_until(
        "the stored APIService to be marked ConflictsWithDelegate",
        Duration::from_secs(20),
        || send(Method::GET, &stored, None),
        |(_, object)| object["status"]["conditions"][0]["reason"] == "ConflictsWithDelegate",
    )
    .await;
    let condition = &object["status"]["conditions"][0];
    assert_eq!(condition["status"], "False", "{object}");
    let message = condition["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&format!("the delegate serves {G}/{V}")),
        "{message}"
    );
    let extension_before = extension.requests(&format!("/apis/{G}/{V}/flunders")).await;
    assert_eq!(status_code(&flunders).await, 200);
    assert_eq!(owner.requests(&format!("/apis/{G}/{V}/flunders")).await, 1);
    assert_eq!(
        extension.requests(&format!("/apis/{G}/{V}/flunders")).await,
        extension_before
    );
    let mut update = object.clone();
    update["spec"]["versionPriority"] = json!(16);
    let (code, body) = send(
        Method::PUT,
        &format!("{api}/{name}"),
        Some(("application/json", update)),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let (code, _) = send(Method::DELETE, &format!("{api}/{name}"), None).await;
    assert_eq!(code, 200);
    let (code, synthetic) = send(Method::GET, &format!("{api}/{name}"), None).await;
    assert_eq!(code, 200);
    assert_eq!(
        synthetic["metadata"]["annotations"]["apiagg.io/declared-in"],
        "the delegate"
    );
    let (code, _) = send(Method::DELETE, &format!("{api}/{name}"), None).await;
    assert_eq!(code, 405);
}

/// A JSON Patch that doubles a value 60 times, one of 10,001 operations, and a server-side
/// apply (or a YAML create or replace) whose 20,000 aliases each expand a 20,000-item anchor:
/// each gets a 4xx at once (within
/// 10 s even on a loaded machine, where doing the work would take minutes and gigabytes),
/// apiagg's peak memory stays flat, `/readyz` keeps answering and the APIService keeps routing
/// to its backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_and_alias_bombs_are_refused_at_once() {
    use reqwest::Method;
    let backend = sample(G, "wardle", false);
    let delegate = kube_delegate(false, &[]);
    let config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}",
        delegate.url,
        apiagg_tests::service("wardle", &backend.url)
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let name = format!("{V}.{G}");
    let object = apiagg_tests::api::remote(G, V, "wardle");
    let baseline = apiagg_tests::api::peak_rss_kib(gw.proc.child.id());
    let (code, body) = send(Method::POST, &api, Some(("application/json", object))).await;
    assert_eq!(code, 201, "{body}");

    let mut doubling = vec![json!({"op": "add", "path": "/bomb", "value": ["x".repeat(64)]})];
    doubling.extend((0..60).map(|_| json!({"op": "copy", "from": "/bomb", "path": "/bomb/-"})));
    let many: Vec<serde_json::Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/kind", "value": "APIService"}))
        .collect();
    let mut yaml = format!(
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: {name}\nspec:\n  a: &a ["
    );
    yaml.push_str(&vec!["x"; 20_000].join(","));
    yaml.push_str("]\n  b: [");
    yaml.push_str(&vec!["*a"; 20_000].join(","));
    yaml.push_str("]\n");
    let bombs = [
        (
            "60 doubling copies",
            "application/json-patch+json",
            serde_json::to_vec(&doubling).expect("json"),
            "",
        ),
        (
            "10,001 operations",
            "application/json-patch+json",
            serde_json::to_vec(&many).expect("json"),
            "The allowed maximum operations in a JSON patch is 10000, got 10001",
        ),
        (
            "alias bomb",
            "application/apply-patch+yaml",
            yaml.clone().into_bytes(),
            "its aliases expanded",
        ),
    ];
    for (what, content_type, body, message) in bombs {
        let size = body.len();
        let url = format!("{api}/{name}?fieldManager=bomb");
        let (code, _, answer, took) =
            apiagg_tests::api::send_bytes(Method::PATCH, &url, content_type, body).await;
        assert_eq!(code, 413, "{what}: {answer}");
        assert!(
            answer["message"].as_str().unwrap_or("").contains(message),
            "{what}: {answer}"
        );
        assert!(
            took < Duration::from_secs(10),
            "{what} ({size} bytes) took {took:?}"
        );
        eprintln!("{what}: {size} bytes refused in {took:?}");
        assert_eq!(status_code(&gw.url("/readyz")).await, 200, "after {what}");
    }
    // The same bomb as a YAML create or replace body: the same bounded decoder refuses it.
    for (method, url) in [
        (Method::POST, api.clone()),
        (Method::PUT, format!("{api}/{name}")),
    ] {
        let body = yaml.clone().into_bytes();
        let (code, _, answer, took) =
            apiagg_tests::api::send_bytes(method.clone(), &url, "application/yaml", body).await;
        assert_eq!(code, 413, "YAML {method}: {answer}");
        let message = answer["message"].as_str().unwrap_or("");
        assert!(
            message.contains("its aliases expanded"),
            "YAML {method}: {answer}"
        );
        assert!(
            took < Duration::from_secs(10),
            "YAML {method} took {took:?}"
        );
        assert_eq!(
            status_code(&gw.url("/readyz")).await,
            200,
            "after YAML {method}"
        );
    }
    // Sixteen alias bombs at once: each is refused (they take turns, memory stays bounded).
    let mut at_once = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (url, body) = (format!("{api}/{name}?fieldManager=bomb"), yaml.clone());
        at_once.spawn(async move {
            let yaml = "application/apply-patch+yaml";
            apiagg_tests::api::send_bytes(Method::PATCH, &url, yaml, body.into_bytes())
                .await
                .0
        });
    }
    while let Some(code) = at_once.join_next().await {
        assert_eq!(code.expect("a bomb's request"), 413);
    }
    assert_eq!(status_code(&gw.url("/readyz")).await, 200);
    let peak = apiagg_tests::api::peak_rss_kib(gw.proc.child.id());
    eprintln!(
        "apiagg peak RSS: {} MiB ({} MiB before the bombs)",
        peak / 1024,
        baseline / 1024
    );
    assert!(peak < 150 * 1024, "apiagg peaked at {peak} KiB");
    let (_, stored) = send(Method::GET, &format!("{api}/{name}"), None).await;
    assert!(
        stored["spec"].get("bomb").is_none() && stored["spec"].get("a").is_none(),
        "{stored}"
    );
    let flunders = gw.url(&format!("/apis/{G}/{V}/flunders"));
    wait_until(
        "the backend to be served",
        Duration::from_secs(10),
        || status_code(&flunders),
        |code| *code == 200,
    )
    .await;
    assert!(backend.requests(&format!("/apis/{G}/{V}/flunders")).await >= 1);
}
