use std::time::{Duration, UNIX_EPOCH};

use apiagg_requestinfo::RequestInfo;

use super::*;
use crate::testing::TestUser;

const ID: &str = "0f6d2c1a-5b7e-4c3d-9e8f-1a2b3c4d5e6f";

fn at(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(1_700_000_000_000_000_000 + nanos)
}

fn alice() -> Arc<TestUser> {
    Arc::new(TestUser {
        name: "alice".into(),
        uid: "u-1".into(),
        groups: vec!["dev".into(), "system:authenticated".into()],
        extra: vec![
            ("scopes".into(), vec!["x".into(), "y".into()]),
            ("a".into(), vec!["1".into()]),
        ],
    })
}

fn common(method: &str, target: &str, agent: Option<&str>) -> Arc<Common> {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let info = RequestInfo::new(method, path, query).expect("info");
    Arc::new(Common::new(Begin {
        id: AuditId::from_header(ID.as_bytes()).expect("id"),
        user: alice(),
        impersonated: None,
        info: &info,
        request_uri: target,
        source_ips: &["10.0.0.1".parse().expect("ip"), "::1".parse().expect("ip")],
        user_agent: agent,
        received: at(123_456_789),
    }))
}

fn event(common: Arc<Common>, level: Level, stage: Stage) -> Event {
    Event {
        stage_time: if stage == Stage::RequestReceived {
            common.received
        } else {
            at(2_500_000_999)
        },
        common,
        level,
        stage,
        impersonated: None,
        status: None,
        annotations: Vec::new(),
        request_object: None,
        response_object: None,
    }
}

fn captured(bytes: &[u8], omit_managed_fields: bool) -> Option<Arc<Body>> {
    let reservation = crate::sink::Budget::new(1 << 20)
        .reserve(bytes.len())
        .expect("budget");
    Some(Arc::new(Body::captured(
        bytes.to_vec(),
        omit_managed_fields,
        Encoding::Json,
        1 << 20,
        reservation,
    )))
}

fn json(event: &Event) -> String {
    serde_json::to_string(&Json { event, typed: true }).expect("json")
}

#[test]
fn request_received_of_a_resource_request() {
    let c = common(
        "GET",
        "/api/v1/namespaces/default/pods/p1/log?follow=false",
        Some("kubectl/v1.33.0"),
    );
    let e = event(c, Level::Metadata, Stage::RequestReceived);
    assert_eq!(
        json(&e),
        concat!(
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","#,
            r#""auditID":"0f6d2c1a-5b7e-4c3d-9e8f-1a2b3c4d5e6f","stage":"RequestReceived","#,
            r#""requestURI":"/api/v1/namespaces/default/pods/p1/log?follow=false","verb":"get","#,
            r#""user":{"username":"alice","uid":"u-1","groups":["dev","system:authenticated"],"#,
            r#""extra":{"a":["1"],"scopes":["x","y"]}},"sourceIPs":["10.0.0.1","::1"],"#,
            r#""userAgent":"kubectl/v1.33.0","objectRef":{"resource":"pods","namespace":"default","#,
            r#""name":"p1","apiVersion":"v1","subresource":"log"},"#,
            r#""requestReceivedTimestamp":"2023-11-14T22:13:20.123456Z","#,
            r#""stageTimestamp":"2023-11-14T22:13:20.123456Z"}"#
        )
    );
}

#[test]
fn response_complete_with_bodies_status_and_annotations() {
    let c = common("POST", "/apis/apps/v1/namespaces/a/deployments", None);
    let mut e = event(c, Level::RequestResponse, Stage::ResponseComplete);
    e.status = Some(ResponseStatus {
        code: 409,
        summary: Some(StatusSummary {
            status: "Failure".into(),
            message: "deployments.apps \"d\" already exists".into(),
            reason: "AlreadyExists".into(),
        }),
    });
    e.annotations = vec![
        ("z.example.com/last", "1".into()),
        ("authorization.k8s.io/decision", "allow".into()),
    ];
    let request = b"{\n  \"kind\": \"Deployment\",\n  \"metadata\": {\"name\": \"d\",\n \"managedFields\": [{\"manager\": \"kubectl\"}]},\n  \"spec\": {\"note\": \"two  spaces\\\" q\", \"big\": 12345678901234567890123}\n}";
    e.request_object = captured(request, false);
    let response = br#"{"kind":"Deployment","metadata":{"name":"d","managedFields":[{"manager":"x"}],"uid":"1"}}"#;
    e.response_object = captured(response, true);
    assert_eq!(
        json(&e),
        concat!(
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","#,
            r#""auditID":"0f6d2c1a-5b7e-4c3d-9e8f-1a2b3c4d5e6f","stage":"ResponseComplete","#,
            r#""requestURI":"/apis/apps/v1/namespaces/a/deployments","verb":"create","#,
            r#""user":{"username":"alice","uid":"u-1","groups":["dev","system:authenticated"],"#,
            r#""extra":{"a":["1"],"scopes":["x","y"]}},"sourceIPs":["10.0.0.1","::1"],"#,
            r#""objectRef":{"resource":"deployments","namespace":"a","apiGroup":"apps","apiVersion":"v1"},"#,
            r#""responseStatus":{"metadata":{},"status":"Failure","message":"deployments.apps \"d\" already exists","reason":"AlreadyExists","code":409},"#,
            r#""requestObject":{"kind":"Deployment","metadata":{"name":"d","managedFields":[{"manager":"kubectl"}]},"spec":{"note":"two  spaces\" q","big":12345678901234567890123}},"#,
            r#""responseObject":{"kind":"Deployment","metadata":{"name":"d","uid":"1"}},"#,
            r#""requestReceivedTimestamp":"2023-11-14T22:13:20.123456Z","#,
            r#""stageTimestamp":"2023-11-14T22:13:22.500000Z","#,
            r#""annotations":{"authorization.k8s.io/decision":"allow","z.example.com/last":"1"}}"#
        )
    );
}

#[test]
fn non_resource_requests_have_no_object_ref_and_the_method_as_verb() {
    let c = common("POST", "/some/path", Some("curl"));
    let mut e = event(c, Level::Metadata, Stage::ResponseComplete);
    e.impersonated = Some(TestUser::new("bob", &[]));
    e.status = Some(ResponseStatus {
        code: 200,
        summary: None,
    });
    assert_eq!(
        json(&e),
        concat!(
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","#,
            r#""auditID":"0f6d2c1a-5b7e-4c3d-9e8f-1a2b3c4d5e6f","stage":"ResponseComplete","#,
            r#""requestURI":"/some/path","verb":"post","#,
            r#""user":{"username":"alice","uid":"u-1","groups":["dev","system:authenticated"],"#,
            r#""extra":{"a":["1"],"scopes":["x","y"]}},"impersonatedUser":{"username":"bob"},"#,
            r#""sourceIPs":["10.0.0.1","::1"],"userAgent":"curl","#,
            r#""responseStatus":{"metadata":{},"code":200},"#,
            r#""requestReceivedTimestamp":"2023-11-14T22:13:20.123456Z","#,
            r#""stageTimestamp":"2023-11-14T22:13:22.500000Z"}"#
        )
    );
}

#[test]
fn omitted_bodies_are_explained_in_annotations() {
    let c = common("PUT", "/api/v1/namespaces/a/configmaps/c", None);
    let mut e = event(c, Level::RequestResponse, Stage::ResponseComplete);
    e.request_object = captured(b"\x0a\x02k8s", false);
    let why = Omitted::TooLarge { limit: 1_048_576 };
    e.response_object = Some(Arc::new(Body::omitted(why)));
    let text = json(&e);
    assert!(
        !text.contains("requestObject") && !text.contains("responseObject"),
        "{text}"
    );
    assert!(
        text.ends_with(concat!(
            r#""annotations":{"audit.apiagg.io/request-object":"omitted: the body is not JSON","#,
            r#""audit.apiagg.io/response-object":"omitted: the body is larger than 1048576 bytes"}}"#
        )),
        "{text}"
    );
}

#[test]
fn managed_fields_are_dropped_from_lists_and_tables() {
    let list = br#"{"kind":"PodList","items":[{"metadata":{"name":"a","managedFields":[]}},{"metadata":{"managedFields":[1],"name":"b"}}]}"#;
    let rendered = render(list, true).expect("json");
    assert_eq!(
        rendered.get(),
        r#"{"kind":"PodList","items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#
    );
    let table = br#"{"kind":"Table","rows":[{"cells":[],"object":{"metadata":{"managedFields":[],"name":"a"}}}]}"#;
    let rendered = render(table, true).expect("json");
    assert_eq!(
        rendered.get(),
        r#"{"kind":"Table","rows":[{"cells":[],"object":{"metadata":{"name":"a"}}}]}"#
    );
    assert!(render(b"{\"a\":", false).is_none());
    assert!(render(b"kind: Pod\n", false).is_none());
}

#[test]
fn event_lists_carry_the_type_once() {
    let c = common("GET", "/version", None);
    let events = vec![
        Arc::new(event(c.clone(), Level::Metadata, Stage::RequestReceived)),
        Arc::new(event(c, Level::Metadata, Stage::ResponseComplete)),
    ];
    let list: serde_json::Value =
        serde_json::from_slice(&serde_json::to_vec(&EventList(&events)).expect("json"))
            .expect("parse");
    let text = list.to_string();
    assert!(
        text.starts_with(r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[{"level":"Metadata","auditID""#),
        "{text}"
    );
    assert_eq!(list["items"].as_array().expect("items").len(), 2);
    assert_eq!(list["items"][1]["stage"], "ResponseComplete");
    assert!(list["items"][1].get("kind").is_none());
}

#[test]
fn long_user_agents_are_cut_as_upstream() {
    let agent = format!("{}é{}", "a".repeat(1023), "b".repeat(10));
    let c = common("GET", "/version", Some(&agent));
    let e = event(c, Level::Metadata, Stage::RequestReceived);
    let ua = e.user_agent();
    assert_eq!(ua, format!("{}...TRUNCATED", "a".repeat(1023)));
}

#[test]
fn compact_keeps_strings_and_drops_whitespace() {
    assert_eq!(
        compact("{ \"a b\" : [ 1 ,\t2 ],\n \"c\\\\\":\"\\\" x\" }"),
        r#"{"a b":[1,2],"c\\":"\" x"}"#
    );
}
