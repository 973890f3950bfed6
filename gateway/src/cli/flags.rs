//! The flags `apiagg serve` was started with, as `/flagz` lists them (k8s.io/apiserver's
//! `pkg/server/flagz/flagreader.go`): every flag by its long name with its value, defaults
//! included (empty when unset), sorted by name. No flag of apiagg takes a secret itself (tokens,
//! keys and passwords live in the files flags name), so none is classified by name; a value
//! that carries credentials in a URL's user-info (`--etcd-servers=https://user:pw@etcd:2379`)
//! is shown as `CLASSIFIED`, upstream's word for a classified flag.

use std::collections::BTreeMap;

/// What a classified value is shown as.
const CLASSIFIED: &str = "CLASSIFIED";

/// The flags of `command` (the `serve` subcommand) and their values in `matches`.
pub fn of(command: &clap::Command, matches: &clap::ArgMatches) -> Vec<(String, String)> {
    let mut flags = BTreeMap::new();
    for arg in command.get_arguments() {
        let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else {
            continue;
        };
        if matches!(id, "help" | "version") {
            continue;
        }
        let values: Vec<String> = match matches.try_get_raw(id) {
            Ok(Some(raw)) => raw.map(|v| v.to_string_lossy().into_owned()).collect(),
            _ => Vec::new(),
        };
        let value = values.join(",");
        let value = if carries_credentials(&value) {
            CLASSIFIED.to_string()
        } else {
            value
        };
        flags.insert(long.to_string(), value);
    }
    flags.into_iter().collect()
}

/// Whether a value (or one of its comma-separated parts) is a URL with user-info.
fn carries_credentials(value: &str) -> bool {
    value.split(',').any(|part| {
        part.split_once("://").is_some_and(|(_, rest)| {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            authority.contains('@')
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_credentials_are_classified() {
        assert!(carries_credentials("https://u:p@etcd:2379"));
        assert!(carries_credentials("https://a:2379,http://u@b:2379"));
        assert!(!carries_credentials("https://etcd:2379/path@x"));
        assert!(!carries_credentials("/etc/apiagg/config.yaml"));
        assert!(!carries_credentials(""));
    }
}
