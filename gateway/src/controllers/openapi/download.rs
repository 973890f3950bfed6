//! Downloading one source's OpenAPI documents (the delegate, or one backend Service) with ETag
//! revalidation. An input only changes when a download brings a usable document: on errors,
//! garbage or a document `PreparedV2` rejects, the last good one stays.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use apiagg_openapi_merge::{PreparedV2, SourceDoc, V3Served, V3Source};
use bytes::Bytes;
use serde_json::Value;

use super::documents::{Documents, Parsed};

use crate::backends::{Client, FetchError, Fetched};

const JSON: &str = "application/json";

/// Why a source's documents were not taken. Every variant is retryable: the source may heal.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The download failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The document arrived but cannot be used.
    #[error("unusable {what}: {message}")]
    Unusable { what: String, message: String },
    /// A redirect apiagg does not follow (see [`followable_redirect`]).
    #[error("{url}: status {code} to Location {location:?} not followed: {why}")]
    Redirect {
        url: String,
        code: u16,
        location: String,
        why: &'static str,
    },
    /// A worker thread failed (a bug).
    #[error("worker failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
    /// The OpenAPI parser thread is gone (a bug, or it could not start).
    #[error("the OpenAPI parser thread is gone")]
    ParserGone,
    /// Several of the above, for one source.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<Error>),
}

impl Error {
    fn unusable(what: impl Into<String>, message: impl std::fmt::Display) -> Error {
        Error::Unusable {
            what: what.into(),
            message: message.to_string(),
        }
    }

    /// One error from several, or `Ok` when there is none.
    pub fn all(mut errors: Vec<Error>) -> Result<(), Error> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(Error::Several(errors)),
        }
    }
}

/// Runs CPU-heavy work (parsing, preparing multi-megabyte documents) off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    Ok(tokio::task::spawn_blocking(work).await?)
}

/// The client of one source and the bound of each download.
pub struct Download<'a> {
    /// The endpoint's client.
    pub client: &'a Client,
    /// Upper bound of one request.
    pub timeout: Duration,
    /// Where parsed v2 documents are shared.
    pub documents: &'a Documents,
    /// Whether v2 documents are read at all (`--openapi-v2`).
    pub v2: bool,
}

impl Download<'_> {
    async fn get(&self, path: &str, if_none_match: Option<&str>) -> Result<Fetched, Error> {
        Ok(self
            .client
            .get(path, JSON, if_none_match, self.timeout)
            .await?)
    }
}

/// The last accepted `/openapi/v2` body of a source.
#[derive(Default)]
pub struct V2State {
    /// ETag the source sent with it (sent back as `If-None-Match`).
    etag: Option<String>,
    /// SHA-512 of the body: an identical body sent without ETag changes nothing.
    hash: Option<String>,
}

/// Outcome of one `/openapi/v2` download.
pub enum V2Answer {
    /// 304, or the same bytes again.
    Unchanged,
    /// 404: the source has no OpenAPI v2 document.
    Missing,
    /// A new JSON document (not yet accepted: see [`V2State::accept`]).
    New {
        etag: Option<String>,
        hash: String,
        doc: Arc<SourceDoc>,
    },
}

impl V2State {
    /// Downloads `/openapi/v2` with `If-None-Match`.
    pub async fn fetch(&self, source: &Download<'_>) -> Result<V2Answer, Error> {
        let _turn = source.documents.download_turn().await;
        let fetched = source.get("/openapi/v2", self.etag.as_deref()).await?;
        match fetched.status {
            304 if self.hash.is_some() => Ok(V2Answer::Unchanged),
            404 => Ok(V2Answer::Missing),
            200 => match source
                .documents
                .parse(fetched.body, self.hash.clone())
                .await
            {
                Parsed::Same => Ok(V2Answer::Unchanged),
                Parsed::Doc { hash, doc } => Ok(V2Answer::New {
                    etag: fetched.etag,
                    hash,
                    doc,
                }),
                Parsed::Unusable(e) => Err(Error::unusable("/openapi/v2", e)),
                Parsed::Gone => Err(Error::ParserGone),
            },
            _ => Err(fetched.unexpected().into()),
        }
    }

    /// Records the validators of an accepted document.
    pub fn accept(&mut self, etag: Option<String>, hash: String) {
        self.etag = etag;
        self.hash = Some(hash);
    }

    /// Forgets the document (the source answered 404).
    pub fn clear(&mut self) {
        *self = V2State::default();
    }
}

/// Prepares a delegate document off the async workers.
pub async fn prepare_local(doc: Arc<SourceDoc>) -> Result<Arc<PreparedV2>, Error> {
    blocking(move || PreparedV2::local_source(doc))
        .await?
        .map(Arc::new)
        .map_err(|e| Error::unusable("/openapi/v2", e))
}

/// Prepares a backend document for each `(group, version)`, all or nothing.
pub async fn prepare_remote(
    doc: Arc<SourceDoc>,
    group_versions: Vec<(String, String)>,
) -> Result<Vec<Arc<PreparedV2>>, Error> {
    blocking(move || {
        group_versions
            .iter()
            .map(|(group, version)| {
                PreparedV2::remote_source(Arc::clone(&doc), group, version)
                    .map(Arc::new)
                    .map_err(|e| Error::unusable(format!("/openapi/v2 for {group}/{version}"), e))
            })
            .collect()
    })
    .await?
}

/// A v3 document as downloaded, and where from.
struct CachedV3 {
    url: String,
    etag: Option<String>,
    served: Arc<V3Served>,
}

/// The per-key v3 documents of one source.
#[derive(Default)]
pub struct V3State {
    docs: HashMap<String, CachedV3>,
}

/// Whether `body` looks like an OpenAPI v3 document: a JSON object with a string `openapi`.
fn check_v3_document(body: &[u8]) -> Result<(), &'static str> {
    #[derive(serde::Deserialize)]
    struct Shape {
        #[allow(dead_code)]
        openapi: String,
    }
    let starts_with_object = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    if !starts_with_object {
        return Err("not a JSON object");
    }
    serde_json::from_slice::<Shape>(body)
        .map(|_| ())
        .map_err(|_| "not an OpenAPI v3 document: no string `openapi`")
}

impl V3State {
    /// A state holding `docs` (tests of what is merged from it).
    #[cfg(test)]
    pub fn holding(docs: impl IntoIterator<Item = Arc<V3Served>>) -> V3State {
        let docs = docs.into_iter().map(|served| {
            let url = format!("/openapi/v3/{}", served.doc.key);
            let cached = CachedV3 {
                url,
                etag: None,
                served,
            };
            (cached.served.doc.key.clone(), cached)
        });
        V3State {
            docs: docs.collect(),
        }
    }

    /// The current documents, by key.
    pub fn documents(&self) -> impl Iterator<Item = (&str, &Arc<V3Served>)> {
        self.docs.iter().map(|(k, c)| (k.as_str(), &c.served))
    }

    /// The document for `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Arc<V3Served>> {
        self.docs.get(key).map(|c| &c.served)
    }

    /// Reads the source's `/openapi/v3` index and every document it lists whose key `wanted`
    /// accepts. A document is downloaded again only when its URL changed, or when the URL has
    /// no `hash` (then with `If-None-Match`). 404 on the index: the source has no v3 documents.
    /// On any error the previous documents of the affected keys stay.
    pub async fn fetch(
        &mut self,
        source: &Download<'_>,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<(), Error> {
        let fetched = source.get("/openapi/v3", None).await?;
        let index = match fetched.status {
            404 => {
                self.docs.clear();
                return Ok(());
            }
            200 => fetched.json::<Value>()?,
            _ => return Err(fetched.unexpected().into()),
        };
        let index =
            V3Source::from_index("", &index).map_err(|e| Error::unusable("/openapi/v3", e))?;
        let listed: Vec<(String, String)> = index
            .paths
            .into_iter()
            .filter(|(key, _)| wanted(key))
            .collect();
        self.docs
            .retain(|key, _| listed.iter().any(|(k, _)| k == key));

        // A document fetched through a redirect is kept under the index's (stale) URL: while
        // the index lists that URL it is not fetched again (we hold the current document); when
        // the index lists another URL, it is.
        let work = listed.into_iter().filter_map(|(key, url)| {
            let previous = self.docs.get(&key);
            let same_url = previous.is_some_and(|c| c.url == url);
            if same_url && url.contains("hash=") {
                return None;
            }
            let etag = previous.filter(|_| same_url).and_then(|c| c.etag.clone());
            Some(async move {
                let result = fetch_v3_document(source, &key, &url, etag.as_deref()).await;
                (key, url, result)
            })
        });
        let results = futures_util::future::join_all(work).await;
        let mut errors = Vec::new();
        for (key, url, result) in results {
            match result {
                Ok(Some((etag, served))) => {
                    let changed = self
                        .docs
                        .get(&key)
                        .is_none_or(|c| c.served.doc.hash != served.doc.hash);
                    let served = match self.docs.get(&key) {
                        Some(c) if !changed => Arc::clone(&c.served),
                        _ => Arc::new(served),
                    };
                    self.docs.insert(key, CachedV3 { url, etag, served });
                }
                Ok(None) => {
                    if let Some(c) = self.docs.get_mut(&key) {
                        c.url = url;
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        Error::all(errors)
    }
}

/// A v3 document answered 200: its `ETag` (when sent) and the document.
type FreshV3 = (Option<String>, V3Served);

/// Where a v3 document's redirect may be followed: kube-openapi's handler3 answers a URL whose
/// `hash` is no longer current with 301 to the same path with the current hash (the index and
/// the documents can disagree for a moment, or for good when two servers answer at random), and
/// client-go follows it.
///
/// Threat model: the redirect comes from the delegate or a backend, trusted to serve documents,
/// not to send apiagg elsewhere. Followed anywhere, it would make apiagg send its credentials
/// (client certificate, delegate token, the aggregator's identity headers) to a host or path of
/// the sender's choosing (SSRF). So only 301, 302, 307 and 308 are followed, to a `Location`
/// that is a path on the same source (no scheme, no authority, not `//`) equal to `url`'s path
/// with another query, and only one hop.
fn followable_redirect<'a>(url: &str, fetched: &'a Fetched) -> Result<&'a str, Error> {
    let location = fetched.location();
    let refuse = |why| Error::Redirect {
        url: fetched.url.clone(),
        code: fetched.status,
        location: location.unwrap_or_default().to_string(),
        why,
    };
    if !matches!(fetched.status, 301 | 302 | 307 | 308) {
        return Err(refuse("only 301, 302, 307 and 308 are followed"));
    }
    let Some(location) = location else {
        return Err(refuse("no Location, or not visible ASCII"));
    };
    if !location.starts_with('/') || location.starts_with("//") {
        return Err(refuse("not a path on the same source"));
    }
    fn path(url: &str) -> &str {
        url.split_once('?').map_or(url, |(path, _)| path)
    }
    if path(location) != path(url) {
        return Err(refuse("another path (only the query may change)"));
    }
    Ok(location)
}

/// One v3 document: `Some((etag, document))` on 200, `None` on 304. One redirect is followed
/// when [`followable_redirect`] allows it.
async fn fetch_v3_document(
    source: &Download<'_>,
    key: &str,
    url: &str,
    if_none_match: Option<&str>,
) -> Result<Option<FreshV3>, Error> {
    if !url.starts_with('/') {
        return Err(Error::unusable(
            format!("/openapi/v3 entry {key}"),
            format!("serverRelativeURL {url:?} is not a path"),
        ));
    }
    let mut fetched = source.get(url, if_none_match).await?;
    let mut if_none_match = if_none_match;
    if is_redirect(fetched.status) {
        let location = followable_redirect(url, &fetched)?;
        // The ETag was the stale URL's: the current document is asked for unconditionally.
        if_none_match = None;
        fetched = source.get(location, None).await?;
        if is_redirect(fetched.status) {
            return Err(Error::Redirect {
                url: fetched.url.clone(),
                code: fetched.status,
                location: fetched.location().unwrap_or_default().to_string(),
                why: "a second redirect (one is followed)",
            });
        }
    }
    match fetched.status {
        304 if if_none_match.is_some() => Ok(None),
        200 => {
            check_v3_document(&fetched.body).map_err(|e| fetched.invalid(e))?;
            let body: Bytes = fetched.body;
            Ok(Some((fetched.etag, V3Served::new(key, body))))
        }
        _ => Err(fetched.unexpected().into()),
    }
}

/// A 3xx that sends the client elsewhere (304 does not).
fn is_redirect(status: u16) -> bool {
    (300..400).contains(&status) && status != 304
}

#[cfg(test)]
mod redirect_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v3_documents_must_be_objects_with_openapi() {
        assert!(check_v3_document(br#" {"openapi":"3.0.0","paths":{}}"#).is_ok());
        assert!(check_v3_document(br#"["3.0.0"]"#).is_err());
        assert!(check_v3_document(br#"{"paths":{}}"#).is_err());
        assert!(check_v3_document(b"garbage").is_err());
    }
}
