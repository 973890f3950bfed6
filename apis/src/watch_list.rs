//! apiagg's per-APIService setting for streaming lists (KEP-3157): the annotation
//! `apiagg.io/watch-list` on an APIService says how `sendInitialEvents=true` watches to its
//! backend are served: `detect` (absent: a probe decides), `native` (always passed through) or
//! `emulate` (always served by apiagg: list, annotated BOOKMARK, watch).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::FieldError;

/// The annotation's key.
pub const WATCH_LIST_ANNOTATION: &str = "apiagg.io/watch-list";

/// How an APIService's streaming lists are served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum WatchListMode {
    /// A probe of the backend decides (the default).
    #[default]
    Detect,
    /// Passed through: the backend honours them.
    Native,
    /// Served by apiagg whatever the backend does.
    Emulate,
}

impl WatchListMode {
    /// The values the annotation takes.
    pub const VALUES: [&'static str; 3] = ["detect", "emulate", "native"];

    /// The mode an object's annotations set; `Err` names a value the annotation cannot take
    /// (a field error as apimachinery writes `Unsupported value`).
    pub fn of(meta: &ObjectMeta) -> Result<WatchListMode, FieldError> {
        let Some(value) = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(WATCH_LIST_ANNOTATION))
        else {
            return Ok(WatchListMode::Detect);
        };
        match value.as_str() {
            "detect" => Ok(WatchListMode::Detect),
            "native" => Ok(WatchListMode::Native),
            "emulate" => Ok(WatchListMode::Emulate),
            other => {
                let supported: Vec<String> =
                    Self::VALUES.iter().map(|v| format!("{v:?}")).collect();
                Err(FieldError {
                    field: format!("metadata.annotations[{WATCH_LIST_ANNOTATION}]"),
                    kind: format!("Unsupported value: {other:?}"),
                    detail: format!("supported values: {}", supported.join(", ")),
                })
            }
        }
    }

    /// The annotation's value for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            WatchListMode::Detect => "detect",
            WatchListMode::Native => "native",
            WatchListMode::Emulate => "emulate",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(value: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            annotations: value.map(|v| [(WATCH_LIST_ANNOTATION.to_string(), v.to_string())].into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_annotation_sets_the_mode_and_detection_is_the_default() {
        assert_eq!(WatchListMode::of(&meta(None)), Ok(WatchListMode::Detect));
        for mode in [
            WatchListMode::Detect,
            WatchListMode::Native,
            WatchListMode::Emulate,
        ] {
            assert_eq!(WatchListMode::of(&meta(Some(mode.as_str()))), Ok(mode));
        }
    }

    #[test]
    fn other_values_are_refused_naming_the_annotation() {
        let error = WatchListMode::of(&meta(Some("Native"))).expect_err("refused");
        assert_eq!(
            error.to_string(),
            "metadata.annotations[apiagg.io/watch-list]: Unsupported value: \"Native\": \
             supported values: \"detect\", \"emulate\", \"native\""
        );
    }
}
