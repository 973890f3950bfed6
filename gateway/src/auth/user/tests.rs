use super::*;

fn values<'a>(headers: &'a Headers, name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| n == name)
        .filter_map(|(_, v)| v.to_str().ok())
        .collect()
}

#[test]
fn remote_headers_follow_upstream() {
    let user = User::new(
        "alice".into(),
        "u-1".into(),
        vec!["dev".into(), "ops".into()],
        vec![("example.org/scopes".into(), vec!["a".into(), "b".into()])],
    )
    .expect("user");
    let h = user.remote_headers();
    assert_eq!(values(h, "x-remote-user"), ["alice"]);
    assert_eq!(values(h, "x-remote-uid"), ["u-1"]);
    assert_eq!(values(h, "x-remote-group"), ["dev", "ops", AUTHENTICATED]);
    assert_eq!(values(h, "x-remote-extra-example.org%2fscopes"), ["a", "b"]);
    let i = user.impersonation_headers();
    assert_eq!(values(i, "impersonate-group"), ["dev", "ops"]);
    assert_eq!(
        values(i, "impersonate-extra-example.org%2fscopes"),
        ["a", "b"]
    );
    // Measured once, as HTTP/2 counts a header list: name, value and 32 bytes a field.
    let field = |name: &str, value: &str| name.len() + value.len() + FIELD_OVERHEAD;
    let extra = "x-remote-extra-example.org%2fscopes";
    let remote = field("x-remote-user", "alice")
        + field("x-remote-uid", "u-1")
        + field("x-remote-group", "dev")
        + field("x-remote-group", "ops")
        + field("x-remote-group", AUTHENTICATED)
        + field(extra, "a")
        + field(extra, "b");
    let size = FieldsSize {
        fields: 7,
        bytes: remote,
    };
    assert_eq!(user.remote_size(), size);
    assert_eq!(user.impersonation_size().fields, 6);
}

#[test]
fn keys_round_trip() {
    for key in ["example.org/scopes", "100%", "a b", "plain-key"] {
        assert_eq!(unescape_key(&escape_key(key)), key.to_lowercase());
    }
    assert_eq!(escape_key("100%"), "100%25");
}

#[test]
fn anonymous_is_unauthenticated() {
    let anon = User::anonymous();
    assert_eq!(anon.groups, [UNAUTHENTICATED]);
}

#[test]
fn identities_that_cannot_be_forwarded_exactly_are_refused() {
    let user = |name: &str, uid: &str, group: &str, key: &str, value: &str| {
        User::new(
            name.into(),
            uid.into(),
            vec![group.into()],
            vec![(key.into(), vec![value.into()])],
        )
    };
    let why = |r: Result<User, InvalidIdentity>| r.map(|_| ()).map_err(|e| (e.field, e.why));
    assert_eq!(why(user("ok", "u", "g", "k", "v")), Ok(()));
    assert_eq!(why(user("bob smith", "", "g", "k", "a b")), Ok(()));
    let cases = [
        (
            user("mallory\x01", "", "g", "k", "v"),
            Field::User,
            Why::Control,
        ),
        (
            user("admin ", "", "g", "k", "v"),
            Field::User,
            Why::Whitespace,
        ),
        (
            user(" admin", "", "g", "k", "v"),
            Field::User,
            Why::Whitespace,
        ),
        (user("", "", "g", "k", "v"), Field::User, Why::Empty),
        (user("a\x7f", "", "g", "k", "v"), Field::User, Why::Control),
        (user("a\tb", "", "g", "k", "v"), Field::User, Why::Control),
        (
            user("a\u{a0}", "", "g", "k", "v"),
            Field::User,
            Why::Whitespace,
        ),
        (
            user("a\u{9b}b", "", "g", "k", "v"),
            Field::User,
            Why::Control,
        ),
        (user("a", "u\n", "g", "k", "v"), Field::Uid, Why::Control),
        (
            user("a", "", "system:masters ", "k", "v"),
            Field::Group(0),
            Why::Whitespace,
        ),
        (user("a", "", "g", "", "v"), Field::ExtraKey(0), Why::Empty),
        (
            user("a", "", "g", "k\r", "v"),
            Field::ExtraKey(0),
            Why::Control,
        ),
        (
            user("a", "", "g", "k", "v\0"),
            Field::ExtraValue(0),
            Why::Control,
        ),
    ];
    for (result, field, reason) in cases {
        assert_eq!(why(result), Err((field, reason)));
    }
}

#[test]
fn every_user_has_complete_header_sets() {
    let user = User::new("a".into(), "u".into(), vec!["g".into()], vec![]).expect("user");
    let names = |h: &Headers| h.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>();
    assert_eq!(
        names(user.remote_headers()),
        [
            "x-remote-user",
            "x-remote-uid",
            "x-remote-group",
            "x-remote-group"
        ]
    );
    assert_eq!(
        names(user.impersonation_headers()),
        ["impersonate-user", "impersonate-uid", "impersonate-group"]
    );
}
