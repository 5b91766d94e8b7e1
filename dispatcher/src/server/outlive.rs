//! A future that finishes even when the request that started it goes away (CONTRACT
//! §10.3: every started hook run finishes, settles its budget and writes its audit row).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::Poll;

/// Why [`finish_detached`] has no value: the future panicked (inline or in its task).
#[derive(Debug, thiserror::Error)]
#[error("the decision task failed: {0}")]
pub struct Failed(String);

/// Runs `fut` to its end whether or not the caller stays to see it.
///
/// It is polled once in the caller's task: a chain that needs no I/O (no hook matched, or
/// every hook answered from memory) is done there, with no task switch. Still pending
/// after that poll, it moves — in the same poll, so nothing can drop it in between — into
/// a task of its own, which the caller awaits; if the caller is dropped (the client hung
/// up), the task runs on. A panic is [`Failed`], never a lost decision.
///
/// This costs a dispatch with no matching hook nothing (a `tokio::spawn` and its
/// cross-thread wake were about 5% of the sequential HTTP path).
pub async fn finish_detached<T, F>(fut: F) -> Result<T, Failed>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let mut fut = Box::pin(fut);
    let first = std::future::poll_fn(|cx| {
        Poll::Ready(catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))))
    })
    .await;
    match first {
        Ok(Poll::Ready(out)) => Ok(out),
        Ok(Poll::Pending) => tokio::spawn(fut).await.map_err(|e| Failed(e.to_string())),
        Err(_) => Err(Failed("panicked".into())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_ready_future_answers_in_the_callers_task() {
        let caller = std::thread::current().id();
        let (v, ran_on) = finish_detached(async move { (7, std::thread::current().id()) })
            .await
            .unwrap();
        assert_eq!((v, ran_on), (7, caller));
    }

    #[tokio::test]
    async fn a_pending_future_finishes_after_its_caller_is_dropped() {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let caller = tokio::spawn(finish_detached(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        assert!(!done.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            done.load(Ordering::SeqCst),
            "the detached part ran to its end"
        );
    }

    #[tokio::test]
    async fn a_pending_future_gives_its_value_to_a_caller_that_waits() {
        let v = finish_detached(async {
            tokio::task::yield_now().await;
            42
        })
        .await
        .unwrap();
        assert_eq!(v, 42);
    }

    #[tokio::test]
    async fn a_panic_is_a_failure_inline_or_in_the_task() {
        let inline = finish_detached::<(), _>(async { panic!("boom") }).await;
        assert!(matches!(inline, Err(Failed(_))));
        let later = finish_detached::<(), _>(async {
            tokio::task::yield_now().await;
            panic!("boom")
        })
        .await;
        assert!(matches!(later, Err(Failed(_))));
    }
}
