//! The jittered backoff between attempts of a revision that lost a lock
//! race (`retryMinSeconds` to `retryMaxSeconds`,
//! defaults 3 and 15).
//!
//! Attempt `n` (1-based, the attempt that just failed) waits a uniformly
//! random time in `[min, cap(n)]`, where `cap(n) = min(max, min × 2^n)`
//! — growing like an exponential backoff, jittered so that two runners (or
//! a runner and the application's own retries) do not collide again in
//! step. Every wait is within `[min, max]`.

use std::time::Duration;

use rand::Rng;

/// The wait after failed attempt `attempt` (1-based), within `[min, max]`
/// (`min ≤ max`; a `min` above `max` is treated as `max`).
pub fn backoff(attempt: u32, min: Duration, max: Duration, rng: &mut impl Rng) -> Duration {
    let min = min.min(max);
    let factor = 1u32 << attempt.min(16);
    let cap = min.saturating_mul(factor).clamp(min, max);
    if cap <= min {
        return min;
    }
    let span = cap.saturating_sub(min).as_millis() as u64;
    min + Duration::from_millis(rng.random_range(0..=span))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    proptest! {
        #[test]
        fn every_wait_is_within_the_bounds(attempt in 0u32..100, min in 0u64..60, extra in 0u64..60, seed: u64) {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let (min, max) = (Duration::from_secs(min), Duration::from_secs(min + extra));
            let d = backoff(attempt, min, max, &mut rng);
            prop_assert!(d >= min && d <= max, "{d:?} outside [{min:?}, {max:?}]");
        }
    }

    #[test]
    fn waits_grow_and_are_jittered() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (min, max) = (Duration::from_secs(3), Duration::from_secs(15));
        let first: Vec<Duration> = (0..50).map(|_| backoff(1, min, max, &mut rng)).collect();
        assert!(first.iter().all(|d| *d <= Duration::from_secs(6)), "the first wait is in [min, 2 min]");
        let late: Vec<Duration> = (0..50).map(|_| backoff(10, min, max, &mut rng)).collect();
        assert!(late.iter().any(|d| *d > Duration::from_secs(9)), "late waits reach towards the maximum");
        let distinct: std::collections::BTreeSet<_> = late.iter().collect();
        assert!(distinct.len() > 10, "jittered, not constant");
        assert_eq!(backoff(5, Duration::from_secs(4), Duration::from_secs(4), &mut rng), Duration::from_secs(4));
    }
}
