//! Reading a request body within bounds, so that a client sees the answer
//! to a body that is too large instead of a reset connection.
//!
//! A handler that answers `413` without reading the body makes the
//! connection close with the body unread; the kernel then resets it, and a
//! client that writes its whole body before it reads (Python's `urllib`,
//! many others) fails with a broken pipe and never sees the `413`. Mature
//! servers read and discard the rest up to a bound first (nginx's and
//! Apache's lingering close). [`read`] does the same: past `max` bytes it
//! keeps reading, discarding, until the body ends, [`DRAIN_MAX_BYTES`]
//! more have arrived, or [`DRAIN_TIMEOUT`] has passed, then answers
//! [`BodyError::TooLarge`].

use std::time::Duration;

use axum::body::{Body, Bytes};
use futures::StreamExt;

/// Most bytes read and discarded after a body went over its bound.
pub const DRAIN_MAX_BYTES: u64 = 1024 * 1024;

/// Longest time spent discarding the rest of a body that went over its bound.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a body was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    /// More than the bound (answer `413`).
    TooLarge,
    /// Not sent within the time allowed (answer `408`).
    Timeout,
    /// The connection failed while it was read (answer `400`).
    Failed,
}

/// Reads a body of at most `max` bytes within `within`. `declared` is the
/// request's `Content-Length`, if any: one beyond `max` plus
/// [`DRAIN_MAX_BYTES`] is refused at once, unread (draining it could not
/// end before the bound anyway).
pub async fn read(body: Body, declared: Option<u64>, max: usize, within: Duration) -> Result<Bytes, BodyError> {
    if declared.is_some_and(|n| n > max as u64 + DRAIN_MAX_BYTES) {
        return Err(BodyError::TooLarge);
    }
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut deadline = tokio::time::Instant::now() + within;
    let mut discarded: Option<u64> = declared.filter(|n| *n > max as u64).map(|_| 0);
    if discarded.is_some() {
        deadline = deadline.min(tokio::time::Instant::now() + DRAIN_TIMEOUT);
    }
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        let chunk = match (next, discarded) {
            (Ok(None), None) => return Ok(Bytes::from(buf)),
            (Ok(None | Some(Err(_))) | Err(_), Some(_)) => return Err(BodyError::TooLarge),
            (Err(_), None) => return Err(BodyError::Timeout),
            (Ok(Some(Err(_))), None) => return Err(BodyError::Failed),
            (Ok(Some(Ok(chunk))), _) => chunk,
        };
        match &mut discarded {
            Some(n) => {
                *n += chunk.len() as u64;
                if *n > DRAIN_MAX_BYTES {
                    return Err(BodyError::TooLarge);
                }
            }
            None if buf.len() + chunk.len() <= max => buf.extend_from_slice(&chunk),
            None => {
                discarded = Some(chunk.len() as u64);
                buf = Vec::new();
                deadline = deadline.min(tokio::time::Instant::now() + DRAIN_TIMEOUT);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(chunks: Vec<usize>) -> Body {
        let stream =
            futures::stream::iter(chunks.into_iter().map(|n| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; n]))));
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn within_the_bound_the_body_is_read() {
        let got = read(body(vec![10, 20]), Some(30), 64, Duration::from_secs(1)).await.unwrap();
        assert_eq!(got.len(), 30);
    }

    #[tokio::test]
    async fn over_the_bound_the_rest_is_read_then_refused() {
        // Declared or not, a body over the bound is drained to its end.
        for declared in [Some(70 * 1024), None] {
            let e = read(body(vec![60 * 1024, 10 * 1024]), declared, 64 * 1024, Duration::from_secs(1)).await;
            assert_eq!(e, Err(BodyError::TooLarge), "{declared:?}");
        }
        // Far beyond the drain bound: refused at once, unread.
        let huge = read(body(vec![1]), Some(10 * 1024 * 1024), 64 * 1024, Duration::from_secs(1)).await;
        assert_eq!(huge, Err(BodyError::TooLarge));
    }

    #[tokio::test]
    async fn a_body_that_never_ends_times_out() {
        let pending = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        assert_eq!(read(pending, None, 64, Duration::from_millis(50)).await, Err(BodyError::Timeout));
    }
}
