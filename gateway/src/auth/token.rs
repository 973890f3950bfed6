//! Bearer tokens: kube-apiserver's static token file (CSV, re-read when it changes) and
//! TokenReview at the delegate, cached by the token's SHA-256 (accepted tokens 2 min, refused
//! ones 10 s by default; transport errors are not cached).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiagg_config::TokenReview;
use arc_swap::ArcSwap;
use dashmap::DashMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::user::User;
use crate::backends::{Clients, Reload, Upstream};

/// The static token file: token → user.
pub struct TokenFile {
    path: PathBuf,
    users: ArcSwap<HashMap<String, Arc<User>>>,
    last: Mutex<Vec<u8>>,
}

/// Parses kube-apiserver's CSV: `token,user,uid,"group1,group2"` (groups optional; further
/// columns ignored; `#` comments and blank lines skipped).
pub fn parse_token_csv(text: &str) -> Result<HashMap<String, Arc<User>>, String> {
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields = split_csv(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        if fields.len() < 3 {
            return Err(format!(
                "line {}: needs at least token, user name and uid",
                i + 1
            ));
        }
        let groups = fields
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let (token, name, uid) = (&fields[0], &fields[1], &fields[2]);
        if token.is_empty() || name.is_empty() {
            return Err(format!("line {}: empty token or user name", i + 1));
        }
        let user = Arc::new(User::new(name.clone(), uid.clone(), groups, Vec::new()));
        // As kube-apiserver: a duplicated token keeps its first line.
        users.entry(token.clone()).or_insert(user);
    }
    Ok(users)
}

/// One CSV line split into fields; double quotes group, `""` is a quote.
fn split_csv(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err("unterminated quote".into());
    }
    fields.push(field);
    Ok(fields.into_iter().map(|f| f.trim().to_string()).collect())
}

impl TokenFile {
    /// Reads the file; it must be valid now.
    pub fn load(path: PathBuf) -> Result<TokenFile, String> {
        let file = TokenFile {
            path,
            users: ArcSwap::from_pointee(HashMap::new()),
            last: Mutex::new(Vec::new()),
        };
        file.reload()?;
        Ok(file)
    }

    /// The user of `token`, if listed.
    pub fn user(&self, token: &str) -> Option<Arc<User>> {
        self.users.load().get(token).cloned()
    }
}

impl Reload for TokenFile {
    fn name(&self) -> String {
        format!("token file {}", self.path.display())
    }

    fn reload(&self) -> Result<bool, String> {
        let bytes = std::fs::read(&self.path).map_err(|e| e.to_string())?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == bytes {
            return Ok(false);
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| e.to_string())?;
        self.users.store(Arc::new(parse_token_csv(text)?));
        *last = bytes;
        Ok(true)
    }
}

/// Upper bound of one TokenReview.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Most tokens remembered; past it, expired entries are dropped, then everything.
const CACHE_LIMIT: usize = 16_384;

struct Cached {
    outcome: Result<Arc<User>, String>,
    until: Instant,
}

/// Outcomes of token checks by the SHA-256 of the token (the token itself is not kept),
/// each until its deadline; at most 16,384 entries.
#[derive(Default)]
pub struct TokenCache {
    entries: DashMap<[u8; 32], Cached>,
}

impl TokenCache {
    /// The outcome remembered for `token`, if still fresh (a hash and a shard read lock).
    pub fn get(&self, token: &str) -> Option<Result<Arc<User>, String>> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let entry = self.entries.get(&key)?;
        (entry.until > Instant::now()).then(|| entry.outcome.clone())
    }

    /// Remembers `outcome` for `token` during `ttl`.
    pub fn put(&self, token: &str, outcome: Result<Arc<User>, String>, ttl: Duration) {
        if self.entries.len() >= CACHE_LIMIT {
            let now = Instant::now();
            self.entries.retain(|_, c| c.until > now);
            if self.entries.len() >= CACHE_LIMIT {
                self.entries.clear();
            }
        }
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let until = Instant::now() + ttl;
        self.entries.insert(key, Cached { outcome, until });
    }
}

/// TokenReview at the delegate, with a cache.
pub struct TokenReviewer {
    ttl: TokenReview,
    cache: TokenCache,
}

#[derive(Deserialize)]
struct Review {
    #[serde(default)]
    status: ReviewStatus,
}

#[derive(Default, Deserialize)]
struct ReviewStatus {
    #[serde(default)]
    authenticated: bool,
    #[serde(default)]
    user: ReviewUser,
    #[serde(default)]
    error: String,
}

#[derive(Default, Deserialize)]
struct ReviewUser {
    #[serde(default)]
    username: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl TokenReviewer {
    /// A reviewer remembering outcomes as long as `ttl` says.
    pub fn new(ttl: TokenReview) -> TokenReviewer {
        TokenReviewer {
            ttl,
            cache: TokenCache::default(),
        }
    }

    /// Who `token` belongs to, as the delegate says (cached).
    pub async fn review(
        &self,
        token: &str,
        delegate: &Upstream,
        clients: &Clients,
    ) -> Result<Arc<User>, String> {
        if let Some(outcome) = self.cache.get(token) {
            return outcome;
        }
        let outcome = ask(token, delegate, clients).await?;
        let ttl = match &outcome {
            Ok(_) => self.ttl.cache_ttl,
            Err(_) => self.ttl.failure_cache_ttl,
        };
        self.cache.put(token, outcome.clone(), ttl);
        outcome
    }
}

/// One TokenReview: `Ok(outcome)` when the delegate answered (accepted or refused), `Err` when
/// it could not be asked (not cached).
async fn ask(
    token: &str,
    delegate: &Upstream,
    clients: &Clients,
) -> Result<Result<Arc<User>, String>, String> {
    let body = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    });
    let client = clients.pick(delegate).map_err(|e| e.to_string())?;
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";
    let answer = client
        .post_json(path, &body, REVIEW_TIMEOUT)
        .await
        .map_err(|e| format!("TokenReview: {e}"))?;
    if !matches!(answer.status, 200 | 201) {
        return Err(format!(
            "TokenReview: the delegate answered {}",
            answer.status
        ));
    }
    let review: Review = serde_json::from_slice(&answer.body)
        .map_err(|e| format!("TokenReview: invalid answer: {e}"))?;
    let status = review.status;
    if !status.authenticated || status.user.username.is_empty() {
        let why = if status.error.is_empty() {
            "token not accepted".into()
        } else {
            status.error
        };
        return Ok(Err(why));
    }
    let user = status.user;
    let extra = user.extra.into_iter().collect();
    Ok(Ok(Arc::new(User::new(
        user.username,
        user.uid,
        user.groups,
        extra,
    ))))
}

#[cfg(test)]
mod tests {
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
        assert!(err.starts_with("line 2"), "{err}");
        assert!(parse_token_csv("t,\"a,b").is_err());
    }
}
