//! Label selectors as k8s.io/apimachinery's `labels.Parse` reads them: `key=value`,
//! `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key`, `!key`, `key>1`,
//! `key<1`, requirements joined by commas, spaces, tabs and line breaks around tokens. Keys are
//! qualified names, values label values (at most 63 bytes); the messages are upstream's. Values
//! of a set are sorted and deduplicated and requirements sorted by key, as upstream returns them.
//!
//! Upstream's lexer reads bytes and takes a NUL byte for the end of a token (or of the selector,
//! where a token would start); this one does the same, so both read the same requirements.
//! Unlike upstream, selectors are bounded ([`LabelSelector::MAX_BYTES`],
//! [`LabelSelector::MAX_REQUIREMENTS`]).

use std::collections::BTreeSet;

mod lex;
mod validate;

pub use self::validate::{label_key_errors, label_value_errors, regex_error, subdomain_errors};

use self::lex::{scan, Item, Token};

/// How a requirement compares a label (k8s.io/apimachinery's `selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOperator {
    /// `key=value`.
    Equals,
    /// `key==value`.
    DoubleEquals,
    /// `key!=value`.
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`.
    NotIn,
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `key>1` (`gt`).
    GreaterThan,
    /// `key<1` (`lt`).
    LessThan,
}

/// One requirement: every requirement of a selector must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    /// The label key.
    pub key: String,
    /// How it is compared.
    pub operator: LabelOperator,
    /// The values, sorted and deduplicated (empty for `Exists` and `DoesNotExist`).
    pub values: Vec<String>,
}

/// A parsed label selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Requirements, sorted by key (stable: requirements on one key keep their order).
    pub requirements: Vec<LabelRequirement>,
}

/// Why a label selector cannot be read: 400 `BadRequest`. Not retryable: the selector must
/// change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelSelectorError {
    /// Longer than [`LabelSelector::MAX_BYTES`] (apiagg's bound, not upstream's).
    #[error("label selector of {len} bytes is over the limit of {max} bytes")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// More than [`LabelSelector::MAX_REQUIREMENTS`] requirements (apiagg's bound).
    #[error("label selector has more than {max} requirements")]
    TooManyRequirements {
        /// The limit.
        max: usize,
    },
    /// A token where another was expected between requirements.
    #[error("found '{found}', expected: {expected}")]
    Unexpected {
        /// The token found (empty at the end).
        found: String,
        /// What upstream expects there.
        expected: &'static str,
    },
    /// A requirement cannot be read.
    #[error("unable to parse requirement: {0}")]
    Requirement(RequirementError),
}

/// Why one requirement cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// A token where another was expected.
    #[error("found '{found}', expected: {expected}")]
    Unexpected {
        /// The token found (empty at the end).
        found: String,
        /// What upstream expects there.
        expected: &'static str,
    },
    /// `in` or `notin` not followed by `(` (upstream's message has no comma).
    #[error("found '{found}' expected: '('")]
    NoOpenParen {
        /// The token found.
        found: String,
    },
    /// An invalid key or value: upstream's field errors, aggregated as upstream prints them.
    #[error("{}", validate::aggregate(.0))]
    Invalid(Vec<FieldError>),
}

/// One invalid key or value (k8s.io/apimachinery's `field.Error` of type `Invalid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field path (`<nil>` for a key, `values[0][key]` for a value).
    pub field: String,
    /// The value.
    pub value: String,
    /// Why it is invalid.
    pub detail: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = crate::go_quote(&self.value);
        write!(f, "{}: Invalid value: {value}: {}", self.field, self.detail)
    }
}

type Result<T, E = LabelSelectorError> = std::result::Result<T, E>;

impl LabelSelector {
    /// The longest selector read, in bytes.
    pub const MAX_BYTES: usize = 64 * 1024;
    /// The most requirements read.
    pub const MAX_REQUIREMENTS: usize = 1_000;

    /// Parses a (decoded) selector; the empty selector has no requirements.
    pub fn parse(selector: &str) -> Result<LabelSelector> {
        if selector.len() > Self::MAX_BYTES {
            return Err(LabelSelectorError::TooLong {
                len: selector.len(),
                max: Self::MAX_BYTES,
            });
        }
        let mut parser = Parser {
            items: scan(selector),
            at: 0,
        };
        let mut requirements = parser.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }
}

/// Where `in` and `notin` are words (values) or operators.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    Operator,
    Values,
}

struct Parser<'a> {
    items: Vec<Item<'a>>,
    at: usize,
}

fn unexpected(found: &str, expected: &'static str) -> RequirementError {
    RequirementError::Unexpected {
        found: found.to_string(),
        expected,
    }
}

impl<'a> Parser<'a> {
    fn lookahead(&self, context: Context) -> (Token, &'a str) {
        let item = self.items.get(self.at).copied().unwrap_or(Item {
            token: Token::End,
            literal: "",
        });
        let token = match item.token {
            Token::In | Token::NotIn if context == Context::Values => Token::Identifier,
            token => token,
        };
        (token, item.literal)
    }

    fn consume(&mut self, context: Context) -> (Token, &'a str) {
        let item = self.lookahead(context);
        self.at += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<LabelRequirement>> {
        let mut requirements = Vec::new();
        loop {
            match self.lookahead(Context::Values) {
                (Token::Identifier | Token::Not, _) => {
                    let requirement = self
                        .requirement()
                        .map_err(LabelSelectorError::Requirement)?;
                    if requirements.len() == LabelSelector::MAX_REQUIREMENTS {
                        return Err(LabelSelectorError::TooManyRequirements {
                            max: LabelSelector::MAX_REQUIREMENTS,
                        });
                    }
                    requirements.push(requirement);
                    match self.consume(Context::Values) {
                        (Token::End, _) => return Ok(requirements),
                        (Token::Comma, _) => match self.lookahead(Context::Values) {
                            (Token::Identifier | Token::Not, _) => {}
                            (_, found) => {
                                return Err(LabelSelectorError::Unexpected {
                                    found: found.to_string(),
                                    expected: "identifier after ','",
                                })
                            }
                        },
                        (_, found) => {
                            return Err(LabelSelectorError::Unexpected {
                                found: found.to_string(),
                                expected: "',' or 'end of string'",
                            })
                        }
                    }
                }
                (Token::End, _) => return Ok(requirements),
                (_, found) => {
                    return Err(LabelSelectorError::Unexpected {
                        found: found.to_string(),
                        expected: "!, identifier, or 'end of string'",
                    })
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<LabelRequirement, RequirementError> {
        let (key, inferred) = self.key_and_inferred_operator()?;
        if let Some(operator) = inferred {
            return Ok(LabelRequirement {
                key: key.to_string(),
                operator,
                values: Vec::new(),
            });
        }
        let operator = self.operator()?;
        let values = match operator {
            LabelOperator::In | LabelOperator::NotIn => self.values()?,
            _ => self.exact_value()?,
        };
        let values: Vec<String> = values.into_iter().map(str::to_string).collect();
        validate::requirement(key, operator, &values)?;
        Ok(LabelRequirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    /// The key, and `Exists` or `DoesNotExist` when no binary operator follows.
    fn key_and_inferred_operator(
        &mut self,
    ) -> Result<(&'a str, Option<LabelOperator>), RequirementError> {
        let mut operator = None;
        let (mut token, mut literal) = self.consume(Context::Values);
        if token == Token::Not {
            operator = Some(LabelOperator::DoesNotExist);
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(unexpected(literal, "identifier"));
        }
        validate::key(literal)?;
        if let (Token::End | Token::Comma, _) = self.lookahead(Context::Values) {
            operator.get_or_insert(LabelOperator::Exists);
        }
        Ok((literal, operator))
    }

    fn operator(&mut self) -> Result<LabelOperator, RequirementError> {
        Ok(match self.consume(Context::Operator) {
            (Token::In, _) => LabelOperator::In,
            (Token::Equals, _) => LabelOperator::Equals,
            (Token::DoubleEquals, _) => LabelOperator::DoubleEquals,
            (Token::GreaterThan, _) => LabelOperator::GreaterThan,
            (Token::LessThan, _) => LabelOperator::LessThan,
            (Token::NotIn, _) => LabelOperator::NotIn,
            (Token::NotEquals, _) => LabelOperator::NotEquals,
            (_, found) => return Err(unexpected(found, "in, notin, =, ==, !=, gt, lt")),
        })
    }

    /// `(a,b)`: a set, where empty entries (`()`, `(,a)`, `(a,,b)`, `(a,)`) are the empty value.
    fn values(&mut self) -> Result<BTreeSet<&'a str>, RequirementError> {
        let (token, found) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(RequirementError::NoOpenParen {
                found: found.to_string(),
            });
        }
        match self.lookahead(Context::Values) {
            (Token::Identifier | Token::Comma, found) => {
                let set = self.identifiers()?;
                match self.consume(Context::Values) {
                    (Token::ClosedPar, _) => Ok(set),
                    _ => Err(unexpected(found, "')'")),
                }
            }
            (Token::ClosedPar, _) => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([""]))
            }
            (_, found) => Err(unexpected(found, "',', ')' or identifier")),
        }
    }

    fn identifiers(&mut self) -> Result<BTreeSet<&'a str>, RequirementError> {
        let mut set = BTreeSet::new();
        loop {
            match self.consume(Context::Values) {
                (Token::Identifier, value) => {
                    set.insert(value);
                    match self.lookahead(Context::Values) {
                        (Token::Comma, _) => {}
                        (Token::ClosedPar, _) => return Ok(set),
                        (_, found) => return Err(unexpected(found, "',' or ')'")),
                    }
                }
                (Token::Comma, _) => {
                    if set.is_empty() {
                        set.insert("");
                    }
                    match self.lookahead(Context::Values) {
                        (Token::ClosedPar, _) => {
                            set.insert("");
                            return Ok(set);
                        }
                        (Token::Comma, _) => {
                            set.insert("");
                        }
                        _ => {}
                    }
                }
                (_, found) => return Err(unexpected(found, "',', or identifier")),
            }
        }
    }

    /// The one value of `=`, `==`, `!=`, `>` and `<` (empty before a comma or the end).
    fn exact_value(&mut self) -> Result<BTreeSet<&'a str>, RequirementError> {
        if let (Token::End | Token::Comma, _) = self.lookahead(Context::Values) {
            return Ok(BTreeSet::from([""]));
        }
        match self.consume(Context::Values) {
            (Token::Identifier, value) => Ok(BTreeSet::from([value])),
            (_, found) => Err(unexpected(found, "identifier")),
        }
    }
}

#[cfg(test)]
mod tests;
