//! Waiting for a condition, not for a time: poll until the check returns
//! `Some`, or fail with what was last seen.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` every 200 ms until it returns `Some(value)` or `timeout`
/// passes; then panics with `what` and the last `Err` description.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    wait_for_or(what, timeout, check, String::new).await
}

/// [`wait_for`], whose panic also carries what `more` says then (the
/// operators' last log lines, say: what a CI log keeps of a failure).
pub async fn wait_for_or<T, F, Fut>(what: &str, timeout: Duration, mut check: F, more: impl FnOnce() -> String) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    let mut last = String::from("never checked");
    while started.elapsed() < timeout {
        match check().await {
            Ok(value) => return value,
            Err(seen) => last = seen,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}{}", more());
}
