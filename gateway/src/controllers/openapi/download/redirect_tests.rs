//! Redirects of v3 documents, over HTTP/1.1 on loopback: a stale `hash` answered 301 is
//! followed to the current one, once; a redirect anywhere else is refused without asking its
//! target.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::super::documents::Documents;
use super::{fetch_v3_document, Download, Error, V3State};
use crate::backends::{Client, Clients, Upstream};

const TIMEOUT: Duration = Duration::from_secs(5);
const DOC: &str = r#"{"openapi":"3.0.0","info":{"title":"t","version":"v"},"paths":{}}"#;
const OLD: &str = "/openapi/v3/apis?hash=OLD";
const NEW: &str = "/openapi/v3/apis?hash=NEW";

/// One answer of the test server.
#[derive(Clone)]
struct Answer {
    status: u16,
    location: Option<String>,
    body: String,
}

fn ok(body: &str) -> Answer {
    Answer {
        status: 200,
        location: None,
        body: body.to_string(),
    }
}

fn redirect(status: u16, location: Option<&str>) -> Answer {
    Answer {
        status,
        location: location.map(str::to_string),
        body: String::new(),
    }
}

fn index(url: &str) -> Answer {
    ok(&serde_json::json!({"paths": {"apis": {"serverRelativeURL": url}}}).to_string())
}

/// A request as received: its target and `If-None-Match`.
#[derive(Debug, Clone, PartialEq)]
struct Received {
    target: String,
    if_none_match: Option<String>,
}

type Answers = Arc<Mutex<HashMap<String, Answer>>>;

/// A server answering request targets (path and query) from a table, 404 otherwise, and
/// recording every request.
struct Server {
    addr: SocketAddr,
    answers: Answers,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Server {
    async fn start(answers: &[(&str, Answer)]) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let answers: Answers = Arc::new(Mutex::new(
            answers
                .iter()
                .map(|(target, answer)| (target.to_string(), answer.clone()))
                .collect(),
        ));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (table, log) = (answers.clone(), received.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, table.clone(), log.clone()));
            }
        });
        Server {
            addr,
            answers,
            received,
        }
    }

    fn set(&self, target: &str, answer: Answer) {
        let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        answers.insert(target.to_string(), answer);
    }

    fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn targets(&self) -> Vec<String> {
        self.received().into_iter().map(|r| r.target).collect()
    }

    /// A delegate at this server, without credentials.
    fn upstream(&self) -> Upstream {
        crate::backends::plain_delegate(&format!("http://{}", self.addr))
    }

    fn client(&self) -> Client {
        Clients::new(1 << 20, TIMEOUT)
            .pick(&self.upstream())
            .expect("client")
    }
}

async fn serve(
    stream: tokio::net::TcpStream,
    answers: Answers,
    received: Arc<Mutex<Vec<Received>>>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncWriteExt, BufReader};
    let mut stream = BufReader::new(stream);
    loop {
        let Some(head) = crate::backends::test_head::read(&mut stream).await? else {
            return Ok(());
        };
        let if_none_match = head.field("if-none-match").map(str::to_string);
        let target = head.target;
        let answer = answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&target)
            .cloned()
            .unwrap_or_else(|| redirect(404, None));
        received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Received {
                target,
                if_none_match,
            });
        let location = answer
            .location
            .map(|l| format!("location: {l}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "HTTP/1.1 {} Answer\r\ncontent-type: application/json\r\n{location}content-length: {}\r\n\r\n",
            answer.status,
            answer.body.len()
        );
        stream.get_mut().write_all(head.as_bytes()).await?;
        stream.get_mut().write_all(answer.body.as_bytes()).await?;
    }
}

fn download<'a>(client: &'a Client, documents: &'a Documents) -> Download<'a> {
    Download {
        client,
        timeout: TIMEOUT,
        documents,
        v2: false,
    }
}

#[tokio::test]
async fn a_stale_hash_is_followed_to_the_current_document() {
    let server = Server::start(&[
        ("/openapi/v3", index(OLD)),
        (OLD, redirect(301, Some(NEW))),
        (NEW, ok(DOC)),
    ])
    .await;
    let client = server.client();
    let documents = Documents::default();
    let source = download(&client, &documents);
    let mut state = V3State::default();
    state.fetch(&source, |_| true).await.expect("followed");
    let served = state.get("apis").expect("the document");
    assert_eq!(served.doc.json, DOC.as_bytes());
    assert_eq!(server.targets(), ["/openapi/v3", OLD, NEW]);

    // Kept under the index's URL: while the index lists it, it is not downloaded again...
    state
        .fetch(&source, |_| true)
        .await
        .expect("a second round");
    assert_eq!(server.targets(), ["/openapi/v3", OLD, NEW, "/openapi/v3"]);
    // ...and once the index lists another URL, it is.
    server.set("/openapi/v3", index(NEW));
    state.fetch(&source, |_| true).await.expect("a third round");
    assert_eq!(
        server.targets()[4..],
        ["/openapi/v3".to_string(), NEW.to_string()]
    );
    assert_eq!(state.get("apis").expect("the document").doc.json, DOC);

    // 302, 307 and 308 too; the followed request carries no If-None-Match.
    for code in [302, 307, 308] {
        let stale = format!("/openapi/v3/apis?hash=OLD{code}");
        server.set(&stale, redirect(code, Some(NEW)));
        let before = server.received().len();
        let fresh = fetch_v3_document(&source, "apis", &stale, Some("\"old\""))
            .await
            .expect("followed")
            .expect("a document");
        assert_eq!(fresh.1.doc.json, DOC.as_bytes(), "{code}");
        let asked = &server.received()[before..];
        assert_eq!(
            asked,
            [
                Received {
                    target: stale.clone(),
                    if_none_match: Some("\"old\"".into())
                },
                Received {
                    target: NEW.into(),
                    if_none_match: None
                },
            ],
            "{code}"
        );
    }
}

#[tokio::test]
async fn a_redirect_elsewhere_is_refused_without_asking_its_target() {
    // Where a redirect followed anyway would land: it must never be asked.
    let other = Server::start(&[(NEW, ok(DOC))]).await;
    let elsewhere = format!("{}{NEW}", other.addr);
    let cases = [
        (301, Some("/openapi/v3/other?hash=NEW".to_string())),
        (301, Some("/openapi/v3/apis/../other?hash=NEW".to_string())),
        (301, Some(format!("//{elsewhere}"))),
        (301, Some(format!("http://{elsewhere}"))),
        (308, Some(format!("https://{elsewhere}"))),
        (301, Some(format!("/\\{elsewhere}"))),
        (303, Some(NEW.to_string())),
        (301, None),
    ];
    for (code, location) in cases {
        let server = Server::start(&[
            (OLD, redirect(code, location.as_deref())),
            (NEW, ok(DOC)),
            ("/openapi/v3/other?hash=NEW", ok(DOC)),
        ])
        .await;
        let client = server.client();
        let documents = Documents::default();
        let source = download(&client, &documents);
        // A document (`Some`) or 304 (`None`): printable.
        let refused = fetch_v3_document(&source, "apis", OLD, None)
            .await
            .map(|fresh| fresh.map(|(etag, _)| etag));
        let want = location.clone().unwrap_or_default();
        match &refused {
            Err(
                e @ Error::Redirect {
                    code: c,
                    location: l,
                    ..
                },
            ) if *c == code && *l == want => {
                let message = e.to_string();
                assert!(message.contains(&format!("status {code}")), "{message}");
                assert!(message.contains(&format!("{want:?}")), "{message}");
            }
            other => panic!("{code} {location:?}: {other:?}"),
        }
        assert_eq!(server.targets(), [OLD], "{code} {location:?}");
    }
    assert_eq!(other.targets(), Vec::<String>::new());
}

#[tokio::test]
async fn one_redirect_is_followed_not_two() {
    let server = Server::start(&[
        (OLD, redirect(301, Some(NEW))),
        (NEW, redirect(301, Some(OLD))),
    ])
    .await;
    let client = server.client();
    let documents = Documents::default();
    let source = download(&client, &documents);
    let looped = tokio::time::timeout(TIMEOUT, fetch_v3_document(&source, "apis", OLD, None))
        .await
        .expect("no endless following")
        .map(|fresh| fresh.map(|(etag, _)| etag));
    match &looped {
        Err(Error::Redirect {
            url,
            code: 301,
            location,
            why,
        }) => {
            assert!(url.ends_with(NEW), "{url}");
            assert_eq!(location, OLD);
            assert!(why.contains("second redirect"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.targets(), [OLD, NEW]);
}
