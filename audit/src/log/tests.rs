use std::path::Path;
use std::time::Duration;

use prometheus::Registry;

use crate::testing::{connect, counter, policy_file, run, TestUser, CLIENT_IP};
use crate::{Auditor, LogFormat, LogSettings, Settings};

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("read log")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn start(dir: &Path, rules: &str, log: LogSettings) -> (Auditor, Registry) {
    let registry = Registry::new();
    let settings = Settings {
        policy_file: Some(policy_file(dir, rules)),
        log: Some(log),
        ..Settings::default()
    };
    (
        Auditor::start(settings, &registry, &connect).expect("start"),
        registry,
    )
}

#[tokio::test]
async fn the_log_rotates_by_size_keeping_n_backups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let log = LogSettings {
        max_size_mb: 1,
        max_backups: 2,
        ..LogSettings::new(&path)
    };
    let rules = "omitStages: [RequestReceived]\nrules:\n- level: RequestResponse\n";
    let (auditor, _registry) = start(dir.path(), rules, log);
    let body = format!("{{\"data\":\"{}\"}}", "x".repeat(300_000));
    for _ in 0..12 {
        let user = TestUser::new("alice", &[]);
        let target = "/api/v1/namespaces/a/configmaps/c";
        run(&auditor, user, "PUT", target, (body.as_bytes(), b"{}"), 200);
    }
    auditor.shutdown(Duration::from_secs(5)).await;
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("audit"))
        .collect();
    // Three 300 kB events fit in a megabyte: four files were written, the oldest removed.
    assert_eq!(files.len(), 3, "the log and two backups: {files:?}");
    for name in files {
        let file = dir.path().join(&name);
        assert!(
            std::fs::metadata(&file).expect("size").len() <= 1 << 20,
            "{name}"
        );
        let events = lines(&file);
        assert_eq!(events.len(), 3, "{name}");
        for event in events {
            let data = event["requestObject"]["data"].as_str().map(str::len);
            assert_eq!(data, Some(300_000), "{name}");
        }
    }
}

#[tokio::test]
async fn the_legacy_format_is_one_line_of_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let log = LogSettings {
        format: "legacy".parse().expect("format"),
        ..LogSettings::new(&path)
    };
    assert_eq!(log.format, LogFormat::Legacy);
    assert!("yaml".parse::<LogFormat>().is_err());
    let (auditor, _registry) = start(dir.path(), "rules:\n- level: Metadata\n", log);
    let user = TestUser::new("alice", &["dev", "ops"]);
    run(
        &auditor,
        user,
        "GET",
        "/api/v1/namespaces/a/pods/p",
        (b"", b""),
        404,
    );
    auditor.shutdown(Duration::from_secs(5)).await;
    let text = std::fs::read_to_string(&path).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    let (time, rest) = lines[1].split_once(' ').expect("time first");
    assert!(time.ends_with('Z') && time.contains('T'), "{time}");
    assert!(rest.starts_with("AUDIT: id=\""), "{rest}");
    let stage = rest.find(" stage=").expect("stage");
    let expected = format!(
        concat!(
            r#" stage="ResponseComplete" ip="{}" method="get" user="alice" "#,
            r#"groups="\"dev\",\"ops\"" as="<self>" asgroups="<lookup>" "#,
            r#"user-agent="audit-test/1.0" namespace="a" uri="/api/v1/namespaces/a/pods/p" "#,
            r#"response="404""#
        ),
        CLIENT_IP
    );
    assert_eq!(&rest[stage..], expected);
    assert!(lines[0].contains(r#"stage="RequestReceived""#));
    assert!(
        lines[0].ends_with(r#"response="<deferred>""#),
        "{}",
        lines[0]
    );
}

#[tokio::test]
async fn write_errors_are_counted_not_fatal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let log = LogSettings {
        max_size_mb: 1,
        ..LogSettings::new(&path)
    };
    let registry = Registry::new();
    let settings = Settings {
        policy_file: Some(policy_file(dir.path(), "rules:\n- level: Request\n")),
        log: Some(log),
        body_limit: 2 << 20,
        ..Settings::default()
    };
    let auditor = Auditor::start(settings, &registry, &connect).expect("start");
    // A line longer than the whole file may be is refused (as lumberjack refuses it).
    let body = format!("{{\"data\":\"{}\"}}", "x".repeat(1_100_000));
    let user = TestUser::new("alice", &[]);
    let target = "/api/v1/namespaces/a/configmaps/c";
    run(
        &auditor,
        user.clone(),
        "PUT",
        target,
        (body.as_bytes(), b""),
        200,
    );
    run(&auditor, user, "GET", target, (b"", b""), 200);
    auditor.shutdown(Duration::from_secs(5)).await;
    let errors = counter(
        &registry,
        "apiserver_audit_error_total",
        &[("plugin", "log")],
    );
    assert_eq!(errors, 1);
    let dropped = [("backend", "log"), ("reason", "write_failed")];
    assert_eq!(
        counter(&registry, "apiagg_audit_events_dropped_total", &dropped),
        1
    );
    assert_eq!(lines(&path).len(), 3, "the other events are written");
}
