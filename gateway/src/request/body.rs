//! Request body framing towards the backend: every body is framed exactly once.
//!
//! pingora-proxy 0.9.1 hands each piece of the client's body to the HTTP/1.1 writer as it
//! comes (`proxy_h1.rs` `send_body_to_pipe` → `send_body_to1`), and ends the body with
//! `finish_body`. A piece of zero bytes that ends the body (an HTTP/2 client's empty DATA frame
//! with END_STREAM, as `curl -T -` and streaming clients send) is still written: in chunked
//! encoding a zero-length chunk is the terminator `0\r\n\r\n`, and `finish_body` then writes the
//! terminator again (cloudflare/pingora#935). The backend reads the second one as the start of
//! another request on a pooled connection, and its answer (a 400) goes to whichever request
//! uses that connection next.

use bytes::Bytes;

/// Makes an empty last piece of a request body "no more data", so that only the end of the
/// body frames it (one chunked terminator, or nothing for a `Content-Length` body). Empty
/// pieces before the last are skipped by pingora itself.
pub fn frame_once(piece: &mut Option<Bytes>, end_of_stream: bool) {
    if end_of_stream && piece.as_ref().is_some_and(Bytes::is_empty) {
        *piece = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_last_piece_is_no_piece() {
        let mut empty_last = Some(Bytes::new());
        frame_once(&mut empty_last, true);
        assert_eq!(empty_last, None);

        // Everything else passes unchanged (pingora skips empty pieces before the end).
        for (piece, end) in [
            (Some(Bytes::from_static(b"x")), true),
            (Some(Bytes::from_static(b"x")), false),
            (Some(Bytes::new()), false),
            (None, true),
        ] {
            let mut passed = piece.clone();
            frame_once(&mut passed, end);
            assert_eq!(passed, piece);
        }
    }
}
