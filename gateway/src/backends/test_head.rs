//! A request head read line by line, for the small HTTP/1.1 servers of unit tests.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// A request's target and header fields.
pub(crate) struct Head {
    /// The request line's target.
    pub target: String,
    fields: Vec<(String, String)>,
}

impl Head {
    /// The value of the field `name` (case-insensitive), trimmed.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The next request head on `stream`; `None` when the client closed the connection.
pub(crate) async fn read(
    stream: &mut (impl AsyncBufRead + Unpin),
) -> std::io::Result<Option<Head>> {
    let mut target = None;
    let mut fields = Vec::new();
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if target.is_none() {
            target = Some(line.split(' ').nth(1).unwrap_or_default().to_string());
        } else if let Some((name, value)) = line.split_once(':') {
            fields.push((name.to_string(), value.trim().to_string()));
        }
    }
    Ok(Some(Head {
        target: target.unwrap_or_default(),
        fields,
    }))
}
