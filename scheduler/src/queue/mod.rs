//! The scheduling queue: activeQ, backoffQ and the unschedulable pool
//! (upstream `PriorityQueue`).
//!
//! - **activeQ**: pods ready to be tried, highest `priority` first, then
//!   earliest enqueue time (upstream PrioritySort).
//! - **backoffQ**: pods that failed and wait `initial · 2^(failures-1)`
//!   (capped, plus jitter, see [`backoff`]; bind conflicts lost are not
//!   failures and retry after their own short delay); they leave in expiry
//!   order.
//!   Pods backing off after a fit failure may leave early: when activeQ is
//!   empty, the next pop takes the one whose backoff ends first (upstream's
//!   `SchedulerPopFromBackoffQ`, on by default since 1.33, KEP-5142;
//!   [`QueueConfig::pop_from_backoff`]). Pods backing off after an error, a
//!   bind conflict or a refused preemption (upstream's `podErrorBackoffQ`)
//!   always wait their delay out.
//! - **unschedulable pool**: pods that fit nowhere. They move back (to
//!   backoffQ if still backing off, else activeQ) when a cluster event arrives
//!   that one of the plugins that rejected them registered for, or after
//!   [`backoff::DEFAULT_MAX_IN_UNSCHEDULABLE`] at the latest.
//!
//! - **gated**: pods the `SchedulingGates` PreEnqueue plugin holds back
//!   (`spec.schedulingGates` not empty). Upstream keeps them in the
//!   unschedulable pool marked gated; here they are a location of their own.
//!   A gated pod is tracked but never enters activeQ: neither cluster events
//!   nor the leftover flush move it. Only an update of the pod itself
//!   ([`SchedulingQueue::add`] of the new object) whose gates are all gone
//!   releases it, straight to activeQ (it has never failed, so it owes no
//!   backoff). Gates are honoured only when
//!   [`QueueConfig::honour_scheduling_gates`] is set (the profile enables
//!   `SchedulingGates`, as upstream's default profile does); otherwise gated
//!   pods are scheduled like any other, as upstream does without the plugin.
//!
//! A pod popped for a cycle is "in flight" until the caller reports the
//! outcome. If a relevant event arrived while it was in flight, a failure
//! sends it to backoffQ rather than the unschedulable pool, so the event is
//! not lost (upstream's `moveRequestCycle`).
//!
//! Every method takes `now` explicitly: the queue itself never reads a clock,
//! so tests drive time deterministically.
//!
//! # Locking
//! One mutex guards all three queues; a condvar wakes the scheduling thread
//! blocked in [`SchedulingQueue::pop_blocking`]. No other lock is taken while
//! it is held.

pub mod backoff;

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rand::RngExt as _;

use flotilla_shared::PodInfo;
use flotilla_shared::framework::{ClusterEvent, Status};

use crate::plugins::SchedulingGates;

pub use backoff::BackoffConfig;

/// Queue settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueConfig {
    /// Backoff rule.
    pub backoff: BackoffConfig,
    /// Longest stay in the unschedulable pool. Defaults to 5 min.
    pub max_in_unschedulable: Duration,
    /// Whether pods with `spec.schedulingGates` are held back (the profile
    /// enables the `SchedulingGates` PreEnqueue plugin). Defaults to true,
    /// as upstream's default profile.
    pub honour_scheduling_gates: bool,
    /// Whether an empty activeQ takes the pod whose backoff ends first among
    /// those backing off after a fit failure (rejected by named plugins),
    /// instead of idling until a backoff expires: upstream's
    /// `SchedulerPopFromBackoffQ` feature gate (beta and on by default since
    /// 1.33). A backoff earned by an error, a bind conflict or a refused
    /// preemption is never cut short (upstream's `podErrorBackoffQ`; a
    /// conflict's delay is there for the winner's pod to reach the cache).
    /// Defaults to true. Upstream also rounds backoffs to whole-second
    /// windows ordered by priority; this queue keeps exact, jittered expiry
    /// times and takes the earliest.
    pub pop_from_backoff: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            backoff: BackoffConfig::default(),
            max_in_unschedulable: backoff::DEFAULT_MAX_IN_UNSCHEDULABLE,
            honour_scheduling_gates: true,
            pop_from_backoff: true,
        }
    }
}

/// A pod as the queue tracks it.
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// When it entered the queue for its current stay (PrioritySort tiebreak).
    pub timestamp: Instant,
    /// When it was first added (scheduling latency starts here).
    pub initial_attempt: Instant,
    /// Failed attempts so far (bind conflicts included).
    pub attempts: u32,
    /// Conflicts in a row (bind conflicts, refused preemptions; reset by
    /// any other outcome): the retry delay after the next bind conflict
    /// ([`BackoffConfig::conflict_base`]).
    pub conflicts: u32,
    /// Conflicts lost in all (bind conflicts, refused preemptions): not the
    /// pod's failures, so they do not lengthen its attempt backoff
    /// ([`QueuedPodInfo::failures`]); the delay after a refused preemption
    /// doubles with them.
    pub conflicts_lost: u32,
    /// Plugins that rejected it in its last failed cycle.
    pub unschedulable_plugins: BTreeSet<&'static str>,
}

impl QueuedPodInfo {
    /// Failed attempts that were the pod's own (no fit, an error), the
    /// exponent of its attempt backoff: upstream counts every attempt, and
    /// has no bind conflicts; a conflict only means this worker's cache was
    /// stale, so a pod that lost two before it turned out unschedulable
    /// waits upstream's 1 s, not 4 s.
    #[must_use]
    pub fn failures(&self) -> u32 {
        self.attempts.saturating_sub(self.conflicts_lost)
    }
}

/// Where a queued pod currently is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// activeQ.
    Active,
    /// backoffQ, until the instant.
    Backoff(Instant),
    /// Unschedulable pool, since the instant.
    Unschedulable(Instant),
    /// Popped; a cycle or binding is running for it.
    InFlight,
    /// Held back by scheduling gates until an update removes them all
    /// ([`SchedulingQueue::gating_status`] says why).
    Gated,
}

#[derive(Debug)]
struct Entry {
    info: QueuedPodInfo,
    loc: Location,
    /// Set whenever the pod moves, from the queue-wide sequence (so a pod
    /// deleted and added again never matches a heap entry of its earlier
    /// stay); stale heap entries are skipped.
    version: u64,
    /// Value of `move_request_cycle` when popped.
    popped_at_cycle: u64,
    /// End of the backoff earned by the last failure (jitter included).
    backoff_expiry: Option<Instant>,
    /// Whether that failure was an error, a bind conflict or a refused
    /// preemption (not a fit failure named by plugins): its backoff is never
    /// cut short ([`QueueConfig::pop_from_backoff`]).
    error_backoff: bool,
}

#[derive(Debug, PartialEq, Eq)]
struct ActiveKey {
    priority: i32,
    timestamp: Instant,
    seq: u64,
    uid: Arc<str>,
    version: u64,
}

impl Ord for ActiveKey {
    fn cmp(&self, o: &Self) -> Ordering {
        // BinaryHeap is a max-heap: higher priority first, then earlier time.
        self.priority
            .cmp(&o.priority)
            .then_with(|| o.timestamp.cmp(&self.timestamp))
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

impl PartialOrd for ActiveKey {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// backoffQ entry: (expiry, sequence, uid, pod version); min-heap by expiry.
type BackoffKey = Reverse<(Instant, u64, Arc<str>, u64)>;

#[derive(Debug, Default)]
struct Inner {
    /// foldhash: a fast rehash as the map grows (it runs under the lock).
    pods: foldhash::HashMap<Arc<str>, Entry>,
    active: BinaryHeap<ActiveKey>,
    /// Backing off after a fit failure: may leave early when activeQ is
    /// empty (upstream's `podBackoffQ`).
    backoff: BinaryHeap<BackoffKey>,
    /// Backing off after an error, a bind conflict or a refused preemption:
    /// only on expiry (upstream's `podErrorBackoffQ`).
    error_backoff: BinaryHeap<BackoffKey>,
    unschedulable: HashSet<Arc<str>>,
    seq: u64,
    /// Counts relevant cluster events (for pods in flight).
    move_request_cycle: u64,
    /// Per event, the `move_request_cycle` of its last occurrence: a pod
    /// that fails is sent to backoff instead of the pool only if an event
    /// that can help *its* rejecting plugins happened during its cycle
    /// (upstream's in-flight events checked with queueing hints).
    last_event_cycle: HashMap<ClusterEvent, u64>,
    /// Queued members of each `scheduling.k8s.io` gang: the gang is rejected,
    /// parked and woken as a unit (upstream's pod group cycle).
    gangs: HashMap<String, HashSet<Arc<str>>>,
    closed: bool,
}

/// The `scheduling.k8s.io` gang `pod` belongs to, if any.
fn workload_gang(pod: &PodInfo) -> Option<String> {
    flotilla_shared::gang::gang_of(pod).filter(|g| flotilla_shared::gang::is_workload_key(g))
}

/// Sizes of the three queues (for metrics and reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLengths {
    /// activeQ.
    pub active: usize,
    /// backoffQ.
    pub backoff: usize,
    /// Unschedulable pool.
    pub unschedulable: usize,
    /// Popped and not yet resolved.
    pub in_flight: usize,
    /// Held back by scheduling gates (upstream's `gated` pending pods).
    pub gated: usize,
}

/// The scheduling queue. Share it as `Arc<SchedulingQueue>`.
#[derive(Debug)]
pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    wake: Condvar,
    cfg: QueueConfig,
    /// Plugin names interested in each event.
    interest: HashMap<ClusterEvent, HashSet<&'static str>>,
}

impl SchedulingQueue {
    /// A queue; `interest` maps each cluster event to the plugins that
    /// registered for it (see `Plugin::events_to_register`).
    #[must_use]
    pub fn new(cfg: QueueConfig, interest: HashMap<ClusterEvent, HashSet<&'static str>>) -> Self {
        SchedulingQueue {
            inner: Mutex::new(Inner::default()),
            wake: Condvar::new(),
            cfg,
            interest,
        }
    }

    fn push_active(inner: &mut Inner, uid: &Arc<str>) {
        inner.seq += 1;
        let seq = inner.seq;
        let Some(e) = inner.pods.get_mut(uid) else {
            return;
        };
        e.version = seq;
        e.loc = Location::Active;
        let key = ActiveKey {
            priority: e.info.pod.priority,
            timestamp: e.info.timestamp,
            seq,
            uid: uid.clone(),
            version: e.version,
        };
        inner.active.push(key);
    }

    fn push_backoff(inner: &mut Inner, uid: &Arc<str>, until: Instant) {
        inner.seq += 1;
        let seq = inner.seq;
        let Some(e) = inner.pods.get_mut(uid) else {
            return;
        };
        e.version = seq;
        e.loc = Location::Backoff(until);
        let key = Reverse((until, seq, uid.clone(), e.version));
        if e.error_backoff {
            inner.error_backoff.push(key);
        } else {
            inner.backoff.push(key);
        }
    }

    /// The PreEnqueue verdict for `pod`: `Some(status)` when scheduling
    /// gates hold it back (and the queue honours them).
    fn gate(&self, pod: &PodInfo) -> Option<Status> {
        if !self.cfg.honour_scheduling_gates || pod.scheduling_gates.is_empty() {
            return None;
        }
        let st = SchedulingGates.pre_enqueue(pod);
        (!st.is_success()).then_some(st)
    }

    fn set_gated(inner: &mut Inner, uid: &Arc<str>) {
        inner.unschedulable.remove(uid);
        inner.seq += 1;
        let seq = inner.seq;
        if let Some(e) = inner.pods.get_mut(uid) {
            e.version = seq;
            e.loc = Location::Gated;
        }
    }

    /// Adds a new pending pod: to activeQ, or to the gated set when
    /// scheduling gates hold it back. For a pod already queued, replaces its
    /// object (keeping attempts and position) and re-checks its gates: an
    /// update that removed the last gate sends a gated pod to activeQ at once
    /// (keeping its arrival time for PrioritySort, as upstream; its latency
    /// clock, `initial_attempt`, starts then); an update to a pod in
    /// the unschedulable pool moves it back, since the change may make it
    /// fit. A pod in flight only gets the new object (its outcome decides).
    pub fn add(&self, pod: Arc<PodInfo>, now: Instant) {
        let gated = self.gate(&pod).is_some();
        let mut inner = self.inner.lock();
        let uid = pod.uid.clone();
        if let Some(e) = inner.pods.get_mut(&uid) {
            e.info.pod = pod;
            match e.loc {
                Location::Gated if !gated => {
                    if e.info.attempts == 0 {
                        e.info.initial_attempt = now;
                    }
                    Self::requeue_keeping_timestamp(&mut inner, &uid, now);
                    self.wake.notify_one();
                }
                Location::Active | Location::Backoff(_) | Location::Unschedulable(_) if gated => {
                    Self::set_gated(&mut inner, &uid);
                }
                Location::Unschedulable(_) => {
                    inner.unschedulable.remove(&uid);
                    Self::requeue(&mut inner, &uid, now);
                    self.wake.notify_one();
                }
                _ => {}
            }
            return;
        }
        inner.pods.insert(
            uid.clone(),
            Entry {
                info: QueuedPodInfo {
                    pod,
                    timestamp: now,
                    initial_attempt: now,
                    attempts: 0,
                    conflicts: 0,
                    conflicts_lost: 0,
                    unschedulable_plugins: BTreeSet::new(),
                },
                loc: Location::Active,
                version: 0,
                popped_at_cycle: 0,
                backoff_expiry: None,
                error_backoff: false,
            },
        );
        if let Some(g) = workload_gang(&inner.pods[&uid].info.pod) {
            // A new member may complete a parked gang: it is tried again
            // with it (GangScheduling's `Pod/Add` hint).
            let parked: Vec<Arc<str>> = inner
                .gangs
                .get(&g)
                .into_iter()
                .flatten()
                .filter(|u| inner.unschedulable.contains(*u))
                .cloned()
                .collect();
            for u in &parked {
                inner.unschedulable.remove(u);
                Self::requeue(&mut inner, u, now);
            }
            inner.gangs.entry(g).or_default().insert(uid.clone());
        }
        if gated {
            Self::set_gated(&mut inner, &uid);
        } else {
            Self::push_active(&mut inner, &uid);
            self.wake.notify_one();
        }
    }

    /// Why a gated pod is held back: the `SchedulingGates` PreEnqueue status
    /// (`waiting for scheduling gates: [gate-a gate-b]`,
    /// `UnschedulableAndUnresolvable`). `None` when the pod is not gated.
    #[must_use]
    pub fn gating_status(&self, uid: &str) -> Option<Status> {
        let pod = {
            let inner = self.inner.lock();
            let e = inner.pods.get(uid)?;
            if e.loc != Location::Gated {
                return None;
            }
            e.info.pod.clone()
        };
        self.gate(&pod)
    }

    /// Removes a pod wherever it is (deleted, bound by someone else,
    /// re-routed to another worker). Returns whether it was queued.
    pub fn delete(&self, uid: &str) -> bool {
        let mut inner = self.inner.lock();
        inner.unschedulable.remove(uid);
        Self::untrack(&mut inner, uid)
    }

    /// Stops tracking `uid`; whether it was tracked.
    fn untrack(inner: &mut Inner, uid: &str) -> bool {
        let Some(e) = inner.pods.remove(uid) else {
            return false;
        };
        if let Some(g) = workload_gang(&e.info.pod)
            && let Some(m) = inner.gangs.get_mut(&g)
        {
            m.remove(uid);
            if m.is_empty() {
                inner.gangs.remove(&g);
            }
        }
        true
    }

    /// Records the node a preemption nominated for a tracked pod (`None`:
    /// the nomination ended), in place: the pod keeps its position, and its
    /// next cycle tries that node first (upstream's `evaluateNominatedNode`
    /// reads `status.nominatedNodeName` the same way). Returns whether the
    /// pod is tracked.
    pub fn set_nominated_node(&self, uid: &str, node: Option<Arc<str>>) -> bool {
        let mut inner = self.inner.lock();
        let Some(e) = inner.pods.get_mut(uid) else {
            return false;
        };
        if e.info.pod.nominated_node_name != node {
            let mut pod = (*e.info.pod).clone();
            pod.nominated_node_name = node;
            e.info.pod = Arc::new(pod);
        }
        true
    }

    /// Whether the pod is tracked (queued or in flight).
    #[must_use]
    pub fn contains(&self, uid: &str) -> bool {
        self.inner.lock().pods.contains_key(uid)
    }

    /// Where the pod is.
    #[must_use]
    pub fn location(&self, uid: &str) -> Option<Location> {
        self.inner.lock().pods.get(uid).map(|e| e.loc)
    }

    fn flush_backoff(inner: &mut Inner, now: Instant) {
        for errors in [false, true] {
            loop {
                let heap = if errors {
                    &mut inner.error_backoff
                } else {
                    &mut inner.backoff
                };
                let Some(Reverse((until, _, uid, v))) = heap.peek().cloned() else {
                    break;
                };
                if until > now {
                    break;
                }
                heap.pop();
                if Self::is_live_backoff(inner, &uid, v, until) {
                    Self::push_active(inner, &uid);
                }
            }
        }
    }

    /// Whether a backoffQ heap entry is the pod's current stay.
    fn is_live_backoff(inner: &Inner, uid: &str, version: u64, until: Instant) -> bool {
        inner
            .pods
            .get(uid)
            .is_some_and(|e| e.version == version && e.loc == Location::Backoff(until))
    }

    /// With activeQ empty: the pod backing off after a fit failure whose
    /// backoff ends first, taken early ([`QueueConfig::pop_from_backoff`]),
    /// pushed to activeQ for the pop; `false` if there is none.
    fn take_early_backoff(inner: &mut Inner) -> bool {
        while let Some(Reverse((until, _, uid, v))) = inner.backoff.pop() {
            if Self::is_live_backoff(inner, &uid, v, until) {
                Self::push_active(inner, &uid);
                return true;
            }
        }
        false
    }

    /// Pops the next pod to try, moving expired backoffs to activeQ first;
    /// with activeQ empty, a pod backing off after a fit failure leaves
    /// early ([`QueueConfig::pop_from_backoff`]). The pod stays tracked (in
    /// flight) until [`Self::done`], [`Self::add_unschedulable`] or
    /// [`Self::add_backoff`].
    pub fn pop(&self, now: Instant) -> Option<QueuedPodInfo> {
        let mut inner = self.inner.lock();
        self.pop_locked(&mut inner, now)
    }

    fn pop_locked(&self, inner: &mut Inner, now: Instant) -> Option<QueuedPodInfo> {
        Self::flush_backoff(inner, now);
        if let Some(p) = Self::pop_active(inner) {
            return Some(p);
        }
        if self.cfg.pop_from_backoff && Self::take_early_backoff(inner) {
            return Self::pop_active(inner);
        }
        None
    }

    /// The head of activeQ, now in flight (stale heap entries skipped).
    fn pop_active(inner: &mut Inner) -> Option<QueuedPodInfo> {
        while let Some(k) = inner.active.pop() {
            let cycle = inner.move_request_cycle;
            inner.seq += 1;
            let seq = inner.seq;
            if let Some(e) = inner.pods.get_mut(&k.uid)
                && e.version == k.version
                && e.loc == Location::Active
            {
                e.loc = Location::InFlight;
                e.version = seq;
                e.popped_at_cycle = cycle;
                return Some(e.info.clone());
            }
        }
        None
    }

    /// Blocks until a pod is ready, the queue is closed (`None`), or
    /// `max_wait` passes (`None`). Uses the real clock.
    pub fn pop_blocking(&self, max_wait: Duration) -> Option<QueuedPodInfo> {
        let deadline = Instant::now() + max_wait;
        let mut inner = self.inner.lock();
        loop {
            if inner.closed {
                return None;
            }
            let now = Instant::now();
            if let Some(p) = self.pop_locked(&mut inner, now) {
                return Some(p);
            }
            if now >= deadline {
                return None;
            }
            let next_backoff = [&inner.backoff, &inner.error_backoff]
                .into_iter()
                .filter_map(|h| h.peek().map(|Reverse((t, ..))| *t))
                .min();
            let until = next_backoff.map_or(deadline, |t| t.min(deadline));
            self.wake.wait_until(&mut inner, until);
        }
    }

    /// The cycle (and binding) for an in-flight pod succeeded: stop tracking it.
    pub fn done(&self, uid: &str) {
        let mut inner = self.inner.lock();
        if inner
            .pods
            .get(uid)
            .is_some_and(|e| e.loc == Location::InFlight)
        {
            Self::untrack(&mut inner, uid);
        }
    }

    /// A uniform draw in `[0, 1)` for the jitter (0 when it is off).
    fn jitter_unit(&self) -> f64 {
        if self.cfg.backoff.jitter > 0.0 {
            rand::rng().random_range(0.0..1.0)
        } else {
            0.0
        }
    }

    fn backoff_until(&self, attempts: u32, now: Instant) -> Instant {
        now + self.cfg.backoff.with_jitter(attempts, self.jitter_unit())
    }

    /// The end of the delay after the `n`th conflict ([`BackoffConfig::conflict_base`]
    /// plus jitter).
    fn conflict_until(&self, n: u32, now: Instant) -> Instant {
        let base = self.cfg.backoff.conflict_base(n);
        now + base + base.mul_f64(self.cfg.backoff.jitter * self.jitter_unit())
    }

    /// Moves a pod to backoffQ if the backoff earned by its last failure has
    /// not expired yet, else to activeQ; its enqueue time becomes `now`.
    fn requeue(inner: &mut Inner, uid: &Arc<str>, now: Instant) {
        if let Some(e) = inner.pods.get_mut(uid) {
            e.info.timestamp = now;
        }
        Self::requeue_keeping_timestamp(inner, uid, now);
    }

    /// [`Self::requeue`] without touching the enqueue time.
    fn requeue_keeping_timestamp(inner: &mut Inner, uid: &Arc<str>, now: Instant) {
        let Some(e) = inner.pods.get(uid) else {
            return;
        };
        match e.backoff_expiry {
            Some(until) if until > now => Self::push_backoff(inner, uid, until),
            _ => Self::push_active(inner, uid),
        }
    }

    /// The pod fits nowhere. It parks in the unschedulable pool (keyed by the
    /// plugins that rejected it), or goes to backoffQ if a relevant event
    /// arrived during its cycle.
    pub fn add_unschedulable(&self, uid: &str, plugins: BTreeSet<&'static str>, now: Instant) {
        let mut inner = self.inner.lock();
        self.park(&mut inner, uid, plugins, now, None);
    }

    /// A gang rejected as a unit: `uid` (the member that fit nowhere) goes
    /// where [`Self::add_unschedulable`] sends it, and `members` (released
    /// from Permit) go to the same place with the same plugins, so that no
    /// member is placed again, holding room, while the others wait.
    /// Returns the members not tried yet that it parked too (their status
    /// is the gang's).
    pub fn add_unschedulable_group(
        &self,
        uid: &str,
        members: &[Arc<str>],
        plugins: &BTreeSet<&'static str>,
        now: Instant,
    ) -> Vec<Arc<PodInfo>> {
        let mut inner = self.inner.lock();
        let moved = self.park(&mut inner, uid, plugins.clone(), now, None);
        for m in members {
            self.park(&mut inner, m, plugins.clone(), now, moved);
        }
        if moved != Some(false) {
            return Vec::new();
        }
        // Members not tried yet wait with the gang rather than be placed and
        // hold room at Permit while it cannot be complete.
        let Some(g) = inner.pods.get(uid).and_then(|e| workload_gang(&e.info.pod)) else {
            return Vec::new();
        };
        let queued: Vec<Arc<str>> = inner
            .gangs
            .get(&g)
            .into_iter()
            .flatten()
            .filter(|u| {
                inner
                    .pods
                    .get(*u)
                    .is_some_and(|e| matches!(e.loc, Location::Active | Location::Backoff(_)))
            })
            .cloned()
            .collect();
        let mut parked = Vec::with_capacity(queued.len());
        for u in queued {
            inner.seq += 1;
            let seq = inner.seq;
            let e = inner.pods.get_mut(&u).expect("indexed pods are tracked");
            e.version = seq;
            e.loc = Location::Unschedulable(now);
            e.info.unschedulable_plugins = plugins.clone();
            parked.push(e.info.pod.clone());
            inner.unschedulable.insert(u);
        }
        parked
    }

    /// Parks in-flight pod `uid`: in the unschedulable pool, or in backoffQ
    /// when `moved` says so (`None`: when a relevant event arrived during
    /// its cycle). Returns where it went (`Some(true)`: backoffQ), `None`
    /// when it was not in flight or is gated.
    fn park(
        &self,
        inner: &mut Inner,
        uid: &str,
        plugins: BTreeSet<&'static str>,
        now: Instant,
        moved: Option<bool>,
    ) -> Option<bool> {
        let (key, e) = inner.pods.get_key_value(uid)?;
        if e.loc != Location::InFlight {
            return None;
        }
        let key = key.clone();
        if self.gate(&e.info.pod).is_some() {
            // Gated while in flight (an update arrived meanwhile): it waits
            // for its gates, not for a cluster event.
            let e = inner.pods.get_mut(&key).expect("present");
            e.info.attempts += 1;
            e.info.unschedulable_plugins = plugins;
            Self::set_gated(inner, &key);
            return None;
        }
        let popped = e.popped_at_cycle;
        // Only events that could help one of the rejecting plugins count
        // (any event, for a pod no plugin is recorded for).
        let moved_meanwhile = moved.unwrap_or_else(|| {
            inner.last_event_cycle.iter().any(|(ev, &c)| {
                c > popped
                    && (plugins.is_empty()
                        || self
                            .interest
                            .get(ev)
                            .is_some_and(|set| plugins.iter().any(|p| set.contains(p))))
            })
        });
        let until = self.backoff_until(e.info.failures() + 1, now);
        inner.seq += 1;
        let seq = inner.seq;
        let e = inner.pods.get_mut(&key).expect("present");
        e.info.attempts += 1;
        e.info.conflicts = 0;
        // No plugin named: upstream counts it an error (`podErrorBackoffQ`).
        e.error_backoff = plugins.is_empty();
        e.info.unschedulable_plugins = plugins;
        e.backoff_expiry = Some(until);
        if moved_meanwhile {
            Self::push_backoff(inner, &key, until);
            self.wake.notify_one();
        } else {
            e.version = seq;
            e.loc = Location::Unschedulable(now);
            inner.unschedulable.insert(key);
        }
        Some(moved_meanwhile)
    }

    /// The attempt failed for a reason other than fit (an error): back off
    /// and retry.
    pub fn add_backoff(&self, uid: &str, now: Instant) {
        self.retry(uid, now, false);
    }

    /// The arbiter gave the pod's room to another worker's pod (a bind
    /// conflict): retry after the conflict delay, 10 ms doubling with each
    /// conflict in a row ([`BackoffConfig::conflict_base`], plus jitter),
    /// not the attempt backoff: the cache was stale, the pod did nothing
    /// wrong. It still counts as an attempt.
    pub fn add_conflict(&self, uid: &str, now: Instant) {
        self.retry(uid, now, true);
    }

    fn retry(&self, uid: &str, now: Instant, conflict: bool) {
        let mut inner = self.inner.lock();
        let Some((key, e)) = inner.pods.get_key_value(uid) else {
            return;
        };
        if e.loc != Location::InFlight {
            return;
        }
        let key = key.clone();
        let gated = self.gate(&e.info.pod).is_some();
        let until = if conflict {
            self.conflict_until(e.info.conflicts + 1, now)
        } else {
            self.backoff_until(e.info.failures() + 1, now)
        };
        let e = inner.pods.get_mut(&key).expect("present");
        e.info.attempts += 1;
        e.info.conflicts = if conflict { e.info.conflicts + 1 } else { 0 };
        e.info.conflicts_lost += u32::from(conflict);
        e.info.unschedulable_plugins.clear();
        e.backoff_expiry = Some(until);
        e.error_backoff = true;
        if gated {
            Self::set_gated(&mut inner, &key);
            return;
        }
        Self::push_backoff(&mut inner, &key, until);
        self.wake.notify_one();
    }

    /// The coordinator refused the pod's preemption: another worker's
    /// preemption or placement took the victims or the room first, so this
    /// worker's view was stale, as in a bind conflict. The pod, parked
    /// unschedulable (or backing off) since its cycle, retries after the
    /// conflict delay instead of waiting for a cluster event and its attempt
    /// backoff: 10 ms doubling with every conflict the pod lost
    /// ([`BackoffConfig::conflict_base`], plus jitter), and the failed
    /// attempt is counted as a conflict lost, not as the pod's failure.
    /// Returns whether it moved (a pod in flight or already active is left
    /// alone).
    pub fn preemption_refused(&self, uid: &str, now: Instant) -> bool {
        let mut inner = self.inner.lock();
        let Some((key, e)) = inner.pods.get_key_value(uid) else {
            return false;
        };
        if !matches!(e.loc, Location::Unschedulable(_) | Location::Backoff(_)) {
            return false;
        }
        let key = key.clone();
        let until = self.conflict_until(e.info.conflicts_lost + 1, now);
        inner.unschedulable.remove(&key);
        let e = inner.pods.get_mut(&key).expect("present");
        e.info.conflicts += 1;
        e.info.conflicts_lost += 1;
        e.backoff_expiry = Some(until);
        e.error_backoff = true;
        Self::push_backoff(&mut inner, &key, until);
        self.wake.notify_one();
        true
    }

    /// A cluster event: pods in the unschedulable pool that one of the
    /// interested plugins rejected (or that have no recorded plugin) move
    /// back. Gated pods never move on a cluster event (upstream: only the
    /// gating plugin's own event, the pod update removing the gates, can
    /// release them). Returns how many moved.
    pub fn on_event(&self, event: ClusterEvent, now: Instant) -> usize {
        self.move_on_event(event, now, &[], true)
    }

    /// [`SchedulingQueue::on_event`] for the room a gang rejected as a unit
    /// held at Permit: the pods `except`, and every queued member of their
    /// `scheduling.k8s.io` gangs, stay where they are (their own release
    /// cannot help them), and the pods it moves that still owe backoff wait
    /// it out in full (no early pop from backoffQ): two gangs that never
    /// fit, each freeing room the other then tries, retry at the pace of
    /// their backoff, not in a loop.
    pub fn on_event_except(&self, event: ClusterEvent, now: Instant, except: &[Arc<str>]) -> usize {
        self.move_on_event(event, now, except, false)
    }

    fn move_on_event(
        &self,
        event: ClusterEvent,
        now: Instant,
        except: &[Arc<str>],
        early_ok: bool,
    ) -> usize {
        let mut inner = self.inner.lock();
        let except_gangs: HashSet<String> = except
            .iter()
            .filter_map(|u| inner.pods.get(u).and_then(|e| workload_gang(&e.info.pod)))
            .collect();
        let excepted = |inner: &Inner, uid: &Arc<str>| {
            except.contains(uid)
                || (!except_gangs.is_empty()
                    && inner
                        .pods
                        .get(uid)
                        .and_then(|e| workload_gang(&e.info.pod))
                        .is_some_and(|g| except_gangs.contains(&g)))
        };
        let interested = self.interest.get(&event);
        // An event no plugin registered for cannot help a rejected pod: it
        // neither moves pods parked by plugins nor marks the cycle (so a
        // stream of, say, bindings does not send every failure to backoff).
        if interested.is_some() {
            inner.move_request_cycle += 1;
            let c = inner.move_request_cycle;
            inner.last_event_cycle.insert(event, c);
        }
        let movable: Vec<Arc<str>> = inner
            .unschedulable
            .iter()
            .filter(|uid| !excepted(&inner, uid))
            .filter(|uid| {
                inner.pods.get(*uid).is_some_and(|e| {
                    e.info.unschedulable_plugins.is_empty()
                        || interested.is_some_and(|set| {
                            e.info.unschedulable_plugins.iter().any(|p| set.contains(p))
                        })
                })
            })
            .cloned()
            .collect();
        // A gang is woken whole: its members are tried together again.
        let mut movable = movable;
        let mut gangs_woken = HashSet::new();
        for uid in movable.clone() {
            if let Some(g) = inner
                .pods
                .get(&uid)
                .and_then(|e| workload_gang(&e.info.pod))
                && gangs_woken.insert(g.clone())
            {
                movable.extend(
                    inner
                        .gangs
                        .get(&g)
                        .into_iter()
                        .flatten()
                        .filter(|u| {
                            inner.unschedulable.contains(*u)
                                && !excepted(&inner, u)
                                && !movable.contains(*u)
                        })
                        .cloned()
                        .collect::<Vec<_>>(),
                );
            }
        }
        for uid in &movable {
            inner.unschedulable.remove(uid);
            if !early_ok && let Some(e) = inner.pods.get_mut(uid) {
                // Only on expiry (the error backoffQ is never popped early).
                e.error_backoff = true;
            }
            Self::requeue(&mut inner, uid, now);
        }
        if !movable.is_empty() {
            self.wake.notify_one();
        }
        movable.len()
    }

    /// Moves pods that sat in the unschedulable pool longer than
    /// `max_in_unschedulable`. Gated pods stay (upstream re-runs PreEnqueue
    /// on them and they stay gated). Returns how many moved.
    pub fn flush_unschedulable_leftover(&self, now: Instant) -> usize {
        let mut inner = self.inner.lock();
        let max = self.cfg.max_in_unschedulable;
        let stale: Vec<Arc<str>> = inner
            .unschedulable
            .iter()
            .filter(|uid| {
                inner.pods.get(*uid).is_some_and(
                    |e| matches!(e.loc, Location::Unschedulable(t) if now.duration_since(t) >= max),
                )
            })
            .cloned()
            .collect();
        for uid in &stale {
            inner.unschedulable.remove(uid);
            Self::requeue(&mut inner, uid, now);
        }
        if !stale.is_empty() {
            self.wake.notify_one();
        }
        stale.len()
    }

    /// Sizes of the queues.
    #[must_use]
    pub fn lengths(&self) -> QueueLengths {
        let inner = self.inner.lock();
        let mut l = QueueLengths::default();
        for e in inner.pods.values() {
            match e.loc {
                Location::Active => l.active += 1,
                Location::Backoff(_) => l.backoff += 1,
                Location::Unschedulable(_) => l.unschedulable += 1,
                Location::InFlight => l.in_flight += 1,
                Location::Gated => l.gated += 1,
            }
        }
        l
    }

    /// Checks the bookkeeping behind the locations (tests): every pod in
    /// activeQ or backoffQ has exactly one live heap entry, the
    /// unschedulable set holds exactly the pods located there, and no live
    /// heap entry belongs to a pod located elsewhere.
    ///
    /// # Panics
    /// On the first inconsistency, naming the pod.
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        let inner = self.inner.lock();
        let mut live_active: HashMap<&str, usize> = HashMap::new();
        for k in &inner.active {
            if inner
                .pods
                .get(&k.uid)
                .is_some_and(|e| e.version == k.version && e.loc == Location::Active)
            {
                *live_active.entry(&k.uid).or_default() += 1;
            }
        }
        let mut live_backoff: HashMap<&str, usize> = HashMap::new();
        for (errors, heap) in [(false, &inner.backoff), (true, &inner.error_backoff)] {
            for Reverse((until, _, uid, v)) in heap {
                if let Some(e) = inner.pods.get(uid)
                    && e.version == *v
                    && e.loc == Location::Backoff(*until)
                {
                    assert_eq!(e.error_backoff, errors, "{uid}: in the wrong backoffQ");
                    *live_backoff.entry(uid).or_default() += 1;
                }
            }
        }
        for (uid, e) in &inner.pods {
            let want_active = usize::from(e.loc == Location::Active);
            let want_backoff = usize::from(matches!(e.loc, Location::Backoff(_)));
            assert_eq!(
                live_active.get(&**uid).copied().unwrap_or(0),
                want_active,
                "{uid} at {:?}: activeQ entries",
                e.loc
            );
            assert_eq!(
                live_backoff.get(&**uid).copied().unwrap_or(0),
                want_backoff,
                "{uid} at {:?}: backoffQ entries",
                e.loc
            );
            assert_eq!(
                inner.unschedulable.contains(uid),
                matches!(e.loc, Location::Unschedulable(_)),
                "{uid} at {:?}: unschedulable set",
                e.loc
            );
        }
        for uid in &inner.unschedulable {
            assert!(inner.pods.contains_key(uid), "{uid}: untracked in the pool");
        }
    }

    /// Wakes a blocked `pop_blocking` (e.g. after time-based flushes).
    pub fn notify(&self) {
        self.wake.notify_all();
    }

    /// Whether [`Self::close`] was called.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// Closes the queue: `pop_blocking` returns `None` from now on.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::testing::PodBuilder;

    const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
    const NODE_AFFINITY: &str = "NodeAffinity";

    fn queue() -> SchedulingQueue {
        queue_with(true)
    }

    /// [`queue`] with `SchedulerPopFromBackoffQ` on or off.
    fn queue_with(pop_from_backoff: bool) -> SchedulingQueue {
        let interest = HashMap::from([
            (
                ClusterEvent::AssignedPodDeleted,
                HashSet::from([NODE_RESOURCES_FIT]),
            ),
            (
                ClusterEvent::NodeLabelChanged,
                HashSet::from([NODE_AFFINITY]),
            ),
        ]);
        SchedulingQueue::new(
            QueueConfig {
                backoff: BackoffConfig {
                    jitter: 0.0,
                    ..BackoffConfig::default()
                },
                pop_from_backoff,
                ..QueueConfig::default()
            },
            interest,
        )
    }

    fn pod(name: &str, prio: i32) -> Arc<PodInfo> {
        Arc::new(PodBuilder::new(name).priority(prio).build_info())
    }

    fn names(q: &SchedulingQueue, now: Instant) -> Vec<String> {
        std::iter::from_fn(|| q.pop(now).map(|p| p.pod.key.name.to_string())).collect()
    }

    #[test]
    fn active_queue_orders_by_priority_then_arrival() {
        let q = queue();
        let t = Instant::now();
        q.add(pod("low-early", 0), t);
        q.add(pod("high", 100), t + Duration::from_millis(1));
        q.add(pod("low-late", 0), t + Duration::from_millis(2));
        q.add(pod("mid", 50), t + Duration::from_millis(3));
        assert_eq!(names(&q, t), ["high", "mid", "low-early", "low-late"]);
    }

    #[test]
    fn a_refused_preemption_retries_after_the_conflict_delay_not_an_event() {
        let (q, a, t0) = one_popped();
        let ms = Duration::from_millis;
        q.add_unschedulable(&a.pod.uid, BTreeSet::from(["NodeResourcesFit"]), t0);
        assert!(
            q.pop(t0 + Duration::from_secs(5)).is_none(),
            "parked for an event"
        );
        assert!(q.preemption_refused(&a.pod.uid, t0));
        assert!(q.pop(t0 + ms(9)).is_none(), "10 ms after a first refusal");
        let a = q.pop(t0 + ms(10)).unwrap();
        assert_eq!(
            (a.attempts, a.failures()),
            (1, 0),
            "a stale view, not a failure"
        );
        // The next refusal waits twice as long; a pod not parked is left alone.
        let t1 = t0 + ms(10);
        assert!(
            !q.preemption_refused(&a.pod.uid, t1),
            "in flight: left alone"
        );
        q.add_unschedulable(&a.pod.uid, BTreeSet::from(["NodeResourcesFit"]), t1);
        assert!(q.preemption_refused(&a.pod.uid, t1));
        assert!(q.pop(t1 + ms(19)).is_none());
        assert!(q.pop(t1 + ms(20)).is_some());
    }

    /// A queue with pod `a` added and popped (in flight) at the returned time.
    fn one_popped() -> (SchedulingQueue, QueuedPodInfo, Instant) {
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        let a = q.pop(t0).unwrap();
        (q, a, t0)
    }

    #[test]
    fn a_bind_conflict_retries_in_milliseconds_and_an_error_resets_the_streak() {
        let (q, a, t0) = one_popped();
        let ms = Duration::from_millis;
        q.add_conflict(&a.pod.uid, t0);
        assert!(q.pop(t0 + ms(9)).is_none(), "10 ms after a first conflict");
        let a = q.pop(t0 + ms(10)).unwrap();
        assert_eq!((a.attempts, a.conflicts), (1, 1), "an attempt all the same");
        let t1 = t0 + ms(10);
        q.add_conflict(&a.pod.uid, t1);
        assert!(
            q.pop(t1 + ms(19)).is_none(),
            "20 ms after a second in a row"
        );
        let a = q.pop(t1 + ms(20)).unwrap();
        assert_eq!(a.conflicts, 2);
        // Another kind of failure takes the attempt backoff and ends the
        // streak; the conflicts lost before were not the pod's failures,
        // so it is its first backoff (1 s), not the third attempt's (4 s).
        let t2 = t1 + ms(20);
        q.add_backoff(&a.pod.uid, t2);
        assert!(q.pop(t2 + ms(999)).is_none());
        let a = q.pop(t2 + Duration::from_secs(1)).unwrap();
        assert_eq!((a.attempts, a.conflicts, a.failures()), (3, 0, 1));
        let t2 = t2 + Duration::from_secs(1);
        let t3 = t2 + Duration::from_secs(4);
        q.add_conflict(&a.pod.uid, t3);
        assert!(q.pop(t3 + ms(10)).is_some(), "a new streak starts at 10 ms");
    }

    #[test]
    fn backoff_doubles_and_pods_leave_in_time_order() {
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        let a = q.pop(t0).unwrap();
        q.add_backoff(&a.pod.uid, t0);
        assert!(
            q.pop(t0 + Duration::from_millis(999)).is_none(),
            "1 s backoff"
        );
        let a = q.pop(t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(a.attempts, 1);
        let t1 = t0 + Duration::from_secs(1);
        q.add_backoff(&a.pod.uid, t1);
        assert!(
            q.pop(t1 + Duration::from_millis(1999)).is_none(),
            "2 s backoff"
        );
        assert!(q.pop(t1 + Duration::from_secs(2)).is_some());

        // Two pods backing off leave in expiry order, not priority order.
        q.add(pod("hi", 100), t0);
        q.add(pod("lo", 0), t0);
        let hi = q.pop(t0).unwrap();
        let lo = q.pop(t0).unwrap();
        q.add_backoff(&lo.pod.uid, t0);
        q.add_backoff(&hi.pod.uid, t0 + Duration::from_millis(500));
        assert_eq!(names(&q, t0 + Duration::from_millis(1200)), ["lo"]);
        assert_eq!(names(&q, t0 + Duration::from_millis(1500)), ["hi"]);
    }

    #[test]
    fn unschedulable_pods_move_only_on_relevant_events() {
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        let a = q.pop(t0).unwrap();
        q.add_unschedulable(&a.pod.uid, BTreeSet::from([NODE_RESOURCES_FIT]), t0);
        assert!(matches!(
            q.location(&a.pod.uid),
            Some(Location::Unschedulable(_))
        ));
        assert_eq!(
            q.on_event(ClusterEvent::NodeLabelChanged, t0),
            0,
            "affinity event is irrelevant"
        );
        assert!(q.pop(t0 + Duration::from_secs(60)).is_none());
        let t1 = t0 + Duration::from_secs(60);
        assert_eq!(q.on_event(ClusterEvent::AssignedPodDeleted, t1), 1);
        // Its 1 s backoff expired long ago: straight to activeQ.
        assert!(q.pop(t1).is_some());

        // Moved while its backoff still runs: it waits in backoffQ first
        // (without SchedulerPopFromBackoffQ; with it, see
        // `an_empty_active_queue_takes_a_fit_failure_early_never_an_error_or_a_conflict`).
        let q = queue_with(false);
        q.add(pod("b", 0), t0);
        let b = q.pop(t0).unwrap();
        q.add_unschedulable(&b.pod.uid, BTreeSet::from([NODE_RESOURCES_FIT]), t0);
        let t2 = t0 + Duration::from_millis(400);
        assert_eq!(q.on_event(ClusterEvent::AssignedPodDeleted, t2), 1);
        assert!(q.pop(t2).is_none());
        assert!(q.pop(t0 + Duration::from_secs(1)).is_some());
    }

    #[test]
    fn an_empty_active_queue_takes_a_fit_failure_early_never_an_error_or_a_conflict() {
        let q = queue();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        for name in ["fit-late", "fit-early", "error", "conflict"] {
            q.add(pod(name, 0), t0);
        }
        let popped: Vec<QueuedPodInfo> = std::iter::from_fn(|| q.pop(t0)).collect();
        let uid = |name: &str| {
            popped
                .iter()
                .find(|p| *p.pod.key.name == *name)
                .unwrap()
                .pod
                .uid
                .clone()
        };
        // Two fit failures, parked, moved by an event while their 1 s
        // backoffs still run (the later failure's ends later).
        q.add_unschedulable(&uid("fit-early"), BTreeSet::from([NODE_RESOURCES_FIT]), t0);
        q.add_unschedulable(
            &uid("fit-late"),
            BTreeSet::from([NODE_RESOURCES_FIT]),
            t0 + ms(5),
        );
        let t1 = t0 + ms(400);
        assert_eq!(q.on_event(ClusterEvent::AssignedPodDeleted, t1), 2);
        q.add_backoff(&uid("error"), t1);
        q.add_conflict(&uid("conflict"), t1);
        // activeQ first, whatever is backing off.
        q.add(pod("new", 0), t1);
        assert_eq!(names(&q, t1), ["new", "fit-early", "fit-late"]);
        // The error's 1 s and the conflict's 10 ms are waited out.
        assert!(q.pop(t1 + ms(9)).is_none());
        assert_eq!(names(&q, t1 + ms(10)), ["conflict"]);
        assert!(q.pop(t1 + ms(999)).is_none());
        assert_eq!(names(&q, t1 + ms(1000)), ["error"]);
        q.assert_consistent();

        // Upstream without the feature gate: the fit failure waits too.
        let q = queue_with(false);
        q.add(pod("a", 0), t0);
        let a = q.pop(t0).unwrap();
        q.add_unschedulable(&a.pod.uid, BTreeSet::from([NODE_RESOURCES_FIT]), t0);
        q.on_event(ClusterEvent::AssignedPodDeleted, t1);
        assert!(q.pop(t1).is_none());
        assert!(q.pop(t0 + ms(1000)).is_some());
    }

    #[test]
    fn a_rejection_without_a_plugin_backs_off_as_an_error() {
        // Upstream sends a pod with no unschedulable (or pending) plugin to
        // podErrorBackoffQ, which an empty activeQ never takes early.
        let (q, a, t0) = one_popped();
        q.on_event(ClusterEvent::AssignedPodDeleted, t0);
        q.add_unschedulable(&a.pod.uid, BTreeSet::new(), t0);
        assert!(matches!(q.location(&a.pod.uid), Some(Location::Backoff(_))));
        assert!(q.pop(t0 + Duration::from_millis(999)).is_none());
        assert!(q.pop(t0 + Duration::from_secs(1)).is_some());
    }

    #[test]
    fn unschedulable_pods_are_flushed_after_five_minutes() {
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        let a = q.pop(t0).unwrap();
        q.add_unschedulable(&a.pod.uid, BTreeSet::from([NODE_AFFINITY]), t0);
        assert_eq!(
            q.flush_unschedulable_leftover(t0 + Duration::from_secs(299)),
            0
        );
        assert_eq!(
            q.flush_unschedulable_leftover(t0 + Duration::from_secs(300)),
            1
        );
        assert!(q.pop(t0 + Duration::from_secs(302)).is_some());
    }

    #[test]
    fn an_event_during_the_cycle_sends_the_failed_pod_to_backoff_not_the_pool() {
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        let a = q.pop(t0).unwrap();
        q.on_event(ClusterEvent::AssignedPodDeleted, t0);
        q.add_unschedulable(&a.pod.uid, BTreeSet::from([NODE_RESOURCES_FIT]), t0);
        assert!(matches!(q.location(&a.pod.uid), Some(Location::Backoff(_))));
    }

    #[test]
    fn an_event_during_the_cycle_that_cannot_help_leaves_the_pod_in_the_pool() {
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        let a = q.pop(t0).unwrap();
        // Only NodeAffinity registered for label changes; the pod was
        // rejected by NodeResourcesFit: a stream of such events must not
        // turn its wait for room into a backoff retry loop.
        q.on_event(ClusterEvent::NodeLabelChanged, t0);
        q.add_unschedulable(&a.pod.uid, BTreeSet::from([NODE_RESOURCES_FIT]), t0);
        assert!(matches!(
            q.location(&a.pod.uid),
            Some(Location::Unschedulable(_))
        ));
        // A relevant event afterwards moves it out of the pool as usual.
        q.on_event(ClusterEvent::AssignedPodDeleted, t0);
        assert!(matches!(
            q.location(&a.pod.uid),
            Some(Location::Active) | Some(Location::Backoff(_))
        ));
    }

    fn member(name: &str, group: &str) -> Arc<PodInfo> {
        Arc::new(PodBuilder::new(name).pod_group_name(group).build_info())
    }

    #[test]
    fn a_gang_rejected_as_a_unit_waits_together_and_is_woken_together() {
        let q = queue();
        let t0 = Instant::now();
        for n in ["m0", "m1", "m2", "m3"] {
            q.add(member(n, "g"), t0);
        }
        let m0 = q.pop(t0).unwrap().pod.uid.clone();
        // An event m0's rejecting plugin registered for, while m0 waited
        // at Permit: alone, m0 would go to backoff.
        q.on_event(ClusterEvent::AssignedPodDeleted, t0);
        let (m1, m2) = (
            q.pop(t0).unwrap().pod.uid.clone(),
            q.pop(t0).unwrap().pod.uid.clone(),
        );
        let plugins = BTreeSet::from([NODE_RESOURCES_FIT]);
        // m2 fits nowhere (no event in its cycle): the whole gang parks,
        // m3 (not tried yet) too, so it is not placed to wait in vain.
        let parked = q.add_unschedulable_group(&m2, &[m0.clone(), m1.clone()], &plugins, t0);
        assert_eq!(
            parked.iter().map(|p| &*p.key.name).collect::<Vec<_>>(),
            ["m3"],
            "the member not tried yet, returned to get the gang's status"
        );
        let all = ["uid-m0", "uid-m1", "uid-m2", "uid-m3"];
        for uid in all {
            assert!(
                matches!(q.location(uid), Some(Location::Unschedulable(_))),
                "{uid}: {:?}",
                q.location(uid)
            );
        }
        assert!(q.pop(t0).is_none(), "nothing of the gang is tried alone");
        // The room they held is free: that wakes others, not them.
        q.add(pod("other", 0), t0);
        let other = q.pop(t0).unwrap().pod.uid.clone();
        q.add_unschedulable(&other, plugins.clone(), t0);
        // The worker names the pods it released (not m3, parked by the
        // queue): the whole gang stays.
        let released = [m0.clone(), m1.clone(), m2.clone()];
        assert_eq!(
            q.on_event_except(ClusterEvent::AssignedPodDeleted, t0, &released),
            1
        );
        for uid in all {
            assert!(
                matches!(q.location(uid), Some(Location::Unschedulable(_))),
                "{uid}"
            );
        }
        assert!(!matches!(
            q.location(&other),
            Some(Location::Unschedulable(_))
        ));
        // An event that helps one member wakes the whole gang.
        q.delete(&other);
        assert_eq!(q.on_event(ClusterEvent::AssignedPodDeleted, t0), 4);
        for uid in all {
            assert!(
                !matches!(q.location(uid), Some(Location::Unschedulable(_))),
                "{uid}"
            );
        }
    }

    #[test]
    fn a_new_member_wakes_its_parked_gang() {
        let q = queue();
        let t0 = Instant::now();
        q.add(member("m0", "g"), t0);
        let m0 = q.pop(t0).unwrap().pod.uid.clone();
        let parked = q.add_unschedulable_group(
            &m0,
            &[],
            &BTreeSet::from([crate::plugins::names::GANG_SCHEDULING]),
            t0,
        );
        assert!(parked.is_empty());
        assert!(matches!(q.location(&m0), Some(Location::Unschedulable(_))));
        // Another gang's member changes nothing; its own gang's does.
        q.add(member("x", "other"), t0);
        assert!(matches!(q.location(&m0), Some(Location::Unschedulable(_))));
        q.add(member("m1", "g"), t0);
        assert!(!matches!(q.location(&m0), Some(Location::Unschedulable(_))));
        // Done and deleted members leave the index.
        assert!(q.delete("uid-m1"));
        assert!(q.delete(&m0));
        assert!(
            !q.inner
                .lock()
                .gangs
                .contains_key("podgroups.scheduling.k8s.io/default/g")
        );
    }

    #[test]
    fn deleted_and_done_pods_are_gone_and_nothing_else_is_lost() {
        let q = queue();
        let t0 = Instant::now();
        for i in 0..5 {
            q.add(pod(&format!("p{i}"), 0), t0);
        }
        assert!(q.delete("uid-p2"));
        let p0 = q.pop(t0).unwrap();
        q.done(&p0.pod.uid);
        let lens = q.lengths();
        assert_eq!(lens.active, 3);
        assert_eq!(names(&q, t0), ["p1", "p3", "p4"]);
        assert_eq!(q.lengths().in_flight, 3);
    }

    #[test]
    fn a_nomination_is_recorded_in_place_without_moving_the_pod() {
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        q.add(pod("b", 0), t0 + Duration::from_millis(1));
        assert!(q.set_nominated_node("uid-b", Some(Arc::from("n1"))));
        assert!(!q.set_nominated_node("uid-zz", Some(Arc::from("n1"))));
        let first = q.pop(t0 + Duration::from_secs(1)).expect("a");
        assert_eq!(
            first.pod.key.name.as_ref(),
            "a",
            "b kept its place behind a"
        );
        let second = q.pop(t0 + Duration::from_secs(1)).expect("b");
        assert_eq!(second.pod.nominated_node_name.as_deref(), Some("n1"));
        q.set_nominated_node("uid-b", None);
        assert_eq!(q.location("uid-b"), Some(Location::InFlight));
    }

    #[test]
    fn re_adding_a_queued_pod_updates_it_in_place() {
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        q.add(pod("a", 0), t0);
        assert_eq!(names(&q, t0), ["a"]);
    }

    #[test]
    fn pop_blocking_wakes_when_backoff_expires_and_returns_none_when_closed() {
        let q = Arc::new(SchedulingQueue::new(
            QueueConfig {
                backoff: BackoffConfig {
                    initial: Duration::from_millis(20),
                    max: Duration::from_millis(20),
                    jitter: 0.0,
                    ..BackoffConfig::default()
                },
                ..QueueConfig::default()
            },
            HashMap::new(),
        ));
        q.add(pod("a", 0), Instant::now());
        let a = q.pop(Instant::now()).unwrap();
        q.add_backoff(&a.pod.uid, Instant::now());
        let got = q.pop_blocking(Duration::from_secs(5));
        assert_eq!(got.map(|p| p.attempts), Some(1));
        let q2 = q.clone();
        let h = std::thread::spawn(move || q2.pop_blocking(Duration::from_secs(30)));
        q.close();
        assert!(h.join().unwrap().is_none());
    }

    fn gated(name: &str, prio: i32, gates: &[&str]) -> Arc<PodInfo> {
        let b = gates
            .iter()
            .fold(PodBuilder::new(name).priority(prio), |b, g| {
                b.scheduling_gate(g)
            });
        Arc::new(b.build_info())
    }

    #[test]
    fn gated_pods_wait_for_their_gates_not_for_events_or_the_flush() {
        let q = queue();
        let t0 = Instant::now();
        q.add(gated("g", 100, &["gate-a", "gate-b"]), t0);
        q.add(pod("plain", 0), t0);
        assert_eq!(q.location("uid-g"), Some(Location::Gated));
        let st = q.gating_status("uid-g").expect("gated");
        assert_eq!(
            st.message(),
            "waiting for scheduling gates: [gate-a gate-b]"
        );
        assert_eq!(st.plugin, "SchedulingGates");
        assert_eq!(
            q.lengths(),
            QueueLengths {
                active: 1,
                gated: 1,
                ..QueueLengths::default()
            }
        );
        // Higher priority, yet only the ungated pod comes out.
        assert_eq!(names(&q, t0), ["plain"]);
        q.done("uid-plain");

        // Events and the leftover flush leave it alone.
        assert_eq!(q.on_event(ClusterEvent::AssignedPodDeleted, t0), 0);
        assert_eq!(q.on_event(ClusterEvent::NodeLabelChanged, t0), 0);
        let late = t0 + Duration::from_secs(3600);
        assert_eq!(q.flush_unschedulable_leftover(late), 0);
        assert!(q.pop(late).is_none());

        // Removing one gate keeps it gated, with the new message.
        q.add(gated("g", 100, &["gate-b"]), late);
        assert_eq!(q.location("uid-g"), Some(Location::Gated));
        assert_eq!(
            q.gating_status("uid-g").map(|s| s.message()),
            Some("waiting for scheduling gates: [gate-b]".to_owned())
        );
        // Removing the last one sends it to activeQ at once, no backoff.
        let t1 = late + Duration::from_secs(1);
        q.add(gated("g", 100, &[]), t1);
        assert_eq!(q.location("uid-g"), Some(Location::Active));
        assert!(q.gating_status("uid-g").is_none());
        let g = q.pop(t1).expect("released");
        assert_eq!(g.attempts, 0);
        assert_eq!(g.initial_attempt, t1, "latency counts from the release");
        assert_eq!(g.timestamp, t0, "queue order by its arrival");
        assert_eq!(q.lengths().gated, 0);
    }

    #[test]
    fn gates_are_ignored_when_the_profile_does_not_run_scheduling_gates() {
        let q = SchedulingQueue::new(
            QueueConfig {
                honour_scheduling_gates: false,
                ..QueueConfig::default()
            },
            HashMap::new(),
        );
        let t0 = Instant::now();
        q.add(gated("g", 0, &["gate-a"]), t0);
        assert_eq!(q.location("uid-g"), Some(Location::Active));
        assert!(q.gating_status("uid-g").is_none());
        assert_eq!(names(&q, t0), ["g"]);
    }

    #[test]
    fn a_pod_regated_while_in_flight_parks_as_gated_when_it_fails() {
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        let a = q.pop(t0).unwrap();
        q.add(gated("a", 0, &["hold"]), t0);
        assert_eq!(
            q.location("uid-a"),
            Some(Location::InFlight),
            "its cycle decides"
        );
        q.add_unschedulable(&a.pod.uid, BTreeSet::from([NODE_RESOURCES_FIT]), t0);
        assert_eq!(q.location("uid-a"), Some(Location::Gated));
        assert_eq!(q.on_event(ClusterEvent::AssignedPodDeleted, t0), 0);
    }

    #[test]
    fn parked_pods_are_not_popped_again_without_an_event_or_the_flush() {
        let q = queue();
        let t0 = Instant::now();
        for i in 0..10 {
            q.add(pod(&format!("p{i}"), i), t0);
        }
        let mut popped = 0;
        while let Some(p) = q.pop(t0) {
            q.add_unschedulable(&p.pod.uid, BTreeSet::from([NODE_RESOURCES_FIT]), t0);
            popped += 1;
        }
        assert_eq!(popped, 10, "each tried once");
        // Long after every backoff expired, nothing comes out by itself.
        for s in [1, 10, 60, 299] {
            assert!(q.pop(t0 + Duration::from_secs(s)).is_none(), "at {s} s");
        }
        // An event nobody rejecting them cares about does not either.
        q.on_event(
            ClusterEvent::NodeLabelChanged,
            t0 + Duration::from_secs(100),
        );
        assert!(q.pop(t0 + Duration::from_secs(100)).is_none());
        // The leftover flush (5 min) brings all ten back, highest first.
        let t5 = t0 + Duration::from_secs(300);
        assert_eq!(q.flush_unschedulable_leftover(t5), 10);
        let order: Vec<i32> = std::iter::from_fn(|| q.pop(t5).map(|p| p.pod.priority)).collect();
        assert_eq!(order, (0..10).rev().collect::<Vec<_>>());
    }

    #[test]
    fn jittered_backoff_ends_within_its_documented_range() {
        // Default config: jitter up to +10 %. Third failure: 4 s base, so
        // the pod is back between 4.0 s and 4.4 s, never outside.
        let q = SchedulingQueue::new(QueueConfig::default(), HashMap::new());
        for i in 0..20 {
            let t0 = Instant::now();
            let name = format!("j{i}");
            q.add(pod(&name, 0), t0);
            let mut t = t0;
            for attempt in 1..=3u32 {
                let p = q.pop(t).expect("ready");
                assert_eq!(p.attempts, attempt - 1);
                q.add_backoff(&p.pod.uid, t);
                // Backoffs 1, 2, 4 s (+ up to 10 %).
                let base = Duration::from_secs(1 << (attempt - 1));
                assert!(q.pop(t + base - Duration::from_millis(1)).is_none());
                t += base.mul_f64(1.1);
            }
            let p = q.pop(t).expect("back within 4.4 s");
            assert_eq!(p.attempts, 3);
            q.done(&p.pod.uid);
        }
    }

    #[test]
    fn a_pod_deleted_and_added_again_queues_by_its_new_arrival() {
        // Found by the property test: the earlier stay's heap entry must
        // not come back to life (it would jump the pod ahead of `b`).
        let q = queue();
        let t0 = Instant::now();
        q.add(pod("a", 0), t0);
        assert!(q.delete("uid-a"));
        q.add(pod("b", 0), t0 + Duration::from_millis(1));
        q.add(pod("a", 0), t0 + Duration::from_millis(2));
        assert_eq!(names(&q, t0 + Duration::from_millis(2)), ["b", "a"]);
        q.assert_consistent();
    }
}
