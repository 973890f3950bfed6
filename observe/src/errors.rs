//! Errors as operators read them: with every cause (reqwest and rustls keep the interesting part
//! in the causes).

/// `e` followed by each of its causes, separated by `: `.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
