//! An unavailable APIService, registered in both aggregators: `v1.dead.example.com`, its
//! Service pointing at a loopback port nothing listens on. The 503 each answers for its group
//! (code, reason, message), and the `Available` condition each reports.

use std::time::{Duration, Instant};

use apiagg_tests::real_kube::{apiservices_changing, free_port, Front, RealKube};
use apiagg_tests::wait_until;
use futures_util::FutureExt;
use serde_json::Value;

const DEAD: &str = "/apis/apiregistration.k8s.io/v1/apiservices/v1.dead.example.com";

/// The `Available` condition of `v1.dead.example.com` at `url` (kube-apiserver's or apiagg's
/// APIService API), once it is `False`.
async fn unavailable_condition(kube: &RealKube, who: &str, url: String) -> Value {
    let admin = &kube.client(Some(&kube.admin));
    let url = &url;
    wait_until(
        &format!("{who} to call v1.dead.example.com unavailable"),
        Duration::from_secs(30),
        move || async move {
            let (_, body) = apiagg_tests::real_kube::send(admin, "GET", url, None).await;
            let conditions = body["status"]["conditions"].as_array().cloned();
            let available = conditions
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Available");
            available.unwrap_or(Value::Null)
        },
        |condition| condition["status"] == "False",
    )
    .await
}

/// `GET url` as the admin: status, `Content-Type`, the Status `reason` (none when the body is
/// not a Status) and the message (the Status's, or the text of a body that is not JSON).
async fn answer(kube: &RealKube, url: &str) -> (u16, String, String, String) {
    let admin = kube.client(Some(&kube.admin));
    let response = admin.get(url).send().await.expect(url);
    let code = response.status().as_u16();
    let content_type = response.headers().get("content-type");
    let content_type = content_type
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let text = response.text().await.unwrap_or_default();
    match serde_json::from_str::<Value>(&text) {
        Ok(status) if status["kind"] == "Status" => (
            code,
            content_type,
            status["reason"].as_str().unwrap_or_default().to_string(),
            status["message"].as_str().unwrap_or_default().to_string(),
        ),
        _ => (
            code,
            content_type,
            String::new(),
            text.trim_end().to_string(),
        ),
    }
}

async fn compare(kube: &RealKube, front: &Front) -> String {
    let theirs = unavailable_condition(kube, "kube-apiserver", kube.kube_url(DEAD)).await;
    let ours = unavailable_condition(kube, "apiagg", front.url(DEAD)).await;
    let mut report = format!(
        "Available: kube-apiserver {} {:?}, apiagg {} {:?}\n",
        theirs["reason"], theirs["message"], ours["reason"], ours["message"]
    );
    // Both say why in their own words (kube-aggregator's probe through its proxy, apiagg's
    // own probe); the reason is the same.
    assert_eq!(theirs["reason"], ours["reason"], "{report}");
    for path in [
        "/apis/dead.example.com/v1",
        "/apis/dead.example.com/v1/namespaces/default/things",
    ] {
        let their = answer(kube, &kube.kube_url(path)).await;
        let our = answer(kube, &front.url(path)).await;
        report += &format!("GET {path}: kube-apiserver {their:?}, apiagg {our:?}\n");
        // kube-aggregator writes `service unavailable` as text (http.Error); apiagg writes a
        // Status whose message starts with those words and says which APIService and why.
        assert_eq!((their.0, our.0), (503, 503), "{report}");
        assert_eq!(their.3, "service unavailable", "{report}");
        assert_eq!(our.2, "ServiceUnavailable", "{report}");
        assert!(
            our.3
                .starts_with("service unavailable: APIService v1.dead.example.com: "),
            "{report}"
        );
    }
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_apiservice_answers_503_in_both() {
    let kube = RealKube::shared().await;
    // Nobody else walks the cluster's discovery while the dead APIService is registered.
    let _alone = apiservices_changing().await;
    let began = Instant::now();
    let dead = kube.apiservice("dead.example.com", "v1", "dead", free_port());
    kube.register(&dead).await;
    let checked = std::panic::AssertUnwindSafe(async {
        let front = kube
            .apiagg_with(Some("{mode: Webhook}"), std::slice::from_ref(&dead))
            .await;
        compare(kube, &front).await
    })
    .catch_unwind()
    .await;
    kube.unregister(&dead).await;
    match checked {
        Ok(report) => eprintln!("unavailable APIService ({:?}):\n{report}", began.elapsed()),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
