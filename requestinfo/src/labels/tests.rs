use super::LabelOperator::*;
use super::*;

fn req(key: &str, operator: LabelOperator, values: &[&str]) -> LabelRequirement {
    LabelRequirement {
        key: key.to_string(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

fn parsed(selector: &str) -> Vec<LabelRequirement> {
    match LabelSelector::parse(selector) {
        Ok(parsed) => parsed.requirements,
        Err(e) => panic!("{selector:?}: {e}"),
    }
}

fn error(selector: &str) -> String {
    match LabelSelector::parse(selector) {
        Ok(parsed) => panic!("{selector:?} parsed: {parsed:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn valid_selectors_read_as_upstream() {
    let table: Vec<(&str, Vec<LabelRequirement>)> = vec![
        ("", vec![]),
        ("   ", vec![]),
        ("x=a", vec![req("x", Equals, &["a"])]),
        ("x==a", vec![req("x", DoubleEquals, &["a"])]),
        ("x!=a", vec![req("x", NotEquals, &["a"])]),
        ("x in (b,a,b)", vec![req("x", In, &["a", "b"])]),
        ("x notin (a)", vec![req("x", NotIn, &["a"])]),
        ("x", vec![req("x", Exists, &[])]),
        ("!x", vec![req("x", DoesNotExist, &[])]),
        ("x>1", vec![req("x", GreaterThan, &["1"])]),
        ("x<05", vec![req("x", LessThan, &["05"])]),
        ("x in ()", vec![req("x", In, &[""])]),
        ("x in (,a)", vec![req("x", In, &["", "a"])]),
        ("x in (a,)", vec![req("x", In, &["", "a"])]),
        ("x in (a,,b)", vec![req("x", In, &["", "a", "b"])]),
        ("x=", vec![req("x", Equals, &[""])]),
        (
            "x= ,z= ",
            vec![req("x", Equals, &[""]), req("z", Equals, &[""])],
        ),
        ("\rx", vec![req("x", Exists, &[])]),
        (
            " x  notin\t\n(abc, def) , y ",
            vec![req("x", NotIn, &["abc", "def"]), req("y", Exists, &[])],
        ),
        // Sorted by key, stable for one key.
        (
            "z!=a,b=1,z",
            vec![
                req("b", Equals, &["1"]),
                req("z", NotEquals, &["a"]),
                req("z", Exists, &[]),
            ],
        ),
        // `in` and `notin` are words where a key or a value is expected.
        ("in=notin", vec![req("in", Equals, &["notin"])]),
        (
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            vec![req(
                "0.1.2.domain/99",
                NotIn,
                &["10.10.100.1", "tick.tack.clock"],
            )],
        ),
        ("x in (in,notin)", vec![req("x", In, &["in", "notin"])]),
        (
            "example.com/app-name in (v1.2_3)",
            vec![req("example.com/app-name", In, &["v1.2_3"])],
        ),
        (
            "x=a,\0y",
            vec![req("x", Equals, &["a"]), req("y", Exists, &[])],
        ),
        // A NUL byte where a token starts ends the selector, as upstream reads it.
        ("x=a \0 !!garbage", vec![req("x", Equals, &["a"])]),
        ("\0x=a", vec![]),
        // Inside a token it ends the token.
        ("x\0=a", vec![req("x", Equals, &["a"])]),
    ];
    for (selector, want) in table {
        assert_eq!(parsed(selector), want, "{selector:?}");
    }
}

const KEY_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must \
    start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', \
    regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric \
    characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. \
    'MyValue',  or 'my_value',  or '12345', regex used for validation is \
    '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const NOT_INTEGER: &str = "for 'Gt', 'Lt' operators, the value must be an integer";

#[test]
fn invalid_selectors_fail_with_upstream_messages() {
    let parse = "unable to parse requirement: ";
    let long_value = format!("x={}", "a".repeat(64));
    let table: Vec<(&str, String)> = vec![
        (
            "x=a b",
            "found 'b', expected: ',' or 'end of string'".into(),
        ),
        (
            "x=a=b",
            "found '=', expected: ',' or 'end of string'".into(),
        ),
        ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
        ("x,", "found '', expected: identifier after ','".into()),
        ("x,=", "found '=', expected: identifier after ','".into()),
        (
            ",x",
            "found ',', expected: !, identifier, or 'end of string'".into(),
        ),
        ("!", format!("{parse}found '', expected: identifier")),
        ("!!x", format!("{parse}found '!', expected: identifier")),
        (
            "x y",
            format!("{parse}found 'y', expected: in, notin, =, ==, !=, gt, lt"),
        ),
        (
            "x!!=a",
            format!("{parse}found '!', expected: in, notin, =, ==, !=, gt, lt"),
        ),
        ("x===a", format!("{parse}found '=', expected: identifier")),
        (
            "x==a==b",
            "found '==', expected: ',' or 'end of string'".into(),
        ),
        ("x=(a)", format!("{parse}found '(', expected: identifier")),
        ("x in a", format!("{parse}found 'a' expected: '('")),
        ("x in", format!("{parse}found '' expected: '('")),
        ("x in (a", format!("{parse}found '', expected: ',' or ')'")),
        (
            "x in (a b)",
            format!("{parse}found 'b', expected: ',' or ')'"),
        ),
        (
            "x in (=)",
            format!("{parse}found '=', expected: ',', ')' or identifier"),
        ),
        (
            "x in (a,=)",
            format!("{parse}found '=', expected: ',', or identifier"),
        ),
        (
            "x<a",
            format!("{parse}values[0]: Invalid value: \"a\": {NOT_INTEGER}"),
        ),
        (
            "x>-1",
            format!("{parse}values[0][x]: Invalid value: \"-1\": {VALUE_RULE}"),
        ),
        (
            "x>1-",
            format!(
                "{parse}[values[0]: Invalid value: \"1-\": {NOT_INTEGER}, \
                 values[0][x]: Invalid value: \"1-\": {VALUE_RULE}]"
            ),
        ),
        (
            "x=a||y",
            format!("{parse}values[0][x]: Invalid value: \"a||y\": {VALUE_RULE}"),
        ),
        (
            "x in (a,-b)",
            format!("{parse}values[0][x]: Invalid value: \"-b\": {VALUE_RULE}"),
        ),
        (
            &long_value,
            format!(
                "{parse}values[0][x]: Invalid value: \"{}\": must be no more than 63 bytes",
                "a".repeat(64)
            ),
        ),
        (
            "-x",
            format!("{parse}<nil>: Invalid value: \"-x\": name part {KEY_RULE}"),
        ),
        (
            "a/b/c=d",
            format!(
                "{parse}<nil>: Invalid value: \"a/b/c\": a valid label key {KEY_RULE} with an \
                 optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ),
        ),
        (
            "/x",
            format!("{parse}<nil>: Invalid value: \"/x\": prefix part must be non-empty"),
        ),
        (
            "a/",
            format!(
                "{parse}<nil>: Invalid value: \"a/\": name part must be non-empty; \
                 name part {KEY_RULE}"
            ),
        ),
        (
            "Ex.com/x",
            format!(
                "{parse}<nil>: Invalid value: \"Ex.com/x\": prefix part a lowercase RFC 1123 \
                 subdomain must consist of lower case alphanumeric characters, '-' or '.', and \
                 must start and end with an alphanumeric character (e.g. 'example.com', regex \
                 used for validation is \
                 '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        ),
        (
            "é\u{1}",
            format!("{parse}<nil>: Invalid value: \"é\\x01\": name part {KEY_RULE}"),
        ),
    ];
    for (selector, want) in table {
        assert_eq!(error(selector), want, "{selector:?}");
    }
}

#[test]
fn long_names_are_refused() {
    let name = "a".repeat(64);
    let want = format!(
        "unable to parse requirement: <nil>: Invalid value: \"{name}\": \
         name part must be no more than 63 bytes"
    );
    assert_eq!(error(&name), want);
    let prefix = format!("{}.com/x", "a".repeat(250));
    let want = format!(
        "unable to parse requirement: <nil>: Invalid value: \"{prefix}\": \
         prefix part must be no more than 253 bytes"
    );
    assert_eq!(error(&prefix), want);
    assert_eq!(parsed(&"a".repeat(63)).len(), 1);
}

#[test]
fn selectors_are_bounded() {
    let big = "a".repeat(LabelSelector::MAX_BYTES + 1);
    assert_eq!(
        LabelSelector::parse(&big),
        Err(LabelSelectorError::TooLong {
            len: LabelSelector::MAX_BYTES + 1,
            max: LabelSelector::MAX_BYTES,
        })
    );
    let keys = |n: usize| {
        (0..n)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(parsed(&keys(1_000)).len(), 1_000);
    assert_eq!(
        LabelSelector::parse(&keys(1_001)),
        Err(LabelSelectorError::TooManyRequirements { max: 1_000 })
    );
    assert_eq!(
        error(&keys(1_001)),
        "label selector has more than 1000 requirements"
    );
}
