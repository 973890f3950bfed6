//! `metav1.Duration`: a Go duration string (`"3s"`, `"1m30s"`, `"1.5h"`, `"-30s"`), read as Go's
//! `time.ParseDuration` reads it and printed as Go's `Duration.String` prints it.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::validate::quote;

/// A signed duration in nanoseconds, as Go's `time.Duration` (zero when absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(pub i64);

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

impl GoDuration {
    /// `n` seconds.
    pub const fn seconds(n: i64) -> GoDuration {
        GoDuration(n * SECOND as i64)
    }

    /// Go's `time.ParseDuration`, with its error texts (`time: invalid duration "x"`).
    pub fn parse(text: &str) -> Result<GoDuration, String> {
        let invalid = || format!("time: invalid duration {}", quote(text));
        let mut s = text.as_bytes();
        let mut negative = false;
        if let Some((&sign @ (b'-' | b'+'), rest)) = s.split_first() {
            negative = sign == b'-';
            s = rest;
        }
        if s == b"0" {
            return Ok(GoDuration(0));
        }
        if s.is_empty() {
            return Err(invalid());
        }
        let mut total: u64 = 0;
        while !s.is_empty() {
            if !(s[0] == b'.' || s[0].is_ascii_digit()) {
                return Err(invalid());
            }
            let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut whole: u64 = 0;
            for &c in &s[..digits] {
                whole = whole
                    .checked_mul(10)
                    .and_then(|w| w.checked_add(u64::from(c - b'0')))
                    .filter(|w| *w <= 1 << 63)
                    .ok_or_else(invalid)?;
            }
            s = &s[digits..];
            let (mut fraction, mut scale, mut fraction_digits) = (0u64, 1f64, 0);
            if s.first() == Some(&b'.') {
                s = &s[1..];
                fraction_digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
                let mut overflow = false;
                for &c in &s[..fraction_digits] {
                    // As Go: digits past what fits are dropped.
                    match fraction
                        .checked_mul(10)
                        .and_then(|f| f.checked_add(u64::from(c - b'0')))
                        .filter(|f| *f <= 1 << 63)
                    {
                        Some(f) if !overflow => {
                            fraction = f;
                            scale *= 10.0;
                        }
                        _ => overflow = true,
                    }
                }
                s = &s[fraction_digits..];
            }
            if digits == 0 && fraction_digits == 0 {
                return Err(invalid());
            }
            let unit_len = s
                .iter()
                .take_while(|c| !(**c == b'.' || c.is_ascii_digit()))
                .count();
            if unit_len == 0 {
                return Err(format!("time: missing unit in duration {}", quote(text)));
            }
            // Split at an ASCII byte, so both halves are UTF-8.
            let unit_text = String::from_utf8_lossy(&s[..unit_len]);
            s = &s[unit_len..];
            let unit = match unit_text.as_ref() {
                "ns" => NANOSECOND,
                "us" | "\u{b5}s" | "\u{3bc}s" => MICROSECOND,
                "ms" => MILLISECOND,
                "s" => SECOND,
                "m" => MINUTE,
                "h" => HOUR,
                other => {
                    let (unit, text) = (quote(other), quote(text));
                    return Err(format!("time: unknown unit {unit} in duration {text}"));
                }
            };
            if whole > (1u64 << 63) / unit {
                return Err(invalid());
            }
            let mut value = whole * unit;
            if fraction > 0 {
                value += (fraction as f64 * (unit as f64 / scale)) as u64;
                if value > 1 << 63 {
                    return Err(invalid());
                }
            }
            total = total
                .checked_add(value)
                .filter(|t| *t <= 1 << 63)
                .ok_or_else(invalid)?;
        }
        if negative {
            return Ok(GoDuration((total as i64).wrapping_neg()));
        }
        i64::try_from(total).map(GoDuration).map_err(|_| invalid())
    }

    /// As a `std` duration; `None` when negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }
}

/// `fraction` of `v / 10^precision`, trailing zeros and a bare point omitted, and what is left.
fn fraction(mut v: u64, precision: u32) -> (String, u64) {
    let mut digits = Vec::new();
    let mut print = false;
    for _ in 0..precision {
        let digit = v % 10;
        print = print || digit != 0;
        if print {
            digits.push(char::from(b'0' + digit as u8));
        }
        v /= 10;
    }
    if print {
        digits.push('.');
    }
    (digits.into_iter().rev().collect(), v)
}

impl fmt::Display for GoDuration {
    /// Go's `Duration.String`: `1h2m3.5s`, `1m0s`, `1.5ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let u = self.0.unsigned_abs();
        if u == 0 {
            return f.write_str("0s");
        }
        if u < SECOND {
            let (precision, unit) = match u {
                u if u < MICROSECOND => (0, "ns"),
                u if u < MILLISECOND => (3, "\u{b5}s"),
                _ => (6, "ms"),
            };
            let (frac, whole) = fraction(u, precision);
            return write!(f, "{sign}{whole}{frac}{unit}");
        }
        let (frac, seconds) = fraction(u, 9);
        let (minutes, hours) = (seconds / 60, seconds / 3600);
        match (hours, minutes) {
            (0, 0) => write!(f, "{sign}{}{frac}s", seconds % 60),
            (0, _) => write!(f, "{sign}{}m{}{frac}s", minutes % 60, seconds % 60),
            _ => write!(f, "{sign}{hours}h{}m{}{frac}s", minutes % 60, seconds % 60),
        }
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = GoDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Go duration string such as \"3s\" or \"1m30s\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GoDuration, E> {
                GoDuration::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Text)
    }
}
