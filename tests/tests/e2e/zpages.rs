//! apiagg's own `/statusz` and `/flagz` (beta in Kubernetes 1.36, k8s.io/apiserver's
//! `pkg/server/statusz` and `pkg/server/flagz`): plain text by default, the structured
//! `config.k8s.io` object only on its exact `Accept` (a `Warning` for the deprecated
//! `v1alpha1`), 406 otherwise; behind non-resource authorization (without an authorizer:
//! `system:masters` and `system:monitoring`, as `/metrics`); apiagg's own even with a delegate.

use apiagg_tests::*;
use serde_json::Value;

const TOKENS: &str = "monitor-token,prometheus,uid-p,\"system:monitoring\"\n\
    alice-token,alice,uid-a,\"dev\"\n";
const STATUSZ_V1BETA1: &str = "application/json;g=config.k8s.io;v=v1beta1;as=Statusz";
const FLAGZ_V1BETA1: &str = "application/json;g=config.k8s.io;v=v1beta1;as=Flagz";

/// `(code, content type, warning, body)` of `GET path` with `token` and `accept`.
async fn get(
    gw: &Apiagg,
    path: &str,
    token: Option<&str>,
    accept: Option<&str>,
) -> (u16, String, String, bytes::Bytes) {
    let mut req = reqwest::Client::new().get(gw.url(path));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(accept) = accept {
        req = req.header("Accept", accept);
    }
    let resp = req.send().await.expect("request");
    let header = |name: &str| {
        let value = resp.headers().get(name).and_then(|v| v.to_str().ok());
        value.unwrap_or_default().to_string()
    };
    let (code, content_type) = (resp.status().as_u16(), header("content-type"));
    let warning = header("warning");
    (
        code,
        content_type,
        warning,
        resp.bytes().await.expect("body"),
    )
}

/// The value of flag `name` in the text form (whatever separator upstream's randomness picked).
fn text_flag<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        [": ", ":", "=", " "]
            .iter()
            .find_map(|sep| rest.strip_prefix(sep))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statusz_and_flagz_are_apiaggs_own_and_negotiated() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tokens.csv"), TOKENS).expect("tokens");
    let delegate = kube_delegate(false, &[]);
    let config = format!(
        "authentication: {{anonymous: true, tokenFile: tokens.csv}}\n\
         delegate: {{url: \"{}\"}}\n",
        delegate.url
    );
    let gw = Apiagg::start_in_secure(dir, &config, &["--max-requests-inflight", "321"]);
    gw.wait_ready().await;
    let monitor = Some("monitor-token");

    // Authorization: anonymous and alice refused, the monitoring group allowed.
    for path in ["/statusz", "/flagz"] {
        for token in [None, Some("alice-token")] {
            let (code, _, _, body) = get(&gw, path, token, None).await;
            let status: Value = serde_json::from_slice(&body).expect("a Status");
            assert_eq!(
                (code, &status["reason"]),
                (403, &Value::from("Forbidden")),
                "{path} {token:?}"
            );
        }
    }

    // Plain text by default (no Accept, text/plain, */*), about apiagg (not the delegate).
    for accept in [None, Some("text/plain"), Some("*/*")] {
        let (code, content_type, _, body) = get(&gw, "/statusz", monitor, accept).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(
            (code, content_type.as_str()),
            (200, "text/plain; charset=utf-8"),
            "{text}"
        );
        assert!(
            text.starts_with(
                "\napiagg statusz\nWarning: This endpoint is not meant to be machine parseable"
            ),
            "{text}"
        );
        for field in [
            "Started",
            "Up",
            "Binary version",
            "Emulation version",
            "Paths",
        ] {
            assert!(text.contains(&format!("\n{field}")), "{field}: {text}");
        }
    }
    let (code, _, _, body) = get(&gw, "/flagz", monitor, None).await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(code, 200, "{text}");
    assert!(text.starts_with("\napiagg flagz\n"), "{text}");
    assert_eq!(
        text_flag(&text, "max-requests-inflight"),
        Some("321"),
        "{text}"
    );
    assert_eq!(
        text_flag(&text, "max-mutating-requests-inflight"),
        Some("200"),
        "{text}"
    );
    assert_eq!(text_flag(&text, "reload-interval"), Some("200ms"), "{text}");

    // The structured form on its exact Accept, in JSON, YAML and CBOR.
    let (code, content_type, warning, body) =
        get(&gw, "/statusz", monitor, Some(STATUSZ_V1BETA1)).await;
    assert_eq!(
        (code, content_type.as_str(), warning.as_str()),
        (200, STATUSZ_V1BETA1, "")
    );
    let statusz: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(statusz["kind"], "Statusz");
    assert_eq!(statusz["apiVersion"], "config.k8s.io/v1beta1");
    assert_eq!(statusz["metadata"]["name"], "apiagg");
    assert!(statusz["uptimeSeconds"].as_u64().is_some(), "{statusz}");
    assert!(
        statusz["startTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{statusz}"
    );
    assert!(
        statusz["binaryVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "{statusz}"
    );
    assert!(
        statusz["paths"]
            .as_array()
            .is_some_and(|p| p.contains(&"/flagz".into())),
        "{statusz}"
    );
    let (code, content_type, _, body) = get(&gw, "/flagz", monitor, Some(FLAGZ_V1BETA1)).await;
    assert_eq!((code, content_type.as_str()), (200, FLAGZ_V1BETA1));
    let flagz: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(flagz["kind"], "Flagz");
    assert_eq!(flagz["flags"]["max-requests-inflight"], "321", "{flagz}");
    assert_eq!(flagz["flags"]["threads"], "2", "{flagz}");
    assert_eq!(
        flagz["flags"]["data-dir"], "",
        "unset flags are listed empty: {flagz}"
    );
    assert!(
        flagz["flags"]["config"]
            .as_str()
            .is_some_and(|c| c.ends_with("apiagg.yaml")),
        "{flagz}"
    );
    let yaml = "application/yaml;g=config.k8s.io;v=v1beta1;as=Flagz";
    let (code, content_type, _, body) = get(&gw, "/flagz", monitor, Some(yaml)).await;
    assert_eq!((code, content_type.as_str()), (200, yaml));
    let from_yaml: Value = serde_yaml_ng::from_slice(&body).expect("yaml");
    assert_eq!(from_yaml, flagz);
    let cbor = "application/cbor;g=config.k8s.io;v=v1beta1;as=Statusz";
    let (code, content_type, _, body) = get(&gw, "/statusz", monitor, Some(cbor)).await;
    assert_eq!((code, content_type.as_str()), (200, cbor));
    assert_eq!(apiagg_tests::cbor::decode(&body)["kind"], "Statusz");
    // The deprecated v1alpha1 with a Warning.
    let alpha = "application/json;g=config.k8s.io;v=v1alpha1;as=Flagz";
    let (code, content_type, warning, _) = get(&gw, "/flagz", monitor, Some(alpha)).await;
    assert_eq!((code, content_type.as_str()), (200, alpha));
    assert!(
        warning.starts_with("299 - \"This version of the flagz endpoint is deprecated."),
        "{warning}"
    );

    // 406 for anything else, plain JSON and a wrong kind included.
    for accept in [
        "application/json",
        "application/xml",
        "application/json;g=config.k8s.io;v=v1beta1",
        "application/json;g=config.k8s.io;v=v1beta1;as=Flagz",
    ] {
        let (code, _, _, body) = get(&gw, "/statusz", monitor, Some(accept)).await;
        let status: Value = serde_json::from_slice(&body).expect("a Status");
        assert_eq!(
            (code, &status["reason"]),
            (406, &Value::from("NotAcceptable")),
            "{accept}"
        );
        let message = status["message"].as_str().unwrap_or_default();
        assert!(message.contains("text/plain"), "{message}");
    }
}
