//! How far a worker may run ahead of the cluster: the number of its
//! placements proposed but not yet confirmed, adapted to the conflicts the
//! bind arbiter reports, as TCP adapts its congestion window to losses
//! (additive increase, multiplicative decrease).
//!
//! A placement the cluster has not confirmed is invisible to the other
//! workers: the more of them a worker keeps in flight, the staler the
//! others' views and the likelier two workers claim the same room. With no
//! limit, fast scheduling threads also starve their own watch streams of
//! CPU on a small machine, so every view falls seconds behind: measured on
//! openb with 4 workers on 2 cores, 45-54 % of proposals conflicted, and
//! each conflicting pod conflicted again and again. A fixed limit of 32-64
//! brought that to 1-3 %, but throttled work that never conflicts (a lone
//! worker, or pods that all fit anywhere) to half its speed. The window
//! gets both, as TCP does: it starts at [`INITIAL`] and each confirmed
//! placement widens it by one (slow start: it doubles every window's worth
//! of confirmations) until the first cut; a conflict halves it (at most
//! once per [`CUT_INTERVAL`], so one burst of conflicts counts once); after
//! the first cut it widens by one per window's worth of confirmations
//! (congestion avoidance), between [`MIN`] and [`MAX`]. A near miss (the
//! arbiter bound the pod to one of its alternatives because the room on
//! its first choice was taken) is a cut too, as ECN marks congestion before
//! a loss. With a floor of 32 rather than 8 the same openb runs bound
//! 1.5-2x faster for about 1 % more conflicts. Growing by one per
//! confirmation for good, as this window first did, doubled it every round
//! trip after every cut: on openb with 4 workers (and bind alternatives),
//! 1.4-5.5 % of proposals conflicted; growing linearly after the first cut,
//! and cutting on near misses, 0.1-0.5 %, at the same pods/s. A lone
//! worker, or work that never conflicts, never leaves slow start.
//!
//! The scheduling thread waits for room before each cycle
//! ([`crate::cache::NodeCache::wait_for_room`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The smallest window: a worker always keeps this many placements in
/// flight.
pub const MIN: usize = 32;
/// The window a session starts with.
pub const INITIAL: usize = 64;
/// The largest window (far more than a lone worker keeps in flight at
/// tens of thousands of pods per second).
pub const MAX: usize = 4096;
/// Conflicts closer together than this halve the window once.
pub const CUT_INTERVAL: Duration = Duration::from_millis(20);

/// One worker session's window. Shared by the scheduling thread (reads)
/// and the binding answers (updates).
#[derive(Debug)]
pub struct ProposalWindow {
    size: AtomicUsize,
    last_cut: Mutex<Option<Instant>>,
    /// Confirmations counted toward the next +1 after the first cut.
    credit: AtomicUsize,
    /// Whether the window was ever cut: slow start is over.
    cut_once: AtomicBool,
}

impl Default for ProposalWindow {
    fn default() -> Self {
        ProposalWindow {
            size: AtomicUsize::new(INITIAL),
            last_cut: Mutex::new(None),
            credit: AtomicUsize::new(0),
            cut_once: AtomicBool::new(false),
        }
    }
}

impl ProposalWindow {
    /// Placements the worker may keep unconfirmed now.
    #[must_use]
    pub fn size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// A proposal was bound: one more placement may be in flight (in slow
    /// start), or one more per window's worth of them (after a cut).
    pub fn on_bound(&self) {
        if self.cut_once.load(Ordering::Relaxed) {
            let credit = self.credit.fetch_add(1, Ordering::Relaxed) + 1;
            if credit < self.size() {
                return;
            }
            self.credit.store(0, Ordering::Relaxed);
        }
        let _ = self
            .size
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                (s < MAX).then_some(s + 1)
            });
    }

    /// A proposal conflicted at `now`, or was bound to one of its
    /// alternatives (a near miss): the window halves, unless it was already
    /// cut less than [`CUT_INTERVAL`] ago; slow start ends.
    pub fn on_conflict(&self, now: Instant) {
        let mut last = self.last_cut.lock();
        if last.is_some_and(|t| now.saturating_duration_since(t) < CUT_INTERVAL) {
            return;
        }
        *last = Some(now);
        self.cut_once.store(true, Ordering::Relaxed);
        let _ = self
            .size
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some((s / 2).max(MIN))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_widens_by_one_up_to_the_max() {
        let w = ProposalWindow::default();
        assert_eq!(w.size(), INITIAL);
        w.on_bound();
        w.on_bound();
        assert_eq!(w.size(), INITIAL + 2);
        for _ in 0..2 * MAX {
            w.on_bound();
        }
        assert_eq!(w.size(), MAX);
    }

    #[test]
    fn a_burst_of_conflicts_halves_once_and_later_ones_again_down_to_the_min() {
        let w = ProposalWindow::default();
        for _ in 0..4 * MIN - INITIAL {
            w.on_bound();
        }
        assert_eq!(w.size(), 4 * MIN);
        let t0 = Instant::now();
        w.on_conflict(t0);
        w.on_conflict(t0 + Duration::from_millis(1));
        w.on_conflict(t0 + CUT_INTERVAL - Duration::from_millis(1));
        assert_eq!(w.size(), 2 * MIN, "one burst, one cut");
        w.on_conflict(t0 + CUT_INTERVAL);
        assert_eq!(w.size(), MIN);
        w.on_conflict(t0 + 2 * CUT_INTERVAL);
        assert_eq!(w.size(), MIN, "never below the minimum");
        // After a cut it grows by one per window's worth of confirmations.
        for _ in 0..MIN - 1 {
            w.on_bound();
        }
        assert_eq!(w.size(), MIN, "not yet a window's worth");
        w.on_bound();
        assert_eq!(w.size(), MIN + 1, "and it grows back, linearly");
        for _ in 0..MIN {
            w.on_bound();
        }
        assert_eq!(w.size(), MIN + 1, "the next +1 takes MIN + 1 confirmations");
        w.on_bound();
        assert_eq!(w.size(), MIN + 2);
    }
}
