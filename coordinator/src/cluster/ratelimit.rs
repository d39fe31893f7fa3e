//! A client-side token bucket for API writes, with the meaning of
//! client-go's `flowcontrol.NewTokenBucketRateLimiter(qps, burst)` (what
//! kube-scheduler's `--kube-api-qps` / `--kube-api-burst` configure): the
//! bucket holds at most `burst` tokens, refills at `qps` per second, and
//! each request takes one, waiting for it when the bucket is empty.
//!
//! Waiters reserve their token at once (the count may go negative) and
//! sleep until it is theirs, so they are served in arrival order, as
//! `golang.org/x/time/rate`'s `Wait` that client-go uses.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A rate: `qps` requests per second on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Tokens added per second (> 0).
    pub qps: f64,
    /// Bucket size (≥ 1).
    pub burst: u32,
}

/// The bucket. Share it by reference or `Arc`.
#[derive(Debug)]
pub struct TokenBucket {
    limit: RateLimit,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Tokens available at `at`; negative when waiters hold reservations.
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket. `qps` below 0.001 is taken as 0.001, `burst` 0 as 1.
    #[must_use]
    pub fn new(limit: RateLimit) -> Self {
        let limit = RateLimit {
            qps: limit.qps.max(0.001),
            burst: limit.burst.max(1),
        };
        TokenBucket {
            state: Mutex::new(State {
                tokens: f64::from(limit.burst),
                at: Instant::now(),
            }),
            limit,
        }
    }

    /// The rate, after clamping.
    #[must_use]
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Takes one token; the wait before it may be used (zero when one was
    /// in the bucket).
    #[must_use]
    pub fn reserve(&self) -> Duration {
        self.reserve_at(Instant::now())
    }

    fn reserve_at(&self, now: Instant) -> Duration {
        let mut s = self.state.lock();
        let elapsed = now.saturating_duration_since(s.at).as_secs_f64();
        s.tokens = (s.tokens + elapsed * self.limit.qps).min(f64::from(self.limit.burst));
        s.at = now.max(s.at);
        s.tokens -= 1.0;
        if s.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.tokens / self.limit.qps)
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Waits for a token of `bucket`, if there is one.
pub async fn acquire(bucket: Option<&TokenBucket>) {
    if let Some(b) = bucket {
        b.acquire().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let b = TokenBucket::new(RateLimit {
            qps: 10.0,
            burst: 3,
        });
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(b.reserve_at(t0), Duration::ZERO);
        }
        // The fourth and fifth wait 100 ms and 200 ms.
        let w4 = b.reserve_at(t0).as_secs_f64();
        let w5 = b.reserve_at(t0).as_secs_f64();
        assert!((w4 - 0.1).abs() < 1e-9, "{w4}");
        assert!((w5 - 0.2).abs() < 1e-9, "{w5}");
        // A second later: the two reservations are paid, 8 tokens accrued,
        // capped at the burst.
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..3 {
            assert_eq!(b.reserve_at(t1), Duration::ZERO);
        }
        assert!(b.reserve_at(t1) > Duration::ZERO);
    }

    #[test]
    fn clamps_bad_settings() {
        let b = TokenBucket::new(RateLimit { qps: 0.0, burst: 0 });
        assert_eq!(b.limit().burst, 1);
        assert!(b.limit().qps > 0.0);
    }
}
