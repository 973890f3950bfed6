use super::*;

fn request(headers: &[(&str, &str)]) -> RequestHeader {
    let mut req = RequestHeader::build("GET", b"/apis/a.io/v1/x/exec", None).expect("req");
    for (name, value) in headers {
        req.append_header(name.to_string(), *value).expect("header");
    }
    req
}

#[test]
fn only_websocket_and_spdy_are_tunnelled() {
    for upgrade in [
        "websocket",
        "WebSocket",
        "SPDY/3.1",
        "spdy/3.1",
        " websocket ",
    ] {
        let req = request(&[("Connection", "keep-alive, Upgrade"), ("Upgrade", upgrade)]);
        assert_eq!(is_upgrade(&req), Ok(true), "{upgrade}");
    }
    assert_eq!(is_upgrade(&request(&[])), Ok(false));
    assert_eq!(
        is_upgrade(&request(&[("Connection", "keep-alive")])),
        Ok(false)
    );
}

#[test]
fn other_upgrades_are_refused_naming_the_protocol() {
    let upgrade = |value: &str| request(&[("Connection", "Upgrade"), ("Upgrade", value)]);
    let protocol = |p: &str| Err(Refused::Protocol(p.into()));
    assert_eq!(is_upgrade(&upgrade("h2c")), protocol("h2c"));
    assert_eq!(is_upgrade(&upgrade("TLS/1.0")), protocol("TLS/1.0"));
    assert_eq!(
        is_upgrade(&upgrade("websocket/13")),
        protocol("websocket/13")
    );
    assert_eq!(is_upgrade(&upgrade("SPDY/3")), protocol("SPDY/3"));
    assert_eq!(
        is_upgrade(&upgrade("websocket, h2c")),
        Err(Refused::Several("websocket, h2c".into()))
    );
    assert_eq!(
        is_upgrade(&upgrade("websocket, websocket")),
        Err(Refused::Several("websocket, websocket".into()))
    );
    let two = request(&[
        ("Connection", "Upgrade"),
        ("Upgrade", "SPDY/3.1"),
        ("Upgrade", "h2c"),
    ]);
    assert_eq!(
        is_upgrade(&two),
        Err(Refused::Several("SPDY/3.1, h2c".into()))
    );
    assert_eq!(is_upgrade(&upgrade("")), Err(Refused::Empty));
    assert_eq!(is_upgrade(&upgrade(" , ")), Err(Refused::Empty));
    let message = Refused::Protocol("h2c".into()).to_string();
    assert!(message.contains("\"h2c\""), "{message}");
}

#[test]
fn half_an_upgrade_is_refused() {
    let unnamed = request(&[("Connection", "upgrade")]);
    assert_eq!(is_upgrade(&unnamed), Err(Refused::Unnamed));
    let h2c = request(&[("Connection", "Upgrade, HTTP2-Settings")]);
    assert_eq!(is_upgrade(&h2c), Err(Refused::Unnamed));
    let not_nominated = request(&[("Upgrade", "websocket")]);
    assert_eq!(
        is_upgrade(&not_nominated),
        Err(Refused::NotNominated("websocket".into()))
    );
    // A token merely containing "upgrade" does not nominate it.
    let lookalike = request(&[("Connection", "x-upgrade-hint"), ("Upgrade", "websocket")]);
    assert_eq!(
        is_upgrade(&lookalike),
        Err(Refused::NotNominated("websocket".into()))
    );
}

async fn head_of(bytes: &'static [u8]) -> io::Result<(u16, Vec<u8>, Vec<u8>)> {
    let (mut theirs, ours) = tokio::io::duplex(1024);
    theirs.write_all(bytes).await?;
    drop(theirs);
    let mut backend: Box<dyn Io> = Box::new(ours);
    read_head(&mut backend).await
}

#[tokio::test]
async fn response_heads_are_parsed_and_early_bytes_kept() {
    let raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nframe";
    let (code, head, early) = head_of(raw).await.expect("head");
    assert_eq!(code, 101);
    assert!(head.ends_with(b"\r\n\r\n"));
    assert_eq!(early, b"frame");
    let garbage = head_of(b"HTTP/1.1 abc\r\n\r\n").await;
    assert_eq!(
        garbage.map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::InvalidData)
    );
    let cut = head_of(b"HTTP/1.1 101 Switching").await;
    assert_eq!(
        cut.map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::UnexpectedEof)
    );
}
