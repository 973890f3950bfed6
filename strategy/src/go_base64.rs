//! Byte fields (`spec.caBundle`) read as kube-apiserver reads them: Go's `encoding/json` decodes
//! a `[]byte` with `base64.StdEncoding`, which skips line breaks, accepts non-zero bits after the
//! last full byte, and names the offset of the first bad byte
//! (`illegal base64 data at input byte N`).

/// The alphabet's value of each byte (`0xff`: not in the alphabet).
const fn decode_map() -> [u8; 256] {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut map = [0xff_u8; 256];
    let mut i = 0;
    while i < alphabet.len() {
        map[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    map
}

const DECODE: [u8; 256] = decode_map();

fn is_line_break(b: u8) -> bool {
    b == b'\n' || b == b'\r'
}

/// Decodes `text` as Go's `base64.StdEncoding.Decode` does; `Err(offset)` as its
/// `CorruptInputError`.
pub fn decode(text: &str) -> Result<Vec<u8>, usize> {
    let src = text.as_bytes();
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    while si < src.len() {
        let (next, bytes) = quantum(src, si)?;
        out.extend_from_slice(&bytes);
        si = next;
    }
    Ok(out)
}

/// Go's `decodeQuantum`: up to four symbols from `si` (line breaks skipped); the offset after
/// them and the bytes they hold.
fn quantum(src: &[u8], mut si: usize) -> Result<(usize, Vec<u8>), usize> {
    let mut buf = [0_u8; 4];
    let mut len = 4;
    let mut j = 0;
    while j < 4 {
        if si == src.len() {
            if j == 0 {
                return Ok((si, Vec::new()));
            }
            // Padding is required: a quantum may not end early.
            return Err(si - j);
        }
        let symbol = src[si];
        si += 1;
        let value = DECODE[symbol as usize];
        if value != 0xff {
            buf[j] = value;
            j += 1;
            continue;
        }
        if is_line_break(symbol) {
            continue;
        }
        if symbol != b'=' || j < 2 {
            return Err(si - 1);
        }
        if j == 2 {
            // `==` expected: the first is read.
            while si < src.len() && is_line_break(src[si]) {
                si += 1;
            }
            if si == src.len() {
                return Err(src.len());
            }
            if src[si] != b'=' {
                return Err(si - 1);
            }
            si += 1;
        }
        while si < src.len() && is_line_break(src[si]) {
            si += 1;
        }
        if si < src.len() {
            // Data after the padding.
            return Err(si);
        }
        len = j;
        break;
    }
    let value = (u32::from(buf[0]) << 18)
        | (u32::from(buf[1]) << 12)
        | (u32::from(buf[2]) << 6)
        | u32::from(buf[3]);
    let bytes = [(value >> 16) as u8, (value >> 8) as u8, value as u8];
    Ok((si, bytes[..len - 1].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn decodes_as_go_does() {
        assert_eq!(decode("YWJj").as_deref(), Ok(&b"abc"[..]));
        assert_eq!(decode("YWJj\nZGVm\r\n").as_deref(), Ok(&b"abcdef"[..]));
        assert_eq!(decode("YQ==").as_deref(), Ok(&b"a"[..]));
        // Bits after the last byte are not checked.
        assert_eq!(decode("YWJ=").as_deref(), Ok(&b"ab"[..]));
        assert_eq!(decode("").as_deref(), Ok(&b""[..]));
    }

    #[test]
    fn names_the_offset_go_names() {
        // As kube-apiserver 1.37 answered (`real_kube::invalid_apiservices`).
        assert_eq!(decode("not base64!"), Err(3));
        assert_eq!(decode("YWJ"), Err(0));
        assert_eq!(decode("YQ==YQ=="), Err(4));
        assert_eq!(decode("YQ="), Err(3));
        assert_eq!(decode("=YWJ"), Err(0));
    }
}
