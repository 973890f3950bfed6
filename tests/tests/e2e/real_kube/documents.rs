//! Discovery and OpenAPI documents, the same request to kube-apiserver's aggregator and to
//! apiagg, compared on what clients read: wardle's entry of aggregated discovery (`/apis` with
//! the v2 Accept), legacy discovery of the group and its version, the `/openapi/v3` index entry
//! of the group-version and the document it points to (apiagg serves it under its own hash: the
//! content is compared, not the URL).

use apiagg_tests::real_kube::{apiservices_steady, Front, RealKube, WARDLE};
use serde_json::Value;

/// The Accept of kubectl 1.37 and client-go's discovery.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
    application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
const GROUP: &str = "wardle.example.com";
const INDEX_KEY: &str = "apis/wardle.example.com/v1alpha1";

/// `GET url` with `accept` as the admin: status, `Content-Type`, the body as JSON.
pub(super) async fn get(kube: &RealKube, url: &str, accept: &str) -> (u16, String, Value) {
    let admin = kube.client(Some(&kube.admin));
    let answer = admin
        .get(url)
        .header("Accept", accept)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let code = answer.status().as_u16();
    let content_type = answer
        .headers()
        .get("content-type")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let text = answer.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (code, content_type, body)
}

/// One document, read at both: `read` picks what clients read of it.
struct Row {
    what: String,
    theirs: Value,
    ours: Value,
}

/// `GET path` at both with `accept`; the status, the content type's media type and `pick` of
/// the body.
async fn both(
    kube: &RealKube,
    front: &Front,
    path: &str,
    accept: &str,
    pick: impl Fn(&Value) -> Value,
) -> Row {
    let read = |(code, content_type, body): (u16, String, Value)| serde_json::json!({"code": code, "contentType": content_type, "read": pick(&body)});
    Row {
        what: format!(
            "GET {path} ({})",
            accept.split(',').next().unwrap_or_default()
        ),
        theirs: read(get(kube, &kube.kube_url(path), accept).await),
        ours: read(get(kube, &front.url(path), accept).await),
    }
}

/// The entry of `group` in an APIGroupDiscoveryList.
fn aggregated_entry(list: &Value, group: &str) -> Value {
    let items = list["items"].as_array().into_iter().flatten();
    let entry = items.clone().find(|g| g["metadata"]["name"] == group);
    entry.cloned().unwrap_or(Value::Null)
}

/// The group names of an APIGroupDiscoveryList, in order.
fn group_names(list: &Value) -> Value {
    let items = list["items"].as_array().into_iter().flatten();
    items.map(|g| g["metadata"]["name"].clone()).collect()
}

/// What a `/openapi/v3` document says: every key but `servers` (none is expected: reported).
fn document(doc: &Value) -> Value {
    let mut doc = doc.clone();
    if let Some(map) = doc.as_object_mut() {
        map.remove("servers");
    }
    doc
}

/// The index's entry for wardle's group-version: its URL with the hash written as `<hash>`,
/// and whether the hash is 128 hex digits (upstream's SHA-512, in capitals).
fn index_entry(index: &Value) -> Value {
    let url = index["paths"][INDEX_KEY]["serverRelativeURL"].as_str();
    let Some(url) = url else { return Value::Null };
    let (path, hash) = url.split_once("?hash=").unwrap_or((url, ""));
    serde_json::json!({"path": path, "hashHexDigits": hash.chars().filter(char::is_ascii_hexdigit).count(),
        "hashUpper": hash == hash.to_uppercase()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_openapi_v3_documents_alike() {
    let kube = RealKube::shared().await;
    // The group list is compared whole: no APIService comes or goes meanwhile.
    let _steady = apiservices_steady().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let mut rows = vec![
        both(kube, &front, "/apis", AGGREGATED, |l| {
            aggregated_entry(l, GROUP)
        })
        .await,
        both(kube, &front, "/apis", AGGREGATED, group_names).await,
        both(
            kube,
            &front,
            &format!("/apis/{GROUP}"),
            "application/json",
            Value::clone,
        )
        .await,
        both(kube, &front, WARDLE, "application/json", Value::clone).await,
    ];
    rows[0].what += ": wardle's entry";
    rows[1].what += ": the groups, in order";
    // The index: apiagg serves it as `application/json` on purpose (kube-aggregator's
    // `handleDiscovery` sets no Content-Type: Go sniffs `text/plain`); the entry is compared,
    // the type noted (docs/differences-from-kube-aggregator.md).
    let mut index = both(kube, &front, "/openapi/v3", "application/json", index_entry).await;
    let noted = format!(
        "Content-Type: kube-apiserver {}, apiagg {}",
        index.theirs["contentType"], index.ours["contentType"]
    );
    for side in [&mut index.theirs, &mut index.ours] {
        side["contentType"] = Value::Null;
    }
    index.what += &format!(" ({noted})");
    rows.push(index);
    // The document each index points to (each under its own hash).
    let (_, _, their_index) = get(kube, &kube.kube_url("/openapi/v3"), "application/json").await;
    let (_, _, our_index) = get(kube, &front.url("/openapi/v3"), "application/json").await;
    let url = |index: &Value| {
        let url = index["paths"][INDEX_KEY]["serverRelativeURL"].as_str();
        url.unwrap_or_else(|| panic!("no {INDEX_KEY} in {index}"))
            .to_string()
    };
    let (theirs, ours) = (url(&their_index), url(&our_index));
    let read = |(code, content_type, body): (u16, String, Value)| serde_json::json!({"code": code, "contentType": content_type, "read": document(&body)});
    rows.push(Row {
        what: format!("GET /openapi/v3/{INDEX_KEY}?hash=… (the document)"),
        theirs: read(get(kube, &kube.kube_url(&theirs), "application/json").await),
        ours: read(get(kube, &front.url(&ours), "application/json").await),
    });

    let mut differ = Vec::new();
    let mut table = String::new();
    for row in &rows {
        let same = row.theirs == row.ours;
        table += &format!("{}: {}\n", row.what, if same { "same" } else { "DIFFER" });
        if !same {
            differ.push(format!(
                "{}\n  kube-apiserver: {}\n  apiagg:         {}",
                row.what, row.theirs, row.ours
            ));
        }
    }
    eprintln!("discovery and OpenAPI rows:\n{table}");
    assert!(
        differ.is_empty(),
        "documents differ:\n{}",
        differ.join("\n")
    );
}
