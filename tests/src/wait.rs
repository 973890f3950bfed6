//! The one way the tests wait for a state: [`wait_until`] looks again and again, a short pause
//! apart, until what it sees is what the test waits for, and fails the test naming both when a
//! limit passes first. (Waiting on a stream or a channel, as reading a process's lines until
//! one matches, is not polling and does not need it.)

use std::future::Future;
use std::time::{Duration, Instant};

/// How long [`wait_until`] waits between two looks. Some looks are not cheap (reading a whole
/// audit log, scraping metrics) and share two cores with apiagg: looking more often slows what
/// is awaited.
pub const POLL_EVERY: Duration = Duration::from_millis(50);

/// Waits for a state: looks (`observe`) every [`POLL_EVERY`] until the value seen satisfies
/// `done`, and returns that value. When `limit` passes first, the test
/// fails naming `what` it waited for (say "the backend to hold 3 requests") and the last value
/// observed. `done` may keep state between looks (say, since when a value has not changed).
pub async fn wait_until<T, F, Fut, D>(what: &str, limit: Duration, observe: F, done: D) -> T
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
    D: FnMut(&T) -> bool,
{
    polling(what, limit, observe, done, tokio::time::sleep).await
}

/// [`wait_until`] for code that must block (no runtime, or a synchronous function called from
/// one): the same loop, its looks and pauses blocking the thread.
pub fn wait_until_blocking<T, F, D>(what: &str, limit: Duration, mut observe: F, done: D) -> T
where
    T: std::fmt::Debug,
    F: FnMut() -> T,
    D: FnMut(&T) -> bool,
{
    use std::task::{Context, Poll, Waker};
    let pause = |every| {
        std::thread::sleep(every);
        std::future::ready(())
    };
    let waiting = polling(what, limit, || std::future::ready(observe()), done, pause);
    // Every future in it is ready at once, so one poll runs the loop to its end.
    match std::pin::pin!(waiting).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(value) => value,
        Poll::Pending => unreachable!("a blocking wait never pends"),
    }
}

/// The loop of [`wait_until`] and [`wait_until_blocking`]: look, stop when done, fail past the
/// limit, else pause.
async fn polling<T, F, Fut, D, P, PFut>(
    what: &str,
    limit: Duration,
    mut observe: F,
    mut done: D,
    mut pause: P,
) -> T
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
    D: FnMut(&T) -> bool,
    P: FnMut(Duration) -> PFut,
    PFut: Future<Output = ()>,
{
    let started = Instant::now();
    loop {
        let seen = observe().await;
        if done(&seen) {
            return seen;
        }
        assert!(
            started.elapsed() < limit,
            "waited {limit:?} for {what}; last observed: {seen:?}"
        );
        pause(POLL_EVERY).await;
    }
}

/// Text a wait observes (a process's log, say), shown as it is, not escaped, when the wait
/// fails.
pub struct Text(pub String);

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\n{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_first_value_that_is_done() {
        let mut looks = 0;
        let observe = || {
            looks += 1;
            std::future::ready(looks)
        };
        let seen = wait_until("the third look", Duration::from_secs(5), observe, |n| {
            *n == 3
        });
        assert_eq!(seen.await, 3);
    }

    #[test]
    #[should_panic(expected = "waited 50ms for what never comes; last observed: 7")]
    fn fails_naming_what_it_waited_for_and_the_last_value_seen() {
        wait_until_blocking(
            "what never comes",
            Duration::from_millis(50),
            || 7,
            |_| false,
        );
    }

    #[test]
    fn text_is_shown_as_it_is() {
        assert_eq!(format!("{:?}", Text("a\nb".into())), "\na\nb");
    }
}
