//! Content hashes and ETags as kube-openapi and the aggregated discovery handler compute them:
//! the uppercase hex SHA-512 of the bytes. One implementation for every crate.

use sha2::{Digest, Sha512};

/// Uppercase hex SHA-512 of `bytes` (128 characters): kube-openapi's ETag value and v3 `hash`.
pub fn sha512_upper_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let digest = Sha512::digest(bytes);
    let mut out = String::with_capacity(digest.len() * 2);
    for byte in digest {
        out.push(HEX[usize::from(byte >> 4)] as char);
        out.push(HEX[usize::from(byte & 0x0f)] as char);
    }
    out
}

/// Strong ETag header value for `bytes`: the quoted [`sha512_upper_hex`].
pub fn strong_etag(bytes: &[u8]) -> String {
    format!("\"{}\"", sha512_upper_hex(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_hash_is_the_known_sha512() {
        let hash = sha512_upper_hex(b"");
        assert_eq!(hash.len(), 128);
        assert!(hash.starts_with("CF83E1357EEFB8BDF1542850D66D8007"));
        assert_eq!(strong_etag(b""), format!("\"{hash}\""));
    }
}
