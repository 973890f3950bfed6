//! Process settings made at start, for many long-lived connections.
//!
//! - Open files: every open watch holds a client socket (and, over HTTP/1.1, a backend socket),
//!   so the usual soft limit of 1,024 would cap apiagg at a few hundred watches although the
//!   hard limit allows far more. The soft limit is raised to the hard limit.
//! - Transparent huge pages are turned off for the process: with them, one touched byte makes a
//!   whole 2 MiB region of the allocator resident, and each open watch, whose buffers are mostly
//!   untouched, cost about 245 KiB of RSS instead of 64 KiB (measured with 1,000 watches by
//!   `tests/bench/watch-scale.sh`; `AnonHugePages` in smaps was nearly all of the RSS).

use nix::sys::prctl;
use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};

impl Raised {
    /// The open-file limit the process now runs with.
    pub fn limit(self) -> u64 {
        match self {
            Raised::To(_, limit) | Raised::Already(limit) => limit,
        }
    }
}

/// What [`raise_open_files`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raised {
    /// The soft limit went from the first value to the second (the hard limit).
    To(u64, u64),
    /// The soft limit already was the hard limit.
    Already(u64),
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs one line saying from what to
/// what. A failure is logged and otherwise ignored: apiagg runs with the limit it was given.
pub fn raise_open_files() -> Option<Raised> {
    let raised = (|| {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
        if soft == hard {
            return Ok(Raised::Already(soft));
        }
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
        Ok::<_, nix::Error>(Raised::To(soft, hard))
    })();
    match raised {
        Ok(Raised::To(from, to)) => {
            tracing::info!(
                "open file limit raised from {} to {} (the hard limit)",
                shown(from),
                shown(to)
            );
            Some(Raised::To(from, to))
        }
        Ok(Raised::Already(n)) => {
            tracing::info!("open file limit is {} (the hard limit)", shown(n));
            Some(Raised::Already(n))
        }
        Err(e) => {
            tracing::warn!("cannot raise the open file limit: {e}");
            None
        }
    }
}

fn shown(n: u64) -> String {
    if n == RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        n.to_string()
    }
}

/// Turns transparent huge pages off for this process (`PR_SET_THP_DISABLE`), whatever the
/// system setting; a failure (an old kernel) is logged at debug level and ignored.
pub fn disable_huge_pages() {
    if let Err(e) = prctl::set_thp_disable(true) {
        tracing::debug!("cannot turn transparent huge pages off: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_limit_ends_at_the_hard_limit() {
        let raised = raise_open_files();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        assert!(raised.is_some());
        assert_eq!(soft, hard);
    }

    #[test]
    fn huge_pages_end_off() {
        disable_huge_pages();
        assert_eq!(prctl::get_thp_disable().ok(), Some(true));
    }
}
