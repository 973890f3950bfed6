//! API Priority and Fairness at the front door, as kube-apiserver applies it: requests are
//! classified by FlowSchema into priority levels, a `Reject` level answers 429 with
//! `Retry-After` beyond its seats, a queuing level shares its seats fairly between flows, every
//! answer names its FlowSchema and priority level, `system:masters` is exempt and health is not
//! classified; the objects come from a file that is re-read when it changes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiagg_tests::*;

const GV: &str = "/apis/wardle.example.com/v1alpha1";

const TOKENS: &str = "tok-admin,admin,1,\"system:masters\"\n\
tok-alice,alice,2,\"flooders\"\n\
tok-bob,bob,3,\"flooders\"\n\
tok-eve,eve,4,\"refused\"\n\
tok-carol,carol,5,\n";

/// Two small levels (one seat each, lending and borrowing nothing): `tiny` queues fairly per
/// user, `refuser` rejects; a FlowSchema sends each group to one of them.
fn objects(refused_level: &str) -> String {
    use apiagg_tests::flow::{level, schema, QUEUE_PER_FLOW};
    format!(
        "{}{}{}{}",
        level("tiny", QUEUE_PER_FLOW),
        level("refuser", "{type: Reject}"),
        schema("flooders", "flooders", "tiny"),
        schema("refused", "refused", refused_level),
    )
}

struct Setup {
    gw: Apiagg,
    _backend: Sample,
    _dir: tempfile::TempDir,
    flow_file: std::path::PathBuf,
}

fn start() -> Setup {
    let backend = sample(G, "wardle", false);
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("tokens");
    let flow_file = dir.path().join("flow.yaml");
    std::fs::write(&flow_file, objects("refuser")).expect("flow objects");
    let config = format!(
        "authentication: {{anonymous: true, tokenFile: {}}}\n{}",
        tokens.display(),
        one_backend("wardle", &backend)
    );
    let flow = flow_file.to_string_lossy().into_owned();
    let gw = Apiagg::start_logged(
        &config,
        &[
            "--max-requests-inflight",
            "100",
            "--max-mutating-requests-inflight",
            "100",
            "--flow-control-config-file",
            &flow,
        ],
    );
    Setup {
        gw,
        _backend: backend,
        _dir: dir,
        flow_file,
    }
}

/// One answer: status, `Retry-After`, and the two classification headers.
#[derive(Debug, Clone)]
struct Answer {
    code: u16,
    retry_after: Option<String>,
    schema_uid: Option<String>,
    level_uid: Option<String>,
}

async fn send(url: String, token: &str) -> Answer {
    let r = client()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("request");
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    Answer {
        code: r.status().as_u16(),
        retry_after: header("retry-after"),
        schema_uid: header("x-kubernetes-pf-flowschema-uid"),
        level_uid: header("x-kubernetes-pf-prioritylevel-uid"),
    }
}

async fn at_once(gw: &Apiagg, token: &'static str, n: usize, ms: u64) -> Vec<Answer> {
    let url = gw.url(&format!("{GV}/slow?ms={ms}"));
    let tasks: Vec<_> = (0..n)
        .map(|_| tokio::spawn(send(url.clone(), token)))
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("join"));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reject_level_refuses_beyond_its_seats_and_every_answer_is_classified() {
    let s = start();
    let gw = &s.gw;
    gw.wait_ready().await;

    let answers = at_once(gw, "tok-eve", 8, 1500).await;
    let served = answers.iter().filter(|a| a.code == 200).count();
    let refused: Vec<_> = answers.iter().filter(|a| a.code == 429).collect();
    assert_eq!(served, 1, "{answers:?}");
    assert_eq!(refused.len(), 7, "{answers:?}");
    for a in &answers {
        assert!(a.schema_uid.is_some() && a.level_uid.is_some(), "{a:?}");
        assert_eq!(a.schema_uid, answers[0].schema_uid, "one FlowSchema");
    }
    assert!(refused.iter().all(|a| a.retry_after.is_some()));
    let r = client()
        .get(gw.url(&format!("{GV}/slow?ms=1")))
        .bearer_auth("tok-eve")
        .send()
        .await
        .expect("one more");
    assert_eq!(r.status(), 200, "the seat was given back");

    // system:masters is exempt: all at once, all served.
    let admin = at_once(gw, "tok-admin", 8, 500).await;
    assert!(admin.iter().all(|a| a.code == 200), "{admin:?}");
    assert!(admin[0].level_uid.is_some() && admin[0].level_uid != answers[0].level_uid);

    // Health is answered before classification.
    let health = client()
        .get(gw.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(health.status(), 200);
    assert!(health
        .headers()
        .get("x-kubernetes-pf-flowschema-uid")
        .is_none());

    // The dump of priority levels, for those who may read apiagg's own debug endpoints.
    let dump_path = "/debug/api_priority_and_fairness/dump_priority_levels";
    let dump = client()
        .get(gw.url(dump_path))
        .bearer_auth("tok-admin")
        .send()
        .await
        .expect("dump");
    assert_eq!(dump.status(), 200);
    let text = dump.text().await.expect("dump text");
    assert!(text.contains("tiny") && text.contains("refuser"), "{text}");

    let metrics = get_text(&gw.url("/metrics")).await;
    let rejected = metrics.lines().find(|l| {
        l.starts_with("apiserver_flowcontrol_rejected_requests_total{")
            && l.contains("flow_schema=\"refused\"")
            && l.contains("priority_level=\"refuser\"")
            && l.contains("reason=\"concurrency-limit\"")
    });
    let count = rejected
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<u64>().ok());
    assert_eq!(count, Some(7), "{rejected:?}");
    assert!(metrics.contains("apiserver_flowcontrol_dispatched_requests_total{"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_flooding_one_level_get_equal_shares() {
    let s = start();
    let gw = &s.gw;
    gw.wait_ready().await;
    // Fair queuing shares seat time; requests of one length make it a share of requests (long
    // enough that apiagg's own time per request, which varies, is a small part of it).
    let url = gw.url(&format!("{GV}/slow?ms=100"));
    let until = Instant::now() + Duration::from_secs(9);
    let mut loops = Vec::new();
    let served: Vec<Arc<AtomicUsize>> = (0..2).map(|_| Arc::default()).collect();
    let refused = Arc::new(AtomicUsize::new(0));
    for (user, token) in ["tok-alice", "tok-bob"].into_iter().enumerate() {
        for _ in 0..10 {
            let (url, served, refused) = (url.clone(), served[user].clone(), refused.clone());
            loops.push(tokio::spawn(async move {
                while Instant::now() < until {
                    match send(url.clone(), token).await.code {
                        200 => served.fetch_add(1, Ordering::Relaxed),
                        _ => refused.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }));
        }
    }
    for l in loops {
        l.await.expect("join");
    }
    let (alice, bob) = (
        served[0].load(Ordering::Relaxed),
        served[1].load(Ordering::Relaxed),
    );
    assert_eq!(refused.load(Ordering::Relaxed), 0, "nothing was refused");
    let (low, high) = (alice.min(bob), alice.max(bob));
    assert!(
        high >= 20,
        "too few requests to compare: alice {alice}, bob {bob}"
    );
    assert!(
        (high - low) * 10 <= high,
        "unequal shares of one seat: alice {alice}, bob {bob}"
    );
    // The level's one seat was held most of the 9 s: its utilization, sampled every 100 ms,
    // sums to seconds of full use (upstream's histogram, `phase="executing"`).
    let family = "apiserver_flowcontrol_priority_level_seat_utilization_sum";
    let labels = ["phase=\"executing\"", "priority_level=\"tiny\""];
    let sum = metric_labelled(&client(), &gw.url("/metrics"), family, &labels).await;
    let full_samples = sum.unwrap_or(0.0);
    assert!(
        full_samples >= 30.0,
        "tiny's seat utilization sums to {sum:?} samples of full use"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_objects_file_is_re_read_when_it_changes() {
    let s = start();
    let gw = &s.gw;
    gw.wait_ready().await;
    let refused = at_once(gw, "tok-eve", 4, 800).await;
    assert!(refused.iter().any(|a| a.code == 429), "{refused:?}");
    // eve's FlowSchema now queues in `tiny`: nobody is refused.
    std::fs::write(&s.flow_file, objects("tiny")).expect("rewrite");
    wait_until(
        "the changed objects to apply: nobody refused (the last burst observed)",
        Duration::from_secs(10),
        || at_once(gw, "tok-eve", 4, 300),
        |answers| answers.iter().all(|a| a.code == 200),
    )
    .await;
    // A broken file keeps the last good objects.
    std::fs::write(&s.flow_file, "kind: FlowSchema\nspec: [").expect("break");
    wait_until(
        "the broken file to be noticed (apiagg's log observed)",
        Duration::from_secs(10),
        || async { Text(s.gw.log()) },
        |log| {
            log.0
                .contains("flow.yaml not reloaded, the previous one serves")
        },
    )
    .await;
    let still = at_once(gw, "tok-eve", 4, 300).await;
    assert!(still.iter().all(|a| a.code == 200), "{still:?}");
}
