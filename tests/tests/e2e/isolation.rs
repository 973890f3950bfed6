//! One bad APIService fails alone: a CA bundle without a certificate, or an endpoint name that
//! does not resolve, makes that APIService unavailable with the reason in its condition, while
//! the config is accepted and every other group keeps routing.

use std::time::Duration;

use apiagg_tests::*;
use base64::Engine;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_bundle_or_name_fails_only_its_apiservice() {
    let good = sample(G, "good", false);
    let garbage = base64::engine::general_purpose::STANDARD.encode("not a certificate");
    let config = format!(
        "services:\n{}{}  - {{namespace: test, name: nowhere, port: 443, endpoints: [\"https://no-such-host.invalid:443\"]}}\napiServices:\n{}{}{}",
        service("good", &good.url),
        service("badca", &good.url),
        apiservice(G, V, "good", ""),
        apiservice("badca.example.com", V, "badca", &format!(", caBundle: {garbage}")),
        apiservice("nowhere.example.com", V, "nowhere", ""),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let c = client();
    let flunders = gw.url(&format!("/apis/{G}/{V}/flunders"));
    assert_eq!(c.get(&flunders).send().await.expect("good").status(), 200);

    let condition = |name: &str| {
        let url = gw.url(&format!(
            "/apis/apiregistration.k8s.io/v1/apiservices/{name}"
        ));
        let c = c.clone();
        async move {
            let object = json_of(c.get(url).send().await.expect("get")).await;
            object["status"]["conditions"][0].clone()
        }
    };
    let (bad_ca, nowhere) = wait_until(
        "both broken APIServices to fail their discovery check (their conditions observed)",
        Duration::from_secs(10),
        || async {
            let bad_ca = condition(&format!("{V}.badca.example.com")).await;
            (bad_ca, condition(&format!("{V}.nowhere.example.com")).await)
        },
        |(bad_ca, nowhere)| {
            bad_ca["reason"] == "FailedDiscoveryCheck"
                && nowhere["reason"] == "FailedDiscoveryCheck"
        },
    )
    .await;
    assert_eq!(bad_ca["message"], "spec.caBundle: no PEM certificate found");
    assert!(
        nowhere["message"]
            .as_str()
            .unwrap_or("")
            .contains("no-such-host.invalid"),
        "{nowhere}"
    );
    for group in ["badca.example.com", "nowhere.example.com"] {
        let url = gw.url(&format!("/apis/{group}/{V}/flunders"));
        assert_eq!(
            c.get(&url).send().await.expect("bad").status(),
            503,
            "{group}"
        );
    }
    // The config was accepted whole: no failed reload.
    let metrics = get_text(&gw.url("/metrics")).await;
    assert!(
        !metrics.lines().any(
            |l| l.starts_with("apiagg_config_reloads_total{result=\"failure\"}")
                && !l.ends_with(" 0")
        ),
        "a reload failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiservices_behind_one_endpoint_are_judged_on_their_own_paths() {
    // The backend serves wardle only: `v1.other.example.com` on the same Service fails its own
    // probe (404) while wardle stays available.
    let backend = sample(G, "shared", false);
    let config = format!(
        "services:\n{}apiServices:\n{}{}",
        service("shared", &backend.url),
        apiservice(G, V, "shared", ""),
        apiservice_v1("other.example.com", "shared"),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let c = client();
    let reason = |name: &'static str| {
        let url = gw.url(&format!(
            "/apis/apiregistration.k8s.io/v1/apiservices/{name}"
        ));
        let c = c.clone();
        async move {
            let object = json_of(c.get(url).send().await.expect("get")).await;
            object["status"]["conditions"][0]["reason"].clone()
        }
    };
    wait_until(
        "the other APIService to fail its own probe",
        Duration::from_secs(10),
        || reason("v1.other.example.com"),
        |reason| reason == "FailedDiscoveryCheck",
    )
    .await;
    assert_eq!(reason("v1alpha1.wardle.example.com").await, "Passed");
    let flunders = gw.url(&format!("/apis/{G}/{V}/flunders"));
    assert_eq!(c.get(&flunders).send().await.expect("wardle").status(), 200);
}
