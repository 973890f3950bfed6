//! The gnostic protobuf encoding checked by an independent decoder: Debian's `protoc
//! --decode_raw` reads the bytes apiagg writes for real OpenAPI v2 documents, and the decoded
//! tree must carry the JSON's facts at the field numbers of gnostic's `openapi.v2.Document`
//! (swagger = 1, info = 2 {title = 1, version = 2}, paths = 8 {path = 2 {name = 1, value = 2}},
//! definitions = 9 {additional_properties = 1 {name = 1, value = 2: Schema {type = 22 {value =
//! 1}, properties = 25 {additional_properties = 1}}}}).

use std::io::Write;
use std::process::{Command, Stdio};

use apiagg_openapi_merge::encode_document;
use serde_json::Value;

/// A node of `protoc --decode_raw`'s output.
#[derive(Debug)]
enum Node {
    /// `N: value` (strings keep their quotes and escapes).
    Scalar(String),
    /// `N { … }`.
    Message(Vec<(u32, Node)>),
}

impl Node {
    fn fields(&self, number: u32) -> Vec<&Node> {
        match self {
            Node::Message(fields) => fields
                .iter()
                .filter(|(n, _)| *n == number)
                .map(|(_, node)| node)
                .collect(),
            Node::Scalar(_) => Vec::new(),
        }
    }

    fn one(&self, number: u32) -> &Node {
        let found = self.fields(number);
        assert_eq!(found.len(), 1, "field {number} should appear once");
        found[0]
    }

    fn text(&self) -> &str {
        match self {
            Node::Scalar(s) => s,
            Node::Message(_) => panic!("a scalar was decoded as a message: {self:?}"),
        }
    }
}

fn parse(lines: &mut std::str::Lines<'_>) -> Node {
    let mut fields = Vec::new();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line == "}" {
            break;
        }
        if let Some(number) = line.strip_suffix(" {") {
            let number = number.parse().expect("field number");
            fields.push((number, parse(lines)));
        } else if let Some((number, value)) = line.split_once(": ") {
            let number = number.parse().expect("field number");
            fields.push((number, Node::Scalar(value.to_string())));
        } else {
            panic!("unexpected protoc line {line:?}");
        }
    }
    Node::Message(fields)
}

fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

fn fixture(path: &str) -> Value {
    let bytes = apiagg_test_fixtures::read(path);
    serde_json::from_slice(&bytes).expect("fixture JSON")
}

fn decode_raw(bytes: &[u8]) -> Node {
    let mut child = Command::new("protoc")
        .arg("--decode_raw")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run protoc ({e}): install Debian's protobuf-compiler (make test does)")
        });
    let mut stdin = child.stdin.take().expect("stdin");
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("protoc output");
    writer.join().expect("writer").expect("write to protoc");
    assert!(
        out.status.success(),
        "protoc refused the encoding: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    parse(&mut text.lines())
}

fn check(path: &str) {
    let doc = fixture(path);
    let tree = decode_raw(&encode_document(&doc));

    assert_eq!(tree.one(1).text(), quoted("2.0"));
    let info = tree.one(2);
    assert_eq!(
        info.one(1).text(),
        quoted(doc["info"]["title"].as_str().expect("title"))
    );
    assert_eq!(
        info.one(2).text(),
        quoted(doc["info"]["version"].as_str().expect("version"))
    );

    let json_paths: Vec<&String> = doc["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .filter(|k| !k.starts_with("x-"))
        .collect();
    let paths = tree.one(8).fields(2);
    assert_eq!(paths.len(), json_paths.len(), "path count of {path}");
    for (entry, name) in paths.iter().zip(&json_paths) {
        assert_eq!(entry.one(1).text(), quoted(name));
        // Every path item decodes as a message (operations, parameters).
        assert!(matches!(entry.one(2), Node::Message(_)), "{name}");
    }

    let json_definitions = doc["definitions"].as_object().expect("definitions");
    let definitions = tree.one(9).fields(1);
    assert_eq!(
        definitions.len(),
        json_definitions.len(),
        "definition count of {path}"
    );
    // A nested spot check: the first object definition with properties.
    let (index, (name, schema)) = json_definitions
        .iter()
        .enumerate()
        .find(|(_, (_, s))| s["type"] == "object" && s["properties"].is_object())
        .expect("an object definition with properties");
    let encoded = definitions[index].one(2);
    assert_eq!(encoded.one(22).one(1).text(), quoted("object"), "{name}");
    let properties = schema["properties"].as_object().expect("properties");
    assert_eq!(encoded.one(25).fields(1).len(), properties.len(), "{name}");
    if let Some(description) = schema["description"].as_str().filter(|d| d.is_ascii()) {
        let escaped = serde_json::to_string(description).expect("escape");
        // protoc escapes like C; for plain ASCII text without quotes or backslashes it matches.
        if !description.contains(['"', '\\', '\n', '\'']) {
            assert_eq!(encoded.one(4).text(), escaped, "{name}");
        }
    }
}

#[test]
fn metrics_server_document_decodes_with_protoc() {
    check("extension-apiservers/metrics-server/openapi-v2-metrics-server-0.4.0.json");
}

#[test]
fn kubernetes_document_decodes_with_protoc() {
    check("kubernetes/openapi-v2/swagger-v1.32.json");
}
