//! apiagg's own resource exhaustion (`EMFILE`, `ENFILE`, `ENOMEM`, `ENOBUFS`) when it connects
//! somewhere: a failure of this process, never of the backend it was connecting to, so it never
//! ejects an endpoint or marks an APIService unavailable.

/// What apiagg ran out of, when `error` (or anything in its `source()` chain) is an operating
/// system error saying the process itself is out of resources.
pub fn own_exhaustion(error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(why) = io.raw_os_error().and_then(exhausted) {
                return Some(why);
            }
        }
        next = e.source();
    }
    None
}

fn exhausted(errno: i32) -> Option<&'static str> {
    match errno {
        24 => Some("open files (EMFILE: the process's open-file limit)"),
        23 => Some("open files (ENFILE: the system's open-file limit)"),
        12 => Some("memory (ENOMEM)"),
        105 => Some("socket buffer space (ENOBUFS)"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connecting failed")]
    struct Wrapper(#[source] std::io::Error);

    #[test]
    fn only_the_process_own_limits_count() {
        let emfile = Wrapper(std::io::Error::from_raw_os_error(24));
        assert!(own_exhaustion(&emfile).is_some_and(|w| w.contains("EMFILE")));
        let refused = Wrapper(std::io::Error::from_raw_os_error(111));
        assert_eq!(own_exhaustion(&refused), None);
        let plain = std::io::Error::other("no");
        assert_eq!(own_exhaustion(&plain), None);
    }
}
