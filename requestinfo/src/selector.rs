//! Field selectors as k8s.io/apimachinery's `fields.ParseSelector` reads them: terms split on
//! unescaped commas and sorted, each `field!=value`, `field==value` or `field=value` (the first
//! operator from the left), values unescaped (`\\`, `\,`, `\=`). A list applies every term.

/// Why a field selector cannot be read: 400 `BadRequest`. Not retryable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A term has no operator. Not retryable: the selector must change.
    #[error("invalid selector: {selector:?}; can't understand {term:?}")]
    NoOperator {
        /// The whole selector.
        selector: String,
        /// The term.
        term: String,
    },
    /// A value has an escape other than `\\`, `\,` or `\=`, or an unescaped `,` or `=`. Not
    /// retryable: the selector must change.
    #[error("invalid field selector value {0:?}: only \\\\, \\, and \\= may be escaped and , and = must be")]
    BadValue(String),
}

/// The result of reading a selector.
type Result<T, E = SelectorError> = std::result::Result<T, E>;

/// One term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTerm {
    /// The field (`metadata.name`).
    pub field: String,
    /// The value it is compared with.
    pub value: String,
    /// `=`/`==` (true) or `!=` (false).
    pub equal: bool,
}

/// A parsed field selector: every term must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// Terms, in upstream's (sorted) order.
    pub terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses a (decoded) selector.
    pub fn parse(selector: &str) -> Result<FieldSelector> {
        let mut parts = split_terms(selector);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            let (field, operator, value) =
                split_term(&part).ok_or_else(|| SelectorError::NoOperator {
                    selector: selector.to_string(),
                    term: part.clone(),
                })?;
            terms.push(FieldTerm {
                field: field.to_string(),
                value: unescape(value)?,
                equal: operator != "!=",
            });
        }
        Ok(FieldSelector { terms })
    }

    /// The value the first `field=` term requires (upstream's `RequiresExactMatch`).
    pub fn requires_exact(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.equal && t.field == field)
            .map(|t| t.value.as_str())
    }

    /// Whether every term holds for an object whose fields are read by `value_of`.
    pub fn matches<'v>(&self, value_of: impl Fn(&str) -> Option<&'v str>) -> bool {
        self.terms.iter().all(|t| {
            let actual = value_of(&t.field).unwrap_or("");
            (actual == t.value) == t.equal
        })
    }
}

/// Terms split on commas not escaped by a backslash (escapes kept).
fn split_terms(selector: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    for c in selector.chars() {
        if escaped {
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            current.push(c);
            escaped = true;
        } else if c == ',' {
            terms.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    terms.push(current);
    terms
}

/// `(field, operator, value)` at the first operator from the left.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if rest.starts_with(op) {
                return Some((&term[..i], op, &term[i + op.len()..]));
            }
        }
    }
    None
}

fn unescape(value: &str) -> Result<String> {
    let mut out = String::with_capacity(value.len());
    let mut escaped = false;
    for c in value.chars() {
        match (escaped, c) {
            (true, '\\' | ',' | '=') => {
                out.push(c);
                escaped = false;
            }
            (true, _) | (false, ',' | '=') => return Err(SelectorError::BadValue(value.into())),
            (false, '\\') => escaped = true,
            (false, c) => out.push(c),
        }
    }
    if escaped {
        return Err(SelectorError::BadValue(value.into()));
    }
    Ok(out)
}
