use super::*;

#[test]
fn the_csv_is_kube_apiservers() {
    let users = parse_token_csv(
        "# comment\n\ntok1,alice,uid-1,\"dev,ops\"\ntok2,bob,uid-2\ntok1,mallory,x\n",
    )
    .expect("parse");
    let alice = &users["tok1"];
    assert_eq!(alice.name, "alice");
    assert_eq!(alice.uid, "uid-1");
    assert_eq!(alice.groups, ["dev", "ops", "system:authenticated"]);
    assert_eq!(users["tok2"].groups, ["system:authenticated"]);
}

#[test]
fn bad_lines_say_where() {
    let err = parse_token_csv("ok,a,b\nonly-token\n").expect_err("refused");
    assert!(
        matches!(
            err,
            TokenFileError::Syntax {
                line: 2,
                why: Syntax::TooFewFields
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "line 2: needs at least token, user name and uid"
    );
    let err = parse_token_csv("t,\"a,b").expect_err("refused");
    assert_eq!(err.to_string(), "line 1: unterminated quote");
}

#[test]
fn a_line_whose_user_cannot_be_forwarded_refuses_the_file_and_keeps_the_last_good_one() {
    let err = parse_token_csv("ok,alice,u1\nt2,mallory\x01,u2\n").expect_err("refused");
    assert!(
        matches!(err, TokenFileError::Identity { line: 2, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "line 2: invalid identity: the user name cannot be forwarded exactly: it holds a control character"
    );
    let err = parse_token_csv("t,bob,u,\"dev,ops\x7f\"\n").expect_err("refused");
    assert!(err.to_string().contains("group #2"), "{err}");

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tokens.csv");
    std::fs::write(&path, "good,alice,u1\n").expect("write");
    let file = TokenFile::load(path.clone()).expect("load");
    std::fs::write(&path, "good,alice,u1\nbad,eve\u{1b},u2\n").expect("write");
    let err = file.reload().expect_err("refused");
    assert!(err.to_string().starts_with("line 2: "), "{err}");
    assert_eq!(file.user("good").expect("kept").name, "alice");
    assert!(file.user("bad").is_none());
}

fn user(name: &str) -> Arc<User> {
    Arc::new(User::new(name.into(), String::new(), vec![], vec![]).expect("user"))
}

#[tokio::test]
async fn a_flood_of_refusals_does_not_evict_an_accepted_token() {
    let cache = TokenCache::new(Duration::from_secs(60), Duration::from_secs(60));
    cache.accept("valid", user("alice")).await;
    for i in 0..CACHE_LIMIT + 2_000 {
        let token = format!("unknown-{i}");
        let refused = async { Err(ReviewError::Refused("token not accepted".into())) };
        assert!(cache.load(key(&token), refused).await.is_err());
    }
    let (accepted, refused) = cache.settle().await;
    assert_eq!(accepted, 1);
    assert!(refused <= CACHE_LIMIT, "{refused}");
    let hit = cache.get("valid").await.expect("still cached");
    assert_eq!(hit.expect("accepted").name, "alice");
    // Failures to ask are not remembered; refusals are.
    let down = async { Err(ReviewError::Unavailable("down".into())) };
    assert!(cache.load(key("later"), down).await.is_err());
    assert!(cache.get("later").await.is_none());
    // Refusals are remembered (while their cache has room: when full, moka admits a newcomer
    // only if it is used more than the entry it would evict).
    let fresh = TokenCache::new(Duration::from_secs(60), Duration::from_secs(60));
    let refused = async { Err(ReviewError::Refused("no".into())) };
    assert!(fresh.load(key("x"), refused).await.is_err());
    assert!(matches!(
        fresh.get("x").await,
        Some(Err(ReviewError::Refused(_)))
    ));
}

/// A minimal delegate speaking the TokenReview API over HTTP/1.1 on loopback: `good-*` tokens
/// are users named after them, `spaced` is the user `"admin "`, anything else is refused.
/// Counts the reviews it answers.
struct Delegate {
    url: String,
    reviews: Arc<std::sync::atomic::AtomicUsize>,
}

impl Delegate {
    async fn start() -> Delegate {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let reviews = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = reviews.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, counted.clone()));
            }
        });
        Delegate { url, reviews }
    }

    fn reviews(&self) -> usize {
        self.reviews.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn upstream(&self) -> Upstream {
        crate::backends::plain_delegate(&self.url)
    }
}

async fn serve(
    stream: tokio::net::TcpStream,
    reviews: Arc<std::sync::atomic::AtomicUsize>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
    let mut stream = BufReader::new(stream);
    loop {
        let Some(head) = crate::backends::test_head::read(&mut stream).await? else {
            return Ok(());
        };
        let length = head
            .field("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0usize);
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await?;
        reviews.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let review: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let token = review["spec"]["token"].as_str().unwrap_or_default();
        let status = match token {
            "spaced" => serde_json::json!({"authenticated": true, "user": {"username": "admin "}}),
            t if t.starts_with("good-") => {
                serde_json::json!({"authenticated": true, "user": {"username": t, "groups": ["dev"]}})
            }
            _ => serde_json::json!({"authenticated": false, "error": "unknown token"}),
        };
        let answer = serde_json::json!({"kind": "TokenReview", "status": status}).to_string();
        let head = format!(
            "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        stream.get_mut().write_all(head.as_bytes()).await?;
        stream.get_mut().write_all(answer.as_bytes()).await?;
    }
}

fn ttl() -> TokenReview {
    TokenReview {
        cache_ttl: Duration::from_secs(60),
        failure_cache_ttl: Duration::from_secs(60),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn concurrent_look_ups_of_one_token_make_one_review() {
    let delegate = Delegate::start().await;
    let upstream = delegate.upstream();
    let clients = Clients::new(1 << 20, std::time::Duration::from_secs(5));
    let reviewer = TokenReviewer::new(ttl());
    for token in ["good-alice", "unknown"] {
        let before = delegate.reviews();
        // `join_all` polls every look-up before any review can be answered.
        let look_ups =
            (0..50).map(|_| reviewer.review(token, Source::of(None), &upstream, &clients));
        let outcomes = futures_util::future::join_all(look_ups).await;
        assert_eq!(delegate.reviews() - before, 1, "{token}");
        let said: Vec<_> = outcomes
            .iter()
            .map(|o| {
                o.as_ref()
                    .map(|u| u.name.clone())
                    .map_err(|e| e.to_string())
            })
            .collect();
        assert!(said.iter().all(|o| *o == said[0]), "{said:?}");
    }
    let accepted = reviewer
        .review("good-alice", Source::of(None), &upstream, &clients)
        .await;
    assert_eq!(
        accepted.expect("accepted").groups,
        ["dev", "system:authenticated"]
    );
    let refused = reviewer
        .review("unknown", Source::of(None), &upstream, &clients)
        .await;
    assert!(
        matches!(&refused, Err(ReviewError::Refused(why)) if why == "unknown token"),
        "{refused:?}"
    );
    // An answer naming a user that cannot be forwarded is a refusal, remembered as one.
    let spaced = reviewer
        .review("spaced", Source::of(None), &upstream, &clients)
        .await;
    assert!(
        matches!(spaced, Err(ReviewError::Identity(_))),
        "{spaced:?}"
    );
    assert!(reviewer
        .review("spaced", Source::of(None), &upstream, &clients)
        .await
        .is_err());
    assert_eq!(delegate.reviews(), 3, "each token reviewed once");
}

#[tokio::test]
async fn reviews_of_unknown_tokens_are_rate_limited() {
    let delegate = Delegate::start().await;
    let upstream = delegate.upstream();
    let clients = Clients::new(1 << 20, std::time::Duration::from_secs(5));
    // Five at once, then one an hour: the test cannot outrun the refill. Past the burst, a
    // few wait their turn (which never comes) and the rest of the source is refused at once.
    let quota = Quota::per_hour(nonzero(1)).allow_burst(nonzero(5));
    let wait = std::time::Duration::from_millis(50);
    let reviewer = TokenReviewer::waiting_at_most(ttl(), quota, wait);
    let mut limited = 0;
    for i in 0..40 {
        match reviewer
            .review(&format!("flood-{i}"), Source::of(None), &upstream, &clients)
            .await
        {
            Err(ReviewError::TooMany) => limited += 1,
            Err(ReviewError::Refused(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(delegate.reviews(), 5);
    assert_eq!(limited, 35);
    // Known tokens are answered from the caches, without a permit.
    assert!(matches!(
        reviewer
            .review("flood-0", Source::of(None), &upstream, &clients)
            .await,
        Err(ReviewError::Refused(_))
    ));
    // A rate-limited look-up is not remembered: it is reviewed once permits return.
    assert!(reviewer.cache.get("flood-39").await.is_none());
}

#[tokio::test]
async fn the_authenticator_answers_401_for_an_unforwardable_reviewed_user() {
    use crate::auth::{AuthError, Authenticator, Method};
    let delegate = Delegate::start().await;
    let upstream = delegate.upstream();
    let clients = Clients::new(1 << 20, std::time::Duration::from_secs(5));
    let config = apiagg_config::Authentication {
        anonymous: true,
        token_review: Some(ttl()),
        ..Default::default()
    };
    let auth = Authenticator::new(&config).expect("authenticator");
    let bearer = |token: &str| {
        let mut headers = http::HeaderMap::new();
        let value = format!("Bearer {token}").parse().expect("value");
        headers.insert(http::header::AUTHORIZATION, value);
        headers
    };
    let refused = auth
        .authenticate(
            "/",
            &bearer("spaced"),
            None,
            None,
            Some(&upstream),
            &clients,
        )
        .await
        .expect_err("refused, not anonymous");
    assert!(
        matches!(
            &refused,
            AuthError::InvalidIdentity {
                method: Method::TokenReview,
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!((refused.status(), refused.retry_after()), (401, None));
    assert_eq!(
        (
            AuthError::TooManyReviews.status(),
            AuthError::TooManyReviews.reason().as_str()
        ),
        (429, "TooManyRequests")
    );
    assert_eq!(AuthError::TooManyReviews.retry_after(), Some(1));
    let ok = auth
        .authenticate(
            "/",
            &bearer("good-bob"),
            None,
            None,
            Some(&upstream),
            &clients,
        )
        .await
        .expect("accepted");
    assert_eq!(
        (ok.user.name.as_str(), ok.method),
        ("good-bob", Method::TokenReview)
    );
}
