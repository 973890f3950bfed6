//! OpenAPI, the same documents from kube-apiserver's aggregator and from apiagg: `/openapi/v2`
//! (both merge kube-apiserver's own document with sample-apiserver's) and every document the
//! `/openapi/v3` index lists, each fetched under the hash its own index gives. Compared as
//! JSON (the order of object members does not count; arrays keep theirs).

use std::time::Duration;

use apiagg_tests::real_kube::{apiservices_steady, RealKube};
use apiagg_tests::wait_until;
use serde_json::Value;

use super::documents::get;

/// Where two documents differ, at most `limit` places, by JSON path.
fn differences(path: &str, theirs: &Value, ours: &Value, limit: usize, found: &mut Vec<String>) {
    if found.len() >= limit || theirs == ours {
        return;
    }
    match (theirs, ours) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let at = format!("{path}/{}", key.replace('/', "~1"));
                match b.get(key) {
                    Some(other) => differences(&at, value, other, limit, found),
                    None => found.push(format!("{at}: only at kube-apiserver")),
                }
            }
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                found.push(format!("{path}/{}: only at apiagg", key.replace('/', "~1")));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}/{i}"), x, y, limit, found);
            }
        }
        _ => {
            let short = |v: &Value| v.to_string().chars().take(160).collect::<String>();
            found.push(format!(
                "{path}: kube-apiserver {}, apiagg {}",
                short(theirs),
                short(ours)
            ));
        }
    }
    found.truncate(limit);
}

/// The `serverRelativeURL` of each group-version of a `/openapi/v3` index.
fn urls(index: &Value) -> Vec<(String, String)> {
    let paths = index["paths"].as_object().into_iter().flatten();
    let url = |(key, entry): (&String, &Value)| {
        let url = entry["serverRelativeURL"].as_str()?;
        Some((key.clone(), url.to_string()))
    };
    paths.filter_map(url).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_v2_and_every_v3_document_alike() {
    let kube = RealKube::shared().await;
    let _steady = apiservices_steady().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let json = "application/json";
    let mut differ = Vec::new();
    let mut table = String::new();

    let (their_code, _, theirs) = get(kube, &kube.kube_url("/openapi/v2"), json).await;
    let (our_code, our_type, ours) = get(kube, &front.url("/openapi/v2"), json).await;
    let mut found = Vec::new();
    differences("", &theirs, &ours, 20, &mut found);
    let count = |doc: &Value, key: &str| doc[key].as_object().map_or(0, |m| m.len());
    table += &format!(
        "/openapi/v2: kube-apiserver {their_code} ({} paths, {} definitions), apiagg {our_code} \
         {our_type} ({} paths, {} definitions): {}\n",
        count(&theirs, "paths"),
        count(&theirs, "definitions"),
        count(&ours, "paths"),
        count(&ours, "definitions"),
        if found.is_empty() { "same" } else { "DIFFER" }
    );
    assert_eq!((their_code, our_code), (200, 200), "{table}");
    if !found.is_empty() {
        differ.push(format!("/openapi/v2:\n  {}", found.join("\n  ")));
    }

    let (_, _, their_index) = get(kube, &kube.kube_url("/openapi/v3"), json).await;
    let (_, _, our_index) = get(kube, &front.url("/openapi/v3"), json).await;
    let (their_urls, our_urls) = (urls(&their_index), urls(&our_index));
    // `apis` and `version` flip at kube-apiserver (below): apiagg may lack one it read as a 502.
    let keys = |urls: &[(String, String)]| {
        let keys = urls.iter().map(|(k, _)| k.clone());
        let mut keys: Vec<String> = keys.filter(|k| k != "apis" && k != "version").collect();
        keys.sort();
        keys
    };
    assert_eq!(
        keys(&their_urls),
        keys(&our_urls),
        "the /openapi/v3 indexes list other group-versions"
    );
    let mut unstable = Vec::new();
    for (key, their_url) in &their_urls {
        // Both kube-apiserver and sample-apiserver publish `apis` and `version`: kube-apiserver
        // 1.37.2's index points at either server's document, flipping between fetches, and
        // answers 502 for half of them (docs/differences-from-kube-aggregator.md). Compared and
        // reported, not asserted.
        if key == "apis" || key == "version" {
            let (_, _, theirs) = get(kube, &kube.kube_url(their_url), json).await;
            let Some((_, our_url)) = our_urls.iter().find(|(k, _)| k == key) else {
                unstable.push(format!("{key}: not listed by apiagg"));
                continue;
            };
            let (_, _, ours) = get(kube, &front.url(our_url), json).await;
            let title = |doc: &Value| doc["info"]["title"].to_string();
            unstable.push(format!(
                "{key}: kube-apiserver {}, apiagg {}",
                title(&theirs),
                title(&ours)
            ));
            continue;
        }
        let our_url = &our_urls.iter().find(|(k, _)| k == key).expect("listed").1;
        // kube-apiserver answers 502 for a document its index lists until its OpenAPI v3
        // controller has read it (seen for `apis` and `version` just after it started).
        let (their_code, _, theirs) = wait_until(
            &format!("kube-apiserver to serve /openapi/v3/{key}"),
            Duration::from_secs(20),
            || {
                let url = kube.kube_url(their_url);
                async move { get(kube, &url, json).await }
            },
            |(code, _, _)| *code != 502,
        )
        .await;
        let (our_code, _, ours) = get(kube, &front.url(our_url), json).await;
        let mut found = Vec::new();
        if their_code != our_code {
            found.push(format!(
                "status: kube-apiserver {their_code}, apiagg {our_code}"
            ));
        }
        differences("", &theirs, &ours, 10, &mut found);

        if !found.is_empty() {
            differ.push(format!("/openapi/v3/{key}:\n  {}", found.join("\n  ")));
        }
    }
    table += &format!(
        "/openapi/v3: {} documents compared of {} listed, {} differ\n",
        their_urls.len() - unstable.len(),
        their_urls.len(),
        differ.len() - usize::from(differ.first().is_some_and(|d| d.starts_with("/openapi/v2")))
    );
    eprintln!(
        "OpenAPI documents:\n{table}not asserted (their titles): {}",
        unstable.join(", ")
    );
    assert!(
        differ.is_empty(),
        "documents differ:\n{}",
        differ.join("\n")
    );
}

/// A document asked under a stale `hash`: kube-apiserver (kube-openapi's handler3) and apiagg
/// both answer 301 to the same path with the current hash. That is the one redirect apiagg's own
/// OpenAPI downloads follow (controllers/openapi/download.rs: same path, same source, one hop),
/// asked here of the real server whose documents apiagg downloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_hash_is_redirected_to_the_same_path_with_the_current_one() {
    let kube = RealKube::shared().await;
    let _steady = apiservices_steady().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let client = kube.client_seeing_redirects(Some(&kube.admin));
    let path = "/openapi/v3/api/v1";
    let stale = format!("{path}?hash=0000");
    for (who, url) in [
        ("kube-apiserver", kube.kube_url(&stale)),
        ("apiagg", front.url(&stale)),
    ] {
        let answer = client.get(&url).send().await.expect("GET");
        let location = answer
            .headers()
            .get("location")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        assert_eq!(answer.status().as_u16(), 301, "{who}: GET {stale}");
        let current = location.strip_prefix(&format!("{path}?hash="));
        assert!(
            current.is_some_and(|hash| !hash.is_empty() && hash != "0000"),
            "{who}: Location {location:?} is not {path} with the current hash"
        );
    }
}
