//! Upstream's label selector lexer (`labels.Lexer`): bytes, whitespace skipped between tokens,
//! the longest run of special symbols that is a token, words up to a special symbol or a space.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Token {
    End,
    ClosedPar,
    Comma,
    Not,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Item<'a> {
    pub(super) token: Token,
    pub(super) literal: &'a str,
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The token a run of special symbols or a word spells, if any.
fn keyword(text: &str) -> Option<Token> {
    Some(match text {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::Not,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

/// Upstream's lexer: `read` answers 0 past the end, and a NUL byte reads as 0 too.
struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn read(&mut self) -> u8 {
        match self.text.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn lex(&mut self) -> Item<'a> {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return Item {
                token: Token::End,
                literal: "",
            };
        }
        self.pos -= 1;
        if is_special(ch) {
            self.special()
        } else {
            self.word()
        }
    }

    /// The longest run of special symbols that is a token (every single symbol is one).
    fn special(&mut self) -> Item<'a> {
        let start = self.pos;
        let mut found = (Token::End, start);
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special(ch) {
                self.pos -= 1;
                break;
            }
            match keyword(&self.text[start..self.pos]) {
                Some(token) => found = (token, self.pos),
                None => {
                    self.pos -= 1;
                    break;
                }
            }
        }
        Item {
            token: found.0,
            literal: &self.text[start..found.1],
        }
    }

    /// An identifier, or the keyword `in` or `notin`.
    fn word(&mut self) -> Item<'a> {
        let start = self.pos;
        let mut end = self.pos;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.pos -= 1;
                break;
            }
            end = self.pos;
        }
        let literal = &self.text[start..end];
        let token = keyword(literal).unwrap_or(Token::Identifier);
        Item { token, literal }
    }
}

/// Every token up to and including the end.
pub(super) fn scan(text: &str) -> Vec<Item<'_>> {
    let mut lexer = Lexer { text, pos: 0 };
    let mut items = Vec::new();
    loop {
        let item = lexer.lex();
        items.push(item);
        if item.token == Token::End {
            return items;
        }
    }
}
