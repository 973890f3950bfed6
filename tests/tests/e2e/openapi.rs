//! OpenAPI v2 and v3 merged at runtime, through the real `apiagg`: a delegate serving the
//! Kubernetes fixture documents and an oauth-apiserver backend whose documents live in a temp
//! folder the tests can change (the sample server reads them on every request).

use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime};

use apiagg_tests::openapi::*;
use apiagg_tests::*;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_works_for_delegate_and_backend_resources() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let cases: [(&str, &[&str]); 4] = [
        (
            "deployments.spec",
            &["DeploymentSpec", "replicas", "template"],
        ),
        (
            "pods.spec.containers",
            &["containers", "image", "livenessProbe"],
        ),
        (
            "oauthclients",
            &["OAuthClient", "oauth.openshift.io", "redirectURIs"],
        ),
        (
            "oauthclients.redirectURIs",
            &["redirectURIs", "redirection"],
        ),
    ];
    for binary in ["kubectl", KUBECTL_127_BIN] {
        for (what, expected) in cases {
            let (ok, out, err) = kubectl(binary, w.gw.port, &["explain", what]);
            assert!(ok, "{binary} explain {what} failed: {err}");
            for needle in expected {
                assert!(
                    out.contains(needle),
                    "{binary} explain {what}: no {needle:?} in\n{out}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_index_hashes_redirects_and_caching() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let entries = index(&w.gw).await;
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    // Exactly the delegate's group-versions and the backend's APIService group-versions (its
    // other keys, `apis` and `version`, belong to no APIService of it).
    assert_eq!(keys, ALL_KEYS);

    // The index has an ETag and answers 304.
    let r = get(&w.gw.url("/openapi/v3"), &[]).await;
    assert_eq!(header(&r, "content-type"), "application/json");
    let etag = header(&r, "etag");
    assert!(etag.starts_with('"'), "{etag}");
    let r = get(&w.gw.url("/openapi/v3"), &[("If-None-Match", &etag)]).await;
    assert_eq!(r.status(), 304);

    let expected_year = httpdate::parse_http_date;
    for (key, file) in [
        ("api/v1", fixtures().join("kubernetes/openapi-v3/api__v1_openapi.json")),
        (
            OAUTH_KEY,
            fixtures().join("extension-apiservers/oauth-apiserver/openapi-v3/apis__oauth.openshift.io__v1_openapi.json"),
        ),
    ] {
        let url = url_of(&entries, key).expect("listed");
        let expected = std::fs::read(&file).expect("fixture");
        let hash = sha512_upper_hex(&expected);
        assert_eq!(url, format!("/openapi/v3/{key}?hash={hash}"));

        // Current hash: the bytes, immutable for a year.
        let r = get(&w.gw.url(&url), &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "cache-control"), "public, immutable");
        assert_eq!(header(&r, "etag"), format!("\"{hash}\""));
        assert_eq!(header(&r, "content-type"), "application/json");
        let expires = expected_year(&header(&r, "expires")).expect("RFC 1123 Expires");
        let ahead = expires
            .duration_since(SystemTime::now())
            .expect("Expires in the future");
        assert!(ahead > Duration::from_secs(364 * 24 * 3600), "{ahead:?}");
        assert_eq!(&r.bytes().await.expect("body")[..], &expected[..]);

        // Stale hash: 301 to the current one.
        let stale = format!("/openapi/v3/{key}?hash=0123");
        let r = client_no_redirect().get(w.gw.url(&stale)).send().await.expect("get");
        assert_eq!(r.status(), 301);
        assert_eq!(header(&r, "location"), url);

        // No hash: ETag and 304.
        let plain = w.gw.url(&format!("/openapi/v3/{key}"));
        let r = get(&plain, &[]).await;
        assert_eq!(r.status(), 200);
        // What kube-apiserver's `WithCacheControl` gives an answer that sets none.
        assert_eq!(header(&r, "cache-control"), "no-cache, private");
        let r = get(&plain, &[("If-None-Match", &format!("\"{hash}\""))]).await;
        assert_eq!(r.status(), 304);
    }

    let r = get(&w.gw.url("/openapi/v3/apis/nothing.example.com/v1"), &[]).await;
    assert_eq!(r.status(), 404);
    let status: Value = serde_json::from_slice(&r.bytes().await.expect("body")).expect("JSON");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 404);
}

fn client_no_redirect() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_is_merged_negotiated_compressed_and_cached() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let url = w.gw.url("/openapi/v2");

    let r = get(&url, &[("Accept", "application/json")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "application/json");
    assert_eq!(header(&r, "content-encoding"), "");
    let etag = header(&r, "etag");
    let plain = r.bytes().await.expect("body");
    assert_eq!(etag, format!("\"{}\"", sha512_upper_hex(&plain)));
    let doc: Value = serde_json::from_slice(&plain).expect("valid JSON");
    let paths = doc["paths"].as_object().expect("paths");
    for path in [
        OAUTH_PATH,
        "/apis/user.openshift.io/v1/users",
        "/api/v1/namespaces/{namespace}/pods",
        "/apis/apps/v1/namespaces/{namespace}/deployments",
    ] {
        assert!(paths.contains_key(path), "{path} missing");
    }
    // The backend's paths outside its APIServices' group-versions are filtered out.
    assert!(!paths.contains_key("/apis/oauth.openshift.io/"));
    assert!(paths.contains_key("/apis/oauth.openshift.io/v1/"));
    assert!(doc["definitions"]
        .as_object()
        .expect("definitions")
        .keys()
        .any(|d| d.contains("oauth.v1.OAuthClient")));

    // 304 on a matching If-None-Match.
    let r = get(&url, &[("If-None-Match", &etag)]).await;
    assert_eq!(r.status(), 304);
    assert_eq!(header(&r, "etag"), etag);

    // gzip: the same bytes, compressed.
    let r = get(&url, &[("Accept-Encoding", "gzip")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-encoding"), "gzip");
    assert_eq!(header(&r, "vary"), "Accept, Accept-Encoding");
    assert_eq!(header(&r, "etag"), etag);
    let compressed = r.bytes().await.expect("body");
    assert!(compressed.len() < plain.len() / 4);
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..])
        .read_to_end(&mut unzipped)
        .expect("gunzip");
    assert_eq!(unzipped, &plain[..]);

    // Protobuf (gnostic), same ETag, also gzip-compressed; the first acceptable clause wins.
    for accept in [PROTOBUF, PROTOBUF_DOTTED] {
        let r = get(&url, &[("Accept", accept)]).await;
        assert_eq!(r.status(), 200, "{accept}");
        assert_eq!(header(&r, "content-type"), PROTOBUF_DOTTED);
        assert_eq!(header(&r, "etag"), etag);
        let body = r.bytes().await.expect("body");
        // swagger = "2.0" is field 1.
        assert!(body.windows(5).any(|w| w == b"\x0a\x032.0"));
        assert!(body
            .windows(OAUTH_PATH.len())
            .any(|w| w == OAUTH_PATH.as_bytes()));
    }
    let r = get(&url, &[("Accept", PROTOBUF), ("Accept-Encoding", "gzip")]).await;
    assert_eq!(header(&r, "content-encoding"), "gzip");
    assert_eq!(header(&r, "content-type"), PROTOBUF_DOTTED);
    let r = get(
        &url,
        &[("Accept", &format!("application/json, {PROTOBUF}"))],
    )
    .await;
    assert_eq!(header(&r, "content-type"), "application/json");
    let r = get(
        &url,
        &[("Accept", &format!("{PROTOBUF}, application/json"))],
    )
    .await;
    assert_eq!(header(&r, "content-type"), PROTOBUF_DOTTED);
    // Nothing acceptable: 406 Status; v3 documents are JSON only.
    for (path, accept) in [
        ("/openapi/v2", "application/yaml"),
        ("/openapi/v3/api/v1", PROTOBUF),
    ] {
        let r = get(&w.gw.url(path), &[("Accept", accept)]).await;
        assert_eq!(r.status(), 406, "{path} {accept}");
        let status: Value = serde_json::from_slice(&r.bytes().await.expect("body")).expect("JSON");
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 406);
    }
    let r = get(&url, &[("Accept", "*/*")]).await;
    assert_eq!(r.status(), 200);

    let metrics = String::from_utf8_lossy(
        &get(&w.gw.url("/metrics"), &[])
            .await
            .bytes()
            .await
            .expect("body"),
    )
    .to_string();
    assert!(metrics.contains("apiagg_openapi_v2_regenerations_total"));
    assert!(metrics.contains("apiagg_openapi_v2_regeneration_duration_seconds_count"));
}

/// Rewrites a JSON file of the oauth backend.
fn edit_json(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut doc: Value = serde_json::from_slice(&std::fs::read(path).expect("read")).expect("JSON");
    change(&mut doc);
    std::fs::write(path, serde_json::to_vec(&doc).expect("render")).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_backend_document_changes_its_hash_and_the_merge() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let before = index(&w.gw).await;
    let old_oauth = url_of(&before, OAUTH_KEY).expect("oauth");

    let docs = w.oauth_docs.path();
    edit_json(
        &docs.join("v3/apis__oauth.openshift.io__v1_openapi.json"),
        |doc| doc["info"]["title"] = Value::from("changed by the test"),
    );
    edit_json(&docs.join("swagger.json"), |doc| {
        let item = doc["paths"][OAUTH_PATH].clone();
        doc["paths"]["/apis/oauth.openshift.io/v1/newthings"] = item;
    });

    let after = wait_until(
        "the oauth document's hash to change (the index observed)",
        Duration::from_secs(20),
        || index(&w.gw),
        |index| url_of(index, OAUTH_KEY).as_ref() != Some(&old_oauth),
    )
    .await;
    let new_oauth = url_of(&after, OAUTH_KEY).expect("oauth");
    let doc = json(&w.gw.url(&new_oauth)).await;
    assert_eq!(doc["info"]["title"], "changed by the test");
    // Only that document's hash changed.
    for key in ALL_KEYS.iter().filter(|k| **k != OAUTH_KEY) {
        assert_eq!(url_of(&before, key), url_of(&after, key), "{key}");
    }
    // The old URL now redirects to the new one.
    let r = client_no_redirect()
        .get(w.gw.url(&old_oauth))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 301);
    assert_eq!(header(&r, "location"), new_oauth);

    let v2 = w.gw.url("/openapi/v2");
    let oauth_paths = || async {
        let doc = json(&v2).await;
        let paths = doc["paths"].as_object().into_iter().flat_map(|p| p.keys());
        let oauth = paths.filter(|p| p.starts_with("/apis/oauth.openshift.io/v1/"));
        oauth.cloned().collect::<Vec<String>>()
    };
    wait_until(
        "the changed v2 document to be merged (its oauth paths observed)",
        Duration::from_secs(20),
        oauth_paths,
        |paths| {
            paths
                .iter()
                .any(|p| p == "/apis/oauth.openshift.io/v1/newthings")
        },
    )
    .await;
}

/// Waits until the v3 index lists every source's group-versions (v2 not asked).
async fn wait_v3(gw: &Apiagg) {
    wait_until(
        "the v3 index to list every source (its keys observed)",
        Duration::from_secs(30),
        || async {
            let doc = json(&gw.url("/openapi/v3")).await;
            ALL_KEYS
                .iter()
                .filter(|k| doc["paths"].get(**k).is_none())
                .count()
        },
        |absent| *absent == 0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_is_merged_when_first_asked_and_can_be_turned_off() {
    // On demand: every source is read, but nothing of v2 is merged until a client asks.
    let w = world(None);
    w.gw.wait_ready().await;
    wait_v3(&w.gw).await;
    let regenerations = "apiagg_openapi_v2_regenerations_total";
    assert_eq!(w.gw.metric(regenerations).await, Some(0.0));
    let v2 = get(&w.gw.url("/openapi/v2"), &[]).await;
    assert_eq!(v2.status(), 200);
    let body = v2.text().await.expect("v2");
    assert!(
        body.contains(OAUTH_PATH),
        "the first answer is the whole merge"
    );
    assert_eq!(w.gw.metric(regenerations).await, Some(1.0));
    // Asked again, unchanged: served from what was merged.
    assert_eq!(get(&w.gw.url("/openapi/v2"), &[]).await.status(), 200);
    assert_eq!(w.gw.metric(regenerations).await, Some(1.0));

    // Off: v3 only; v2 is 404 as from a server without it; kubectl explains from v3.
    let off = world_with(None, &["--openapi-v2=false"]);
    off.gw.wait_ready().await;
    wait_v3(&off.gw).await;
    assert_eq!(get(&off.gw.url("/openapi/v2"), &[]).await.status(), 404);
    assert_eq!(off.gw.metric(regenerations).await, Some(0.0));
    let mut without_v2 = Vec::new();
    for minor in 27..=33 {
        let binary = format!("/usr/lib/google-cloud-sdk/bin/kubectl.1.{minor}");
        let (ok, out, err) = kubectl(&binary, w.gw.port, &["explain", "oauthclients"]);
        assert!(
            ok && out.contains("OAuthClient"),
            "1.{minor} on demand: {err}"
        );
        let (ok, out, err) = kubectl(&binary, off.gw.port, &["explain", "oauthclients"]);
        without_v2.push((minor, ok && out.contains("OAuthClient"), err));
    }
    // kubectl explains from v3 since 1.29; 1.27 and 1.28 read v2 and get what a kube-apiserver
    // without v2 answers them.
    for (minor, explained, err) in &without_v2 {
        if *minor >= 29 {
            assert!(explained, "1.{minor} without v2: {err}");
        } else {
            assert!(
                !explained && err.contains("NotFound"),
                "1.{minor} without v2: {err}"
            );
        }
    }
}
