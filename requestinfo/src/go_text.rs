//! Go's printing of values in upstream's messages, shared by every crate that words errors as
//! kube-apiserver does (APIService validation, the authentication configuration's).

/// Go's `%q` of a string: quoted, with `"`, `\` and unprintable characters escaped.
pub fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            // Go's `unicode.IsPrint` holds no space but U+0020.
            c if c.is_control() || (c.is_whitespace() && c != ' ') => match c as u32 {
                n if n <= 0xffff => out.push_str(&format!("\\u{n:04x}")),
                n => out.push_str(&format!("\\U{n:08x}")),
            },
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::go_quote;

    #[test]
    fn quotes_as_gos_percent_q() {
        assert_eq!(go_quote("a \"b\"\\"), r#""a \"b\"\\""#);
        assert_eq!(
            go_quote("\t\u{7f}\u{a0}\u{2028}é"),
            r#""\t\x7f\u00a0\u2028é""#
        );
    }
}
