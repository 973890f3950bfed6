//! The static token file (`--require-token`) and the TokenReview API it enables.
//!
//! The file has kube-apiserver's `--token-auth-file` format, `token,user,uid,"group1,group2"`
//! (groups optional; `#` comments and empty lines ignored), and as a sample-only extension any
//! further columns are `key=value` extra entries (a repeated key collects values). It is read on
//! every request, so a test rotates tokens by rewriting it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Map, Value};

use crate::auth::with_authenticated;
use crate::response::{bad_request, json, Body};

/// Path of the TokenReview collection.
pub const TOKEN_REVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// Largest TokenReview body read.
const MAX_REVIEW_BYTES: usize = 1 << 20;

/// The user a token authenticates as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUser {
    /// User name.
    pub name: String,
    /// UID (may be empty).
    pub uid: String,
    /// Groups of the file (without `system:authenticated`).
    pub groups: Vec<String>,
    /// Extra entries of the sample-only `key=value` columns.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The token file, read on every lookup.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
}

impl TokenFile {
    /// A token file at `path` (not read yet: it may not exist until the first request).
    pub fn new(path: PathBuf) -> TokenFile {
        TokenFile { path }
    }

    /// The user of `token`, reading the file now (the last line wins for a repeated token).
    pub fn lookup(&self, token: &str) -> Option<TokenUser> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "reading the token file");
                return None;
            }
        };
        parse(&text)
            .into_iter()
            .rev()
            .find(|(t, _)| t == token)
            .map(|(_, user)| user)
    }
}

/// `(token, user)` for every valid line.
fn parse(text: &str) -> Vec<(String, TokenUser)> {
    let mut out = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields = csv_fields(line);
        let [token, name, uid, rest @ ..] = fields.as_slice() else {
            tracing::warn!(line = number + 1, "token file line needs token,user,uid");
            continue;
        };
        if token.is_empty() || name.is_empty() {
            tracing::warn!(
                line = number + 1,
                "token file line with an empty token or user"
            );
            continue;
        }
        let groups = rest.first().map_or_else(Vec::new, |groups| {
            groups
                .split(',')
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(str::to_string)
                .collect()
        });
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for column in rest.iter().skip(1).filter(|c| !c.is_empty()) {
            let (key, value) = column.split_once('=').unwrap_or((column, ""));
            extra
                .entry(key.trim().to_string())
                .or_default()
                .push(value.trim().to_string());
        }
        let user = TokenUser {
            name: name.clone(),
            uid: uid.clone(),
            groups,
            extra,
        };
        out.push((token.clone(), user));
    }
    out
}

/// The fields of one CSV line: `"…"` quotes a field (`""` is a quote inside it); fields are
/// trimmed.
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' if quoted => quoted = false,
            '"' if field.trim().is_empty() => {
                field.clear();
                quoted = true;
            }
            ',' if !quoted => fields.push(std::mem::take(&mut field).trim().to_string()),
            c => field.push(c),
        }
    }
    fields.push(field.trim().to_string());
    fields
}

/// `POST tokenreviews`: `201` with the review and its `status`, `400` for a malformed body.
pub async fn review(tokens: &TokenFile, req: Request<Incoming>) -> Response<Body> {
    let body = match Limited::new(req.into_body(), MAX_REVIEW_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) => return bad_request(&format!("reading the request body: {e}")),
    };
    let mut review = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(review)) => review,
        Ok(_) => return bad_request("a TokenReview must be a JSON object"),
        Err(e) => return bad_request(&format!("the body is not a TokenReview: {e}")),
    };
    if let Err(message) = check_type(&review) {
        return bad_request(&message);
    }
    let token = match review.get("spec").and_then(|s| s.get("token")) {
        Some(Value::String(token)) if !token.is_empty() => token.clone(),
        Some(Value::String(_)) | None => return bad_request("spec.token is required"),
        Some(_) => return bad_request("spec.token must be a string"),
    };
    let status = match tokens.lookup(&token) {
        Some(user) => json!({"authenticated": true, "user": user_info(user)}),
        None => json!({"authenticated": false, "error": "invalid token"}),
    };
    review.insert("status".into(), status);
    json(StatusCode::CREATED, &Value::Object(review))
}

/// `kind` and `apiVersion`, when given, must be TokenReview's.
fn check_type(review: &Map<String, Value>) -> Result<(), String> {
    for (field, expected) in [
        ("kind", "TokenReview"),
        ("apiVersion", "authentication.k8s.io/v1"),
    ] {
        match review.get(field) {
            None => {}
            Some(Value::String(value)) if value == expected => {}
            Some(other) => return Err(format!("{field} must be {expected:?}, not {other}")),
        }
    }
    Ok(())
}

/// `status.user` of a review: `uid` and `extra` only when set.
fn user_info(user: TokenUser) -> Value {
    let mut info = Map::new();
    info.insert("username".into(), json!(user.name));
    if !user.uid.is_empty() {
        info.insert("uid".into(), json!(user.uid));
    }
    info.insert("groups".into(), json!(with_authenticated(user.groups)));
    if !user.extra.is_empty() {
        info.insert("extra".into(), json!(user.extra));
    }
    Value::Object(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quoted_groups_and_extra_columns() {
        let text = "# comment\n\nt1,alice,u1,\"a,b\",scopes=x,scopes=y,team=z\nt2, bob ,\nbad\n";
        let parsed = parse(text);
        assert_eq!(parsed.len(), 2);
        let (token, alice) = &parsed[0];
        assert_eq!(token, "t1");
        assert_eq!(alice.groups, ["a", "b"]);
        assert_eq!(alice.extra["scopes"], ["x", "y"]);
        assert_eq!(alice.extra["team"], ["z"]);
        let (token, bob) = &parsed[1];
        assert_eq!((token.as_str(), bob.name.as_str()), ("t2", "bob"));
        assert!(bob.uid.is_empty() && bob.groups.is_empty() && bob.extra.is_empty());
    }

    #[test]
    fn csv_quotes() {
        assert_eq!(csv_fields(r#"a,"b ""c"", d",e"#), ["a", r#"b "c", d"#, "e"]);
        assert_eq!(csv_fields("a,,b"), ["a", "", "b"]);
    }
}
