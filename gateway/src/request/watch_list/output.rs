//! Where an emulated stream's bytes go: to the client as they are, or gzipped when the client
//! accepts gzip (kube-apiserver 1.37 compresses streaming lists, `WatchListCompression`; Go
//! clients ask for gzip by default). Every write is flushed (a sync flush), so an event never
//! waits in the compressor for the next one: a watch event reaches the client when it
//! reaches apiagg.

use std::io::Write;

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use pingora_error::{Error, ErrorType};

use crate::request::ctx::Session;

/// Writes larger than this are compressed on a blocking thread, off the async workers.
const COMPRESS_INLINE: usize = 256 << 10;

/// The body of one emulated stream.
pub struct Output {
    /// `None` when the client did not accept gzip, or once the compressor failed.
    gzip: Option<GzEncoder<Vec<u8>>>,
}

/// Why a stream stopped before its end.
pub enum Stopped {
    /// The client went away: nothing more to write.
    ClientGone,
    /// The stream cannot go on after part of its body went out (the compressor failed, the
    /// backend's watch broke): the answer is abandoned, never ended as if complete.
    Broken(Box<Error>),
}

impl Stopped {
    /// A stream broken by `why` (apiagg's own failure, not the backend's).
    fn internal(why: &str) -> Stopped {
        Stopped::Broken(Error::explain(ErrorType::InternalError, why.to_string()))
    }
}

impl Output {
    /// Gzipped when `gzip`, at the fastest level (as kube-apiserver compresses answers).
    pub fn new(gzip: bool) -> Output {
        Output {
            gzip: gzip.then(|| GzEncoder::new(Vec::new(), Compression::fast())),
        }
    }

    /// Whether the answer says `Content-Encoding: gzip`.
    pub fn gzipped(&self) -> bool {
        self.gzip.is_some()
    }

    /// Sends `events` (whole events: the gzip stream stays decodable up to them).
    pub async fn send(&mut self, session: &mut Session, events: Vec<u8>) -> Result<(), Stopped> {
        if events.is_empty() {
            return Ok(());
        }
        const FAILED: &str = "compressing the emulated streaming list failed";
        let bytes = match self.gzip.take() {
            None => events,
            Some(mut encoder) if events.len() <= COMPRESS_INLINE => {
                let out = compress(&mut encoder, &events);
                self.gzip = Some(encoder);
                out.ok_or_else(|| Stopped::internal(FAILED))?
            }
            Some(mut encoder) => {
                let compressed = tokio::task::spawn_blocking(move || {
                    let out = compress(&mut encoder, &events);
                    (encoder, out)
                })
                .await;
                match compressed {
                    Ok((encoder, Some(out))) => {
                        self.gzip = Some(encoder);
                        out
                    }
                    _ => return Err(Stopped::internal(FAILED)),
                }
            }
        };
        write(session, Bytes::from(bytes)).await
    }

    /// Sends a chunk relayed from the backend's watch.
    pub async fn relay(&mut self, session: &mut Session, chunk: Bytes) -> Result<(), Stopped> {
        if self.gzip.is_none() {
            return write(session, chunk).await;
        }
        self.send(session, chunk.to_vec()).await
    }

    /// Ends the body: the gzip trailer, then the end of the answer.
    pub async fn end(self, session: &mut Session) {
        if let Some(encoder) = self.gzip {
            if let Ok(trailer) = encoder.finish() {
                let _ = session
                    .write_response_body(Bytes::from(trailer), false)
                    .await;
            }
        }
        let _ = session.finish_body().await;
    }
}

/// Writes a piece of the body; a write that fails is a client gone.
async fn write(session: &mut Session, bytes: Bytes) -> Result<(), Stopped> {
    let written = session.write_response_body(bytes, false).await;
    written.map_err(|_| Stopped::ClientGone)
}

/// Compresses `bytes` and flushes: what came out so far decodes to everything written.
fn compress(encoder: &mut GzEncoder<Vec<u8>>, bytes: &[u8]) -> Option<Vec<u8>> {
    encoder.write_all(bytes).ok()?;
    encoder.flush().ok()?;
    Some(std::mem::take(encoder.get_mut()))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::read::MultiGzDecoder;

    use super::*;

    /// Every flushed piece, read alone after the ones before it, decodes to its events: a
    /// client reading the stream sees each event as soon as its piece arrives.
    #[test]
    fn each_flushed_piece_decodes_to_its_events() {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        let events = [
            &b"{\"type\":\"ADDED\",\"object\":{}}\n"[..],
            b"{\"type\":\"BOOKMARK\",\"object\":{}}\n",
        ];
        let mut stream = Vec::new();
        let mut seen = Vec::new();
        for event in events {
            stream.extend(compress(&mut encoder, event).expect("compress"));
            // A streaming decoder fed what arrived so far yields every event sent so far.
            let mut decoder = flate2::write::GzDecoder::new(Vec::new());
            decoder.write_all(&stream).expect("decode");
            decoder.flush().expect("flush");
            seen = decoder.get_ref().clone();
            assert!(seen.ends_with(event), "{}", String::from_utf8_lossy(&seen));
        }
        stream.extend(encoder.finish().expect("finish"));
        let mut whole = Vec::new();
        MultiGzDecoder::new(&stream[..])
            .read_to_end(&mut whole)
            .expect("whole stream");
        assert_eq!(whole, seen);
        assert_eq!(whole, events.concat());
    }
}
