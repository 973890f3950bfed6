//! The one parser of `Accept` and `Accept-Encoding` headers (RFC 9110 §12.5): clauses in
//! preference order (quality descending, specific before wildcard, then as sent). An unreadable
//! quality counts as 0. What `q=0` means is the caller's policy, as upstream differs by endpoint:
//! discovery still serves a `q=0` clause (apimachinery), OpenAPI refuses it (kube-openapi and
//! RFC 9110: "not acceptable"); [`Clause::refused`] says which clauses RFC 9110 refuses.

/// One acceptable clause of an `Accept` header.
#[derive(Debug, Clone, PartialEq)]
pub struct Clause<'a> {
    /// Type (`application`, `*`).
    pub kind: &'a str,
    /// Subtype (`json`, `*`).
    pub subtype: &'a str,
    /// Quality, 0 to 1.
    pub q: f64,
    /// Other parameters, in order.
    pub params: Vec<(&'a str, &'a str)>,
}

impl<'a> Clause<'a> {
    /// The last value of a parameter (Go keeps the last of a repeated one).
    pub fn param(&self, key: &str) -> Option<&'a str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// Whether RFC 9110 calls the clause "not acceptable" (`q=0`).
    pub fn refused(&self) -> bool {
        self.q <= 0.0
    }

    /// Whether the clause names exactly `media` (`type/subtype`, case-insensitive).
    pub fn is(&self, media: &str) -> bool {
        media.split_once('/').is_some_and(|(kind, subtype)| {
            self.kind.eq_ignore_ascii_case(kind) && self.subtype.eq_ignore_ascii_case(subtype)
        })
    }

    /// Whether the clause accepts JSON (`application/json`, `application/*`, `*/*`).
    pub fn accepts_json(&self) -> bool {
        (self.kind.eq_ignore_ascii_case("application")
            && (self.subtype.eq_ignore_ascii_case("json") || self.subtype == "*"))
            || (self.kind == "*" && self.subtype == "*")
    }
}

/// The quality of a `q=` value; unreadable or out-of-range values count as 0.
fn quality(value: &str) -> f64 {
    value
        .parse::<f64>()
        .ok()
        .filter(|q| q.is_finite() && (0.0..=1.0).contains(q))
        .unwrap_or(0.0)
}

/// Splits a header into `(range, q, params)` for every clause, in the order sent.
fn split(header: &str) -> impl Iterator<Item = (&str, f64, Vec<(&str, &str)>)> {
    header.split(',').filter_map(|part| {
        let mut pieces = part.split(';');
        let range = pieces.next()?.trim();
        if range.is_empty() {
            return None;
        }
        let mut q = 1.0;
        let mut params = Vec::new();
        for param in pieces {
            let Some((k, v)) = param.split_once('=') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            if k.eq_ignore_ascii_case("q") {
                q = quality(v);
            } else {
                params.push((k, v));
            }
        }
        Some((range, q, params))
    })
}

/// The media ranges of an `Accept` header, most preferred first (malformed ones left out).
pub fn media_ranges(header: &str) -> Vec<Clause<'_>> {
    let mut clauses: Vec<Clause<'_>> = split(header)
        .filter_map(|(range, q, params)| {
            let (kind, subtype) = match range.split_once('/') {
                Some((t, s)) if !s.contains('/') => (t.trim(), s.trim()),
                None if range == "*" => ("*", "*"),
                _ => return None,
            };
            Some(Clause {
                kind,
                subtype,
                q,
                params,
            })
        })
        .collect();
    // A stable sort: equal preference keeps the order sent.
    clauses.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then_with(|| (a.kind == "*").cmp(&(b.kind == "*")))
            .then_with(|| (a.subtype == "*").cmp(&(b.subtype == "*")))
    });
    clauses
}

/// Whether an `Accept-Encoding` header accepts `coding` (by name or `*`) with a quality above 0.
pub fn accepts_coding(header: &str, coding: &str) -> bool {
    split(header).any(|(name, q, _)| q > 0.0 && (name.eq_ignore_ascii_case(coding) || name == "*"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_quality_is_refused() {
        for header in [
            "application/json;q=0",
            "application/json; Q=0.0",
            "application/json;q=abc",
        ] {
            let clauses = media_ranges(header);
            assert_eq!(clauses.len(), 1, "{header}");
            assert!(clauses[0].refused(), "{header}");
        }
        assert!(!media_ranges("application/json;q=0.001")[0].refused());
        assert!(!accepts_coding("gzip;q=0", "gzip"));
        assert!(accepts_coding("deflate, GZIP", "gzip"));
        assert!(accepts_coding("*", "gzip"));
        assert!(!accepts_coding("identity", "gzip"));
    }

    #[test]
    fn zero_quality_in_every_spelling() {
        for header in [
            "text/plain;q=0",
            "text/plain;q=0.0",
            "text/plain;q=0.000",
            "text/plain;Q=0",
        ] {
            let clauses = media_ranges(header);
            assert_eq!(clauses[0].q, 0.0, "{header}");
            assert!(clauses[0].refused(), "{header}");
        }
        // A refused clause sorts after every acceptable one, whatever its place in the header.
        let clauses = media_ranges("application/json;q=0, text/plain;q=0.1");
        assert!(clauses[0].is("text/plain") && !clauses[0].refused());
        assert!(clauses[1].is("application/json") && clauses[1].refused());
    }

    #[test]
    fn whitespace_and_case() {
        let clauses =
            media_ranges("  Application/JSON ;  q = 0.5 ; g = apidiscovery.k8s.io ,TEXT/* ;Q=1");
        assert_eq!(clauses.len(), 2);
        // Type and subtype keep their spelling; comparisons ignore case.
        assert_eq!((clauses[0].kind, clauses[0].subtype), ("TEXT", "*"));
        assert_eq!(clauses[0].q, 1.0);
        let json = &clauses[1];
        assert_eq!(
            (json.kind, json.subtype, json.q),
            ("Application", "JSON", 0.5)
        );
        assert!(json.is("application/json") && json.accepts_json());
        assert_eq!(json.param("g"), Some("apidiscovery.k8s.io"));
        assert!(media_ranges("").is_empty());
        assert!(media_ranges(" , ;q=1,").is_empty());
        assert!(accepts_coding(" GZip ; q = 0.5 ", "gzip"));
        assert!(!accepts_coding("gzip; Q=0.0", "gzip"));
    }

    #[test]
    fn preference_order_then_sent_order() {
        let clauses =
            media_ranges("*/*;q=0.8, text/html;q=0.8, application/json , Application/YAML");
        let ranges: Vec<String> = clauses
            .iter()
            .map(|c| format!("{}/{}", c.kind, c.subtype))
            .collect();
        assert_eq!(
            ranges,
            ["application/json", "Application/YAML", "text/html", "*/*"]
        );
        assert!(clauses[1].is("application/yaml"));
        assert!(clauses[0].accepts_json() && clauses[3].accepts_json());
    }

    #[test]
    fn parameters_and_malformed_ranges() {
        let clauses = media_ranges("application/json;g=apidiscovery.k8s.io;v=v1;v=v2, a/b/c, *");
        assert_eq!(clauses.len(), 2);
        assert_eq!(clauses[0].param("v"), Some("v2"));
        assert_eq!((clauses[1].kind, clauses[1].subtype), ("*", "*"));
    }
}
