//! Integration tests of the `sample-apiserver` binary over real loopback.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use apiagg_tests::fixtures;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const GV: &str = "/apis/wardle.example.com/v1alpha1";
const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// A running sample-apiserver, killed when dropped.
struct Server {
    child: Child,
    url: String,
    port: u16,
}

impl Server {
    /// Starts the binary and reads the `listening on URL` line.
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sample-apiserver"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sample-apiserver");
        let stdout = child.stdout.take().expect("stdout");
        let listening = apiagg_tests::read_listening(stdout).expect("the listening line");
        Server {
            child,
            url: listening.url,
            port: listening.port,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

#[tokio::test]
async fn create_get_list_delete() {
    let server = Server::start(&["--name", "crud"]);
    let http = client();
    let collection = server.url(&format!("{GV}/flunders"));

    let created = http
        .post(&collection)
        .json(&json!({"metadata": {"name": "one"}, "spec": {"a": 1}}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    assert_eq!(created.headers()["x-sample-server"], "crud");
    let created: Value = created.json().await.expect("json");
    assert_eq!(created["kind"], "Flunder");
    assert_eq!(created["apiVersion"], "wardle.example.com/v1alpha1");
    assert_eq!(created["metadata"]["resourceVersion"], "1");
    assert!(created["metadata"]["uid"]
        .as_str()
        .is_some_and(|u| u.len() == 36));
    assert!(created["metadata"]["creationTimestamp"].is_string());

    let duplicate = http
        .post(&collection)
        .json(&json!({"metadata": {"name": "one"}}))
        .send()
        .await
        .expect("duplicate");
    assert_eq!(duplicate.status(), 409);
    let status: Value = duplicate.json().await.expect("json");
    assert_eq!(status["reason"], "AlreadyExists");

    let bad = http
        .post(&collection)
        .body("{not json")
        .send()
        .await
        .expect("bad");
    assert_eq!(bad.status(), 400);
    let status: Value = bad.json().await.expect("json");
    assert_eq!(status["kind"], "Status");

    let got: Value = http
        .get(server.url(&format!("{GV}/flunders/one")))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(got, created);

    let list: Value = http
        .get(&collection)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(list["kind"], "FlunderList");
    assert_eq!(list["metadata"]["resourceVersion"], "1");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));

    let deleted = http
        .delete(server.url(&format!("{GV}/flunders/one")))
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 200);
    let missing = http
        .get(server.url(&format!("{GV}/flunders/one")))
        .send()
        .await
        .expect("get");
    assert_eq!(missing.status(), 404);
    let status: Value = missing.json().await.expect("json");
    assert_eq!(status["reason"], "NotFound");
    let again = http
        .delete(server.url(&format!("{GV}/flunders/one")))
        .send()
        .await
        .expect("delete");
    assert_eq!(again.status(), 404);
}

/// Reads the next newline-terminated event from a streaming response.
async fn next_event(resp: &mut reqwest::Response, buf: &mut Vec<u8>) -> Value {
    loop {
        if let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            return serde_json::from_slice(&line).expect("event JSON");
        }
        let chunk = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
            .await
            .expect("event within 5s")
            .expect("read chunk")
            .expect("stream still open");
        buf.extend_from_slice(&chunk);
    }
}

#[tokio::test]
async fn watch_streams_events_while_open() {
    let server = Server::start(&["--namespaced"]);
    let http = client();
    let ns = server.url(&format!("{GV}/namespaces/default/flunders"));
    let create = |name: &str| {
        http.post(&ns)
            .json(&json!({"metadata": {"name": name}}))
            .send()
    };
    assert_eq!(create("before").await.expect("create").status(), 201);

    let mut watch = http
        .get(format!("{ns}?watch=true&timeoutSeconds=30"))
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    assert_eq!(watch.headers()["content-type"], "application/json");
    assert_eq!(watch.headers()["transfer-encoding"], "chunked");
    let mut buf = Vec::new();

    let first = next_event(&mut watch, &mut buf).await;
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["metadata"]["name"], "before");

    assert_eq!(create("after").await.expect("create").status(), 201);
    let added = next_event(&mut watch, &mut buf).await;
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["metadata"]["name"], "after");
    assert_eq!(added["object"]["metadata"]["namespace"], "default");

    let deleted = http
        .delete(format!("{ns}/before"))
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 200);
    let event = next_event(&mut watch, &mut buf).await;
    assert_eq!(event["type"], "DELETED");
    assert_eq!(event["object"]["metadata"]["name"], "before");
}

#[tokio::test]
async fn watch_honours_timeout_seconds() {
    let server = Server::start(&[]);
    let resp = client()
        .get(server.url(&format!("{GV}/flunders?watch=1&timeoutSeconds=1")))
        .send()
        .await
        .expect("watch");
    let body = tokio::time::timeout(Duration::from_secs(5), resp.bytes())
        .await
        .expect("stream ends after timeoutSeconds")
        .expect("body");
    assert!(body.is_empty());
}

#[tokio::test]
async fn serves_oauth_apiserver_fixtures() {
    let dir = fixtures().join("extension-apiservers/oauth-apiserver/discovery");
    let server = Server::start(&["--fixtures", dir.to_str().expect("utf-8 path")]);
    let http = client();

    let resp = http
        .get(server.url("/apis/oauth.openshift.io/v1"))
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let served = resp.bytes().await.expect("body");
    let file = std::fs::read(dir.join("apis__oauth.openshift.io__v1.json")).expect("fixture");
    assert_eq!(served.as_ref(), file.as_slice());

    let legacy: Value = http
        .get(server.url("/apis"))
        .header("accept", "application/json")
        .send()
        .await
        .expect("apis")
        .json()
        .await
        .expect("json");
    assert_eq!(legacy["kind"], "APIGroupList");

    let kubectl_accept = format!(
        "{AGGREGATED_V2},application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
    );
    let resp = http
        .get(server.url("/apis"))
        .header("accept", kubectl_accept)
        .send()
        .await
        .expect("aggregated");
    assert_eq!(resp.headers()["content-type"], AGGREGATED_V2);
    let doc: Value = resp.json().await.expect("json");
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    assert_eq!(doc["items"][0]["metadata"]["name"], "oauth.openshift.io");

    let resp = http
        .get(server.url("/apis"))
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        )
        .send()
        .await
        .expect("v2beta1");
    let doc: Value = resp.json().await.expect("json");
    assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2beta1");

    for path in [
        "/openapi/v2",
        "/openapi/v3",
        "/openapi/v3/apis/oauth.openshift.io/v1",
    ] {
        let resp = http.get(server.url(path)).send().await.expect("openapi");
        assert_eq!(resp.status(), 200, "{path}");
    }

    let missing = http
        .get(server.url("/apis/nope/v1"))
        .send()
        .await
        .expect("404");
    assert_eq!(missing.status(), 404);
    let status: Value = missing.json().await.expect("json");
    assert_eq!(
        status["message"],
        "the server could not find the requested resource"
    );

    // The generated group is still served next to the fixtures.
    let generated = http.get(server.url(GV)).send().await.expect("generated");
    assert_eq!(generated.status(), 200);
}

#[tokio::test]
async fn echo_reports_request_headers() {
    let server = Server::start(&["--name", "echo-backend"]);
    let echo: Value = client()
        .get(server.url(&format!("{GV}/echo/sub?x=1")))
        .header("x-remote-user", "alice")
        .header("x-remote-group", "a")
        .header("x-remote-group", "b")
        .send()
        .await
        .expect("echo")
        .json()
        .await
        .expect("json");
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["path"], format!("{GV}/echo/sub"));
    assert_eq!(echo["query"], "x=1");
    assert_eq!(echo["headers"]["x-remote-user"], json!(["alice"]));
    assert_eq!(echo["headers"]["x-remote-group"], json!(["a", "b"]));
    assert_eq!(echo["server"], "echo-backend");
}

#[tokio::test]
async fn tls_with_written_ca() {
    let certs = tempfile::tempdir().expect("tempdir");
    let cert_dir = certs.path().join("certs");
    let server = Server::start(&[
        "--tls",
        "--h2",
        "--cert-dir",
        cert_dir.to_str().expect("utf-8 path"),
    ]);
    assert!(server.url.starts_with("https://127.0.0.1:"));
    for file in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(cert_dir.join(file).is_file(), "{file} written");
    }
    let ca = std::fs::read(cert_dir.join("ca.crt")).expect("ca.crt");
    let http = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("ca pem"))
        .build()
        .expect("client");

    for host in ["127.0.0.1", "localhost"] {
        let url = format!("https://{host}:{}/healthz", server.port());
        let resp = http.get(&url).send().await.expect("TLS request");
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.version(),
            reqwest::Version::HTTP_2,
            "ALPN h2 with --h2"
        );
        assert_eq!(resp.text().await.expect("body"), "ok");
    }
}

#[tokio::test]
async fn websocket_echo_round_trip() {
    let server = Server::start(&["--namespaced", "--name", "ws"]);
    let url = format!(
        "ws://127.0.0.1:{}{GV}/namespaces/default/flunders/x/exec",
        server.port()
    );
    let mut request = url.into_client_request().expect("request");
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "v5.channel.k8s.io, v4.channel.k8s.io"
            .parse()
            .expect("header"),
    );
    let (mut ws, resp) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket handshake");
    assert_eq!(
        resp.headers()["sec-websocket-protocol"],
        "v5.channel.k8s.io"
    );
    assert_eq!(resp.headers()["x-sample-server"], "ws");

    ws.send(Message::binary(vec![0u8, 1, 2, 3]))
        .await
        .expect("send binary");
    let echoed = ws.next().await.expect("message").expect("ok");
    assert_eq!(echoed, Message::binary(vec![0u8, 1, 2, 3]));
    ws.send(Message::text("hello")).await.expect("send text");
    let echoed = ws.next().await.expect("message").expect("ok");
    assert_eq!(echoed, Message::text("hello"));
    ws.close(None).await.expect("close");
}

#[tokio::test]
async fn spdy_upgrade_echoes_bytes() {
    let server = Server::start(&[]);
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port()))
        .await
        .expect("connect");
    let request = format!(
        "POST {GV}/flunders/x/exec HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.expect("read head");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: spdy/3.1"), "{head}");

    stream.write_all(b"raw spdy frames").await.expect("write");
    let mut echoed = [0u8; 15];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut echoed))
        .await
        .expect("echo within 5s")
        .expect("read");
    assert_eq!(&echoed, b"raw spdy frames");
}

#[tokio::test]
async fn generated_discovery_openapi_and_health() {
    let server = Server::start(&["--namespaced"]);
    let http = client();
    let get = |path: &str| http.get(server.url(path)).send();

    let group: Value = get("/apis/wardle.example.com/")
        .await
        .expect("group")
        .json()
        .await
        .expect("json");
    assert_eq!(group["kind"], "APIGroup");
    assert_eq!(group["preferredVersion"]["version"], "v1alpha1");
    let resources: Value = get(GV)
        .await
        .expect("resources")
        .json()
        .await
        .expect("json");
    assert_eq!(resources["resources"][0]["name"], "flunders");
    assert_eq!(resources["resources"][0]["namespaced"], true);

    let resp = http
        .get(server.url("/apis"))
        .header("accept", AGGREGATED_V2)
        .send()
        .await
        .expect("aggregated");
    assert_eq!(resp.headers()["content-type"], AGGREGATED_V2);
    let doc: Value = resp.json().await.expect("json");
    let resource = &doc["items"][0]["versions"][0]["resources"][0];
    assert_eq!(resource["resource"], "flunders");
    assert_eq!(resource["scope"], "Namespaced");

    let v2: Value = get("/openapi/v2")
        .await
        .expect("v2")
        .json()
        .await
        .expect("json");
    assert!(v2["paths"][format!("{GV}/namespaces/{{namespace}}/flunders")].is_object());
    let index: Value = get("/openapi/v3")
        .await
        .expect("v3")
        .json()
        .await
        .expect("json");
    let url = index["paths"]["apis/wardle.example.com/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .expect("v3 entry")
        .to_string();
    assert_eq!(get(&url).await.expect("v3 doc").status(), 200);

    for path in ["/healthz", "/readyz", "/livez"] {
        assert_eq!(
            get(path).await.expect("health").text().await.expect("body"),
            "ok"
        );
    }
    let version: Value = get("/version")
        .await
        .expect("version")
        .json()
        .await
        .expect("json");
    assert_eq!(version["major"], "1");
    let slow: Value = get(&format!("{GV}/slow?ms=50"))
        .await
        .expect("slow")
        .json()
        .await
        .expect("json");
    assert_eq!(slow["sleptMs"], 50);
    let redirect = get(&format!("{GV}/redirect")).await.expect("redirect");
    assert_eq!(redirect.status(), 302);
    assert!(redirect.headers().contains_key("location"));
}
