//! Plain HTTP from the tests: a client and the few request shapes every suite sends.

use std::time::Duration;

/// An HTTP client for the tests (30 s timeout per request).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        // What a test sends is what it asks for: no `Accept-Encoding` unless it sets one, and
        // the answer's bytes as they came.
        .no_gzip()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// The status code of a GET (0 when the request fails).
pub async fn status_code(url: &str) -> u16 {
    client()
        .get(url)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// What a request got: its status code, or why it got none. Compares with a status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The status code of the answer.
    Code(u16),
    /// Why there was no answer.
    Failed(String),
}

impl PartialEq<u16> for Answer {
    fn eq(&self, code: &u16) -> bool {
        *self == Answer::Code(*code)
    }
}

/// What `request` gets once sent (what a wait for an answer observes).
pub async fn answer_code(request: reqwest::RequestBuilder) -> Answer {
    match request.send().await {
        Ok(r) => Answer::Code(r.status().as_u16()),
        Err(e) => Answer::Failed(e.to_string()),
    }
}

/// The body of a GET as text (the test fails when the request does).
pub async fn get_text(url: &str) -> String {
    let response = client().get(url).send().await;
    let response = response.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    response.text().await.expect("body")
}

/// The body of a response as JSON (the text in the panic when it is not).
pub async fn json_of(r: reqwest::Response) -> serde_json::Value {
    let text = r.text().await.expect("body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A backend that answers every connection with the same bytes, whatever it is asked; its port.
pub async fn fixed_server(response: &'static [u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(response).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    port
}
