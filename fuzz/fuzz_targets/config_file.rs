//! The gateway config loader (`Sources::read` + `parse`, i.e. `GatewayConfig::load`) and the
//! registry built from what it accepts.
//!
//! Input: the config file, optionally followed by a NUL byte and the text of an APIService file
//! (multi-document YAML). Both are written to a per-process temporary folder as `apiagg.yaml`
//! and `apiservices/a.yaml`; a config naming `apiServiceFiles: [apiservices/*.yaml]` reads the
//! second. The loader has no in-memory entry point (`Sources` reads from disk).
//!
//! Inputs that could make the loader read outside that folder (`apiServiceFiles` or delegate
//! paths that are absolute or contain `..`) are skipped: fuzzing must not walk the machine.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use apiagg_config::{GatewayConfig, LocalGroupVersion, Registry};
use libfuzzer_sys::fuzz_target;
use serde_yaml_ng::Value;

fn folder() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("apiagg-fuzz-config-")
            .tempdir()
            .expect("temporary folder")
            .keep();
        std::fs::create_dir_all(dir.join("apiservices")).expect("apiservices folder");
        dir
    })
}

/// Whether a string could name something outside the temporary folder.
fn escapes(text: &str) -> bool {
    text.starts_with('/') || text.starts_with('~') || text.contains("..") || text.contains('\\')
}

fn any_escaping_string(value: &Value) -> bool {
    match value {
        Value::String(s) => escapes(s),
        Value::Sequence(items) => items.iter().any(any_escaping_string),
        Value::Mapping(map) => map
            .iter()
            .any(|(k, v)| any_escaping_string(k) || any_escaping_string(v)),
        Value::Tagged(tagged) => any_escaping_string(&tagged.value),
        _ => false,
    }
}

/// Every document of `text` as YAML values; `None` when one does not parse.
fn yaml_documents(text: &str) -> Option<Vec<Value>> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).ok())
        .collect()
}

/// Whether loading `main` (and `file`) stays inside the folder. The loader reads other files only
/// through `apiServiceFiles` and `delegate` (caFile, kubeconfig and the files a kubeconfig names,
/// serviceAccountDir); a kubeconfig can only be one of the two files written here.
fn stays_inside(main: &str, file: &str) -> bool {
    let Ok(config) = serde_yaml_ng::from_str::<Value>(main) else {
        // Not YAML: the loader fails before reading anything else.
        return true;
    };
    let reads_more = config.as_mapping().is_some_and(|m| {
        m.keys().any(|k| {
            k.as_str()
                .is_some_and(|k| k == "apiServiceFiles" || k == "delegate")
        })
    });
    if !reads_more {
        return true;
    }
    let Some(files) = [main, file]
        .iter()
        .map(|t| yaml_documents(t))
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    !files.iter().flatten().any(any_escaping_string)
}

fuzz_target!(|data: &[u8]| {
    let (main, file) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    // Non-UTF-8 text cannot name a path; the loader rejects it before reading anything else.
    let main_text = String::from_utf8_lossy(main);
    let file_text = String::from_utf8_lossy(file);
    if !stays_inside(&main_text, &file_text) {
        return;
    }
    let dir = folder();
    let config_path = dir.join("apiagg.yaml");
    std::fs::write(&config_path, main).expect("write config");
    std::fs::write(dir.join("apiservices/a.yaml"), file).expect("write APIService file");

    if let Ok(config) = GatewayConfig::load(&config_path) {
        let _ = config.api_services.len();
        // As the registry controller does, with a delegate serving core v1 and apps/v1.
        let local = [("", "v1"), ("apps", "v1")].map(|(group, version)| LocalGroupVersion {
            group: group.into(),
            version: version.into(),
        });
        let _ = Registry::build(&config, &[]);
        let _ = Registry::build(&config, &local);
    }
});
