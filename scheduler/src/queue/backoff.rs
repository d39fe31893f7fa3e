//! Queue timing defaults (upstream kube-scheduler values) and the backoff rule.
//!
//! After `n` failed attempts a pod waits `b = min(initial · 2^(n-1), max)`
//! plus a jitter drawn uniformly from `[0, jitter · b)`: with the defaults
//! (1 s, 10 s, 0.1) the waits are 1–1.1 s, 2–2.2 s, 4–4.4 s, 8–8.8 s, then
//! 10–11 s for every later failure. Upstream has no jitter (exactly `b`);
//! a `jitter` of 0 gives upstream's waits.

use std::time::Duration;

/// First backoff after a failed attempt (`podInitialBackoffSeconds`: 1 s).
pub const DEFAULT_POD_INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Backoff ceiling (`podMaxBackoffSeconds`: 10 s).
pub const DEFAULT_POD_MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A pod parked as unschedulable is retried at the latest after this long
/// (`DefaultPodMaxInUnschedulablePodsDuration`: 5 min).
pub const DEFAULT_MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(300);
/// Jitter added to every backoff, as a fraction of it: a uniform draw in
/// `[0, 0.1)`, so a 4 s backoff lasts 4.0–4.4 s. It spreads retries of pods
/// that failed together (e.g. all losing one conflict) so they do not storm
/// back in the same instant. Upstream adds none; this is ours.
pub const DEFAULT_BACKOFF_JITTER: f64 = 0.1;

/// First retry delay after a bind conflict (the arbiter gave the room to
/// another worker's pod): 10 ms, doubling with each further conflict in a
/// row up to the backoff ceiling. A conflict is not the pod's failure, only
/// a stale cache: by then the winner's Binding has reached this worker and
/// the retry sees it. Ours (upstream has a single scheduler, no conflicts;
/// its bind failures take the normal backoff).
pub const DEFAULT_CONFLICT_BACKOFF: Duration = Duration::from_millis(10);

/// Backoff settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// After the first failure. Defaults to 1 s.
    pub initial: Duration,
    /// Ceiling before jitter. Defaults to 10 s; must be ≥ `initial`.
    pub max: Duration,
    /// Jitter fraction in `[0, 1)`; 0 disables it. Defaults to 0.1.
    pub jitter: f64,
    /// After a first bind conflict in a row ([`DEFAULT_CONFLICT_BACKOFF`]).
    pub conflict: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: DEFAULT_POD_INITIAL_BACKOFF,
            max: DEFAULT_POD_MAX_BACKOFF,
            jitter: DEFAULT_BACKOFF_JITTER,
            conflict: DEFAULT_CONFLICT_BACKOFF,
        }
    }
}

impl BackoffConfig {
    /// Backoff before jitter after `attempts` failed attempts (≥ 1):
    /// `initial · 2^(attempts-1)`, capped at `max`. 0 attempts means none.
    #[must_use]
    pub fn base(&self, attempts: u32) -> Duration {
        if attempts == 0 {
            return Duration::ZERO;
        }
        let shift = (attempts - 1).min(31);
        self.initial
            .checked_mul(1u32 << shift)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// Delay before jitter after `conflicts` bind conflicts in a row (≥ 1):
    /// `conflict · 2^(conflicts-1)`, capped at `max`.
    #[must_use]
    pub fn conflict_base(&self, conflicts: u32) -> Duration {
        if conflicts == 0 {
            return Duration::ZERO;
        }
        let shift = (conflicts - 1).min(31);
        self.conflict
            .checked_mul(1u32 << shift)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// Backoff with jitter; `unit` is a uniform draw in `[0, 1)`.
    #[must_use]
    pub fn with_jitter(&self, attempts: u32, unit: f64) -> Duration {
        let base = self.base(attempts);
        base + base.mul_f64(self.jitter * unit.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_retry_from_ten_milliseconds_doubling_to_the_ceiling() {
        let b = BackoffConfig::default();
        let ms: Vec<u128> = (1..=12).map(|n| b.conflict_base(n).as_millis()).collect();
        assert_eq!(
            ms,
            [
                10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10_000, 10_000
            ]
        );
        assert_eq!(b.conflict_base(0), Duration::ZERO);
        assert_eq!(b.conflict_base(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn doubles_from_one_second_to_ten() {
        let b = BackoffConfig::default();
        let secs: Vec<u64> = (1..=6).map(|a| b.base(a).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10]);
        assert_eq!(b.base(0), Duration::ZERO);
        assert_eq!(b.base(500), Duration::from_secs(10), "no overflow");
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let b = BackoffConfig::default();
        assert_eq!(b.with_jitter(3, 0.0), Duration::from_secs(4));
        let hi = b.with_jitter(3, 0.999_999);
        assert!(hi > Duration::from_millis(4399) && hi < Duration::from_millis(4400));
    }
}
