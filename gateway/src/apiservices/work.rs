//! Where patches and applies are computed: off the async workers, on [`THREADS`] threads of their
//! own (started on first use, reused, so their memory is too), queued in a bounded line, each
//! within a time budget.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;

/// Threads computing patches and applies (each may hold a few times the body limit in memory).
const THREADS: usize = 2;
/// Jobs waiting for a thread; beyond, a write is refused at once.
const QUEUE: usize = 64;

type Job = Box<dyn FnOnce() + Send>;

/// Why a job did not produce its result.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// The line of waiting jobs is full (retryable, after a moment).
    #[error("too many patches are being computed, please try again")]
    Busy,
    /// The job did not finish within its budget (retryable as is, but likely to fail again).
    #[error("the patch did not complete within its budget of {}s", .0.as_secs())]
    Timeout(Duration),
    /// The job panicked or the threads are gone (a bug; not retryable).
    #[error("the patch failed")]
    Lost,
}

fn line() -> &'static SyncSender<Job> {
    static LINE: OnceLock<SyncSender<Job>> = OnceLock::new();
    LINE.get_or_init(|| {
        let (sender, receiver) = sync_channel::<Job>(QUEUE);
        let receiver = Arc::new(Mutex::new(receiver));
        for i in 0..THREADS {
            let receiver = receiver.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("apiagg-patch-{i}"))
                .spawn(move || serve(&receiver));
            if let Err(e) = spawned {
                tracing::error!("cannot start a patch thread: {e}");
            }
        }
        sender
    })
}

fn serve(receiver: &Mutex<Receiver<Job>>) {
    loop {
        let next = receiver.lock().unwrap_or_else(|e| e.into_inner()).recv();
        match next {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// Runs `work` on the patch threads and waits at most `budget` for its result (waiting in line
/// included). A job whose caller stopped waiting is skipped when its turn comes.
pub async fn run<T: Send + 'static>(
    budget: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, WorkError> {
    let (sender, receiver) = oneshot::channel();
    let job: Job = Box::new(move || {
        if !sender.is_closed() {
            let _ = sender.send(work());
        }
    });
    match line().try_send(job) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => return Err(WorkError::Busy),
        Err(TrySendError::Disconnected(_)) => return Err(WorkError::Lost),
    }
    match tokio::time::timeout(budget, receiver).await {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(_)) => Err(WorkError::Lost),
        Err(_) => Err(WorkError::Timeout(budget)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_and_slow_ones_time_out() {
        assert_eq!(run(Duration::from_secs(5), || 2 + 2).await.ok(), Some(4));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let slow = run(Duration::from_millis(20), move || wait.recv().is_ok()).await;
        assert!(matches!(slow, Err(WorkError::Timeout(_))), "{slow:?}");
        drop(release);
    }
}
