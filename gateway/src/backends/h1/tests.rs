//! The HTTP/1.1 client against scripted backends over an in-memory duplex: what it writes, and
//! how it reads every framing (and refuses the broken ones).

use bytes::Bytes;
use pingora_error::{ErrorType, RetryType};
use pingora_http::RequestHeader;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::H1Client;

/// A client whose backend has sent `answer` (and then closed, when `close`).
async fn answered(answer: &[u8], close: bool) -> (H1Client<DuplexStream>, DuplexStream) {
    let (client, mut backend) = tokio::io::duplex(1 << 20);
    backend.write_all(answer).await.expect("answer");
    if close {
        backend.shutdown().await.expect("close");
    }
    (H1Client::new(client), backend)
}

/// A client that sent a `method` request to a backend that answers `answer` (then closes,
/// when `close`).
async fn asked(answer: &[u8], close: bool, method: &str) -> (H1Client<DuplexStream>, DuplexStream) {
    let (mut client, backend) = answered(answer, close).await;
    client
        .write_request_header(&get(method))
        .await
        .expect("request head");
    (client, backend)
}

fn get(method: &str) -> RequestHeader {
    let mut head = RequestHeader::build(method, b"/apis/a.io/v1/x?watch=1", None).expect("head");
    head.insert_header("host", "backend.test").expect("host");
    head
}

/// The whole body, piece by piece.
async fn body(client: &mut H1Client<DuplexStream>) -> Result<Vec<u8>, Box<pingora_error::Error>> {
    let mut all = Vec::new();
    while let Some(piece) = client.read_response_body().await? {
        all.extend_from_slice(&piece);
    }
    Ok(all)
}

#[tokio::test]
async fn the_request_is_written_as_built_and_its_body_framed_once() {
    let (client, mut backend) = tokio::io::duplex(1 << 20);
    let mut client = H1Client::new(client);
    let mut head = RequestHeader::build("POST", b"/apis/a.io/v1/x", None).expect("head");
    head.insert_header("host", "backend.test").expect("host");
    head.insert_header("transfer-encoding", "chunked")
        .expect("te");
    client.write_request_header(&head).await.expect("head");
    client
        .write_request_body(Bytes::from_static(b"abc"))
        .await
        .expect("body");
    client
        .write_request_body(Bytes::new())
        .await
        .expect("empty piece");
    client
        .write_request_body(Bytes::from_static(b"0123456789abcdef"))
        .await
        .expect("body");
    client.finish_request_body().await.expect("finish");
    drop(client);
    let mut wire = Vec::new();
    backend.read_to_end(&mut wire).await.expect("read");
    assert_eq!(
        String::from_utf8_lossy(&wire),
        "POST /apis/a.io/v1/x HTTP/1.1\r\nhost: backend.test\r\ntransfer-encoding: chunked\r\n\r\n\
         3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n"
    );
}

#[tokio::test]
async fn a_content_length_body_must_match_its_length() {
    let (client, _backend) = tokio::io::duplex(1 << 20);
    let mut client = H1Client::new(client);
    let mut head = RequestHeader::build("PUT", b"/x", None).expect("head");
    head.insert_header("content-length", "3").expect("cl");
    client.write_request_header(&head).await.expect("head");
    let long = client.write_request_body(Bytes::from_static(b"abcd")).await;
    assert!(long.is_err(), "a body past its Content-Length is refused");
    client
        .write_request_body(Bytes::from_static(b"ab"))
        .await
        .expect("part");
    assert!(
        client.finish_request_body().await.is_err(),
        "a short body is refused"
    );
}

#[tokio::test]
async fn every_framing_of_an_answer_is_read_to_its_end() {
    let cases: [(&[u8], bool, &[u8], bool); 6] = [
        // Content-Length, kept alive.
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, b"hello", true),
        // Chunked, with an extension and trailers.
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n",
            false,
            b"abcde",
            true,
        ),
        // Up to the close: never reused.
        (b"HTTP/1.1 200 OK\r\n\r\nuntil close", true, b"until close", false),
        // HTTP/1.0 with keep-alive and a length.
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", false, b"ok", true),
        // Connection: close.
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false, b"ok", false),
        // No body for 204.
        (b"HTTP/1.1 204 No Content\r\n\r\n", false, b"", true),
    ];
    for (answer, close, expected, reusable) in cases {
        let (mut client, _backend) = asked(answer, close, "GET").await;
        client.read_response_header().await.expect("answer head");
        let got = body(&mut client).await.expect("body");
        assert_eq!(got, expected, "{}", String::from_utf8_lossy(answer));
        assert_eq!(
            client.reusable(),
            reusable,
            "{}",
            String::from_utf8_lossy(answer)
        );
    }
}

#[tokio::test]
async fn a_head_request_has_no_body_whatever_its_length_says() {
    let (mut client, _backend) = asked(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
        false,
        "HEAD",
    )
    .await;
    client.read_response_header().await.expect("answer head");
    assert_eq!(body(&mut client).await.expect("body"), b"");
    assert!(client.reusable());
}

#[tokio::test]
async fn informational_heads_come_before_the_answer() {
    let (mut client, _backend) = asked(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", false, "GET").await;
    client.read_response_header().await.expect("103");
    assert_eq!(client.response_header().expect("head").status.as_u16(), 103);
    client.read_response_header().await.expect("200");
    let head = client.take_response_header().expect("head");
    assert_eq!(head.status.as_u16(), 200);
    assert_eq!(body(&mut client).await.expect("body"), b"x");
}

#[tokio::test]
async fn both_framings_mean_chunked_and_no_reuse() {
    let (mut client, _backend) = asked(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false, "GET").await;
    client.read_response_header().await.expect("head");
    let head = client.response_header().expect("head");
    assert!(head.headers.get("content-length").is_none());
    assert_eq!(body(&mut client).await.expect("body"), b"hello");
    assert!(
        !client.reusable(),
        "a connection that sent both framings is not reused"
    );
}

#[tokio::test]
async fn broken_answers_are_refused() {
    let broken: [&[u8]; 7] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"NOT HTTP\r\n\r\n",
    ];
    for answer in broken {
        let (mut client, _backend) = asked(answer, true, "GET").await;
        let got = client.read_response_header().await;
        let e = got.expect_err(&String::from_utf8_lossy(answer));
        assert_eq!(e.etype(), &ErrorType::InvalidHTTPHeader, "{e}");
    }
    let chunks: [&[u8]; 3] = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
    ];
    for answer in chunks {
        let (mut client, _backend) = asked(answer, true, "GET").await;
        client.read_response_header().await.expect("head");
        assert!(
            body(&mut client).await.is_err(),
            "{}",
            String::from_utf8_lossy(answer)
        );
    }
}

#[tokio::test]
async fn a_close_before_the_answer_may_be_retried_on_a_stale_connection_only() {
    let (mut client, _backend) = asked(b"", true, "GET").await;
    let e = client.read_response_header().await.expect_err("closed");
    assert_eq!(e.etype(), &ErrorType::ConnectionClosed);
    assert!(matches!(e.retry, RetryType::ReusedOnly));
    // A body cut short is never retried.
    let (mut client, _backend) = asked(
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc",
        true,
        "GET",
    )
    .await;
    client.read_response_header().await.expect("head");
    let e = body(&mut client).await.expect_err("cut short");
    assert_eq!(e.etype(), &ErrorType::ConnectionClosed);
    assert!(!e.retry());
}

#[tokio::test]
async fn a_silent_backend_times_out() {
    let (mut client, _backend) = answered(b"", false).await;
    client.set_read_timeout(Some(std::time::Duration::from_millis(20)));
    client
        .write_request_header(&get("GET"))
        .await
        .expect("head");
    let e = client.read_response_header().await.expect_err("silent");
    assert_eq!(e.etype(), &ErrorType::ReadTimedout);
}

#[tokio::test]
async fn values_are_kept_as_sent_and_the_head_has_room_for_more() {
    let (mut client, _backend) = asked(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Multi: a\r\nX-Multi: b\r\nContent-Length: 0\r\n\r\n", false, "GET").await;
    client.read_response_header().await.expect("head");
    let head = client.take_response_header().expect("head");
    let multi: Vec<_> = head.headers.get_all("x-multi").iter().collect();
    assert_eq!(multi, ["a", "b"]);
    assert_eq!(head.headers["content-type"], "application/json");
    assert!(head.headers.capacity() >= head.headers.len() + 5);
}

#[tokio::test]
async fn oversized_and_overlong_answers_are_refused() {
    // A head past 64 KiB, and one with more headers than the parser takes.
    let huge = format!(
        "HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70 * 1024)
    );
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
    for answer in [huge, many] {
        let (mut client, _backend) = asked(answer.as_bytes(), true, "GET").await;
        let e = client.read_response_header().await.expect_err("refused");
        assert_eq!(e.etype(), &ErrorType::InvalidHTTPHeader, "{e}");
    }
    // Trailers past their bound.
    let trailers: String = (0..2000).map(|i| format!("X-T{i}: value\r\n")).collect();
    let answer =
        format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n{trailers}\r\n");
    let (mut client, _backend) = asked(answer.as_bytes(), true, "GET").await;
    client.read_response_header().await.expect("head");
    assert!(body(&mut client).await.is_err(), "trailers are bounded");
}

#[tokio::test]
async fn bytes_after_the_answer_keep_the_connection_out_of_the_pool() {
    // A second answer nobody asked for (a smuggling attempt, or a broken backend) must never
    // reach the next request on this connection.
    let (mut client, _backend) = asked(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil",
        false,
        "GET",
    )
    .await;
    client.read_response_header().await.expect("head");
    assert_eq!(body(&mut client).await.expect("body"), b"ok");
    assert!(client.is_body_done());
    assert!(
        !client.reusable(),
        "a connection with bytes after the answer is not reused"
    );
}

mod fuzz_regressions {
    use super::*;

    /// Found by `fuzz/fuzz_targets/backend_h1.rs` (first by reading `decode_chunked`, then
    /// reproduced by the target); minimized input: a chunked answer whose trailers hold one line
    /// exactly as long as their bound (16 KiB, without its CRLF). The bound then went 2 bytes
    /// below zero: an overflow panic in a debug build, and in a release build a bound that
    /// wrapped around to none, so the backend's next trailer line was buffered without limit.
    #[tokio::test]
    async fn a_trailer_line_as_long_as_the_bound_ends_the_trailers_with_an_error() {
        let line = format!("x: {}", "a".repeat(16 * 1024 - 3));
        for after in ["\r\n", "y: b\r\n\r\n", &"z".repeat(64 * 1024)] {
            let answer = format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n{line}\r\n{after}"
            );
            let (mut client, _backend) = asked(answer.as_bytes(), true, "GET").await;
            client.read_response_header().await.expect("head");
            let e = body(&mut client)
                .await
                .expect_err("trailers over their bound");
            assert_eq!(e.etype(), &ErrorType::InvalidHTTPHeader, "{e}");
        }
        // A line that fills the bound with its CRLF, and the answer ends as sent.
        let line = format!("x: {}", "a".repeat(16 * 1024 - 5));
        let answer = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n{line}\r\n\r\n"
        );
        let (mut client, _backend) = asked(answer.as_bytes(), true, "GET").await;
        client.read_response_header().await.expect("head");
        assert_eq!(body(&mut client).await.expect("body"), b"abc");
        assert!(client.is_body_done());
    }
}
