//! Scheduling Events (`Scheduled`, `FailedScheduling`) and the pipeline that
//! writes them without ever holding up scheduling.
//!
//! Upstream kube-scheduler records, through its profile's event recorder:
//! - `Normal` `Scheduled`, action `Binding`, note
//!   `Successfully assigned <ns>/<pod> to <node>` after a Binding succeeds;
//! - `Warning` `FailedScheduling`, action `Scheduling`, note the FitError
//!   message cut to the API's note limit (1024 bytes, ending in ` ...`)
//!   after a failed scheduling attempt.
//!
//! [`EventRecorder`] puts events on a bounded channel (full: drop and count)
//! drained by one background task, which drops repeats of the same (pod,
//! reason) within a window and paces writes with a global token bucket
//! ([`EventLimiter`]), so a retry storm cannot flood the API server; while
//! the server does not answer it backs off and tries each event again (up
//! to [`MAX_TRIES_PER_EVENT`]; every try the same Event, named and timed
//! when it happened, so a try that landed unanswered is not written twice),
//! and [`EventRecorder::flush`] writes what is queued before a graceful
//! stop.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, warn};

use super::{ClusterError, PodRef};

/// `reportingController` (events.k8s.io/v1) and `source.component`
/// (core/v1) of our Events.
pub const REPORTING_CONTROLLER: &str = "flotilla.io/scheduler";

/// Upstream's `NoteLengthLimit` (bytes) for an Event's note/message.
pub const NOTE_LENGTH_LIMIT: usize = 1024;

/// `type` of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// The API's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One Event about a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulingEvent {
    /// The pod (`regarding` / `involvedObject`).
    pub pod: PodRef,
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// `Scheduled`, `FailedScheduling` or `Preempted`.
    pub reason: &'static str,
    /// `Binding`, `Scheduling` or `Preempting`.
    pub action: &'static str,
    /// Human-readable text (at most [`NOTE_LENGTH_LIMIT`] bytes).
    pub note: String,
    /// When it happened: the Event's `eventTime` and the suffix of its
    /// name, as upstream's recorder sets them once, so every try of the
    /// same Event writes the same object (a try after one that landed
    /// unanswered gets `AlreadyExists`, not a second Event).
    pub at: Timestamp,
}

impl SchedulingEvent {
    /// `Normal` `Scheduled` (action `Binding`): "Successfully assigned
    /// ns/pod to node".
    #[must_use]
    pub fn scheduled(pod: &PodRef, node: &str) -> Self {
        SchedulingEvent {
            note: format!(
                "Successfully assigned {}/{} to {node}",
                pod.namespace, pod.name
            ),
            pod: pod.clone(),
            type_: EventType::Normal,
            reason: "Scheduled",
            action: "Binding",
            at: Timestamp::now(),
        }
    }

    /// `Normal` `Preempted` (action `Preempting`) on a preemption victim:
    /// "Preempted by pod <preemptor uid> on node <node>" (upstream's
    /// preemption evaluator).
    #[must_use]
    pub fn preempted(victim: &PodRef, preemptor_uid: &str, node: &str) -> Self {
        SchedulingEvent {
            pod: victim.clone(),
            type_: EventType::Normal,
            reason: "Preempted",
            action: "Preempting",
            note: truncate_note(&format!("Preempted by pod {preemptor_uid} on node {node}")),
            at: Timestamp::now(),
        }
    }

    /// `Warning` `FailedScheduling` (action `Scheduling`) with the FitError
    /// message, truncated like upstream's `truncateMessage`.
    #[must_use]
    pub fn failed_scheduling(pod: &PodRef, message: &str) -> Self {
        SchedulingEvent {
            pod: pod.clone(),
            type_: EventType::Warning,
            reason: "FailedScheduling",
            action: "Scheduling",
            note: truncate_note(message),
            at: Timestamp::now(),
        }
    }
}

/// Upstream's `truncateMessage`: a message longer than
/// [`NOTE_LENGTH_LIMIT`] bytes keeps its first `limit - 4` bytes (cut back to
/// a character boundary) followed by ` ...`.
#[must_use]
pub fn truncate_note(message: &str) -> String {
    const SUFFIX: &str = " ...";
    if message.len() <= NOTE_LENGTH_LIMIT {
        return message.to_owned();
    }
    let mut end = NOTE_LENGTH_LIMIT - SUFFIX.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", &message[..end])
}

/// Event writes in flight at once.
const CONCURRENT_WRITES: usize = 16;

/// Limits of the event pipeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventLimits {
    /// Events written per second, sustained (token refill rate). Default 50
    /// (upstream kube-scheduler's client QPS, which its events share).
    pub qps: f64,
    /// Events written at once after a quiet spell (bucket size). Default 100.
    pub burst: u32,
    /// A repeat of the same (pod uid, reason) within this window is dropped.
    /// Default 5 minutes (upstream's longest stay of a pod in the
    /// unschedulable pool before a retry).
    pub dedupe_window: Duration,
    /// Events waiting for the writer; beyond it they are dropped. Default 1000.
    pub queue: usize,
}

impl Default for EventLimits {
    fn default() -> Self {
        EventLimits {
            qps: 50.0,
            burst: 100,
            dedupe_window: Duration::from_secs(300),
            queue: 1000,
        }
    }
}

/// What [`EventLimiter::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    /// Write it now.
    Write,
    /// The same (pod, reason) was written within the window: drop it.
    Duplicate,
    /// No token: write it after this long (the token is spoken for).
    After(Duration),
}

/// Global token bucket plus per-(pod uid, reason) dedupe window. Pure: the
/// caller passes the time.
#[derive(Debug)]
pub struct EventLimiter {
    limits: EventLimits,
    tokens: f64,
    refilled: Instant,
    last_written: HashMap<(String, &'static str), Instant>,
    last_sweep: Instant,
}

impl EventLimiter {
    /// A full bucket at `now`.
    #[must_use]
    pub fn new(limits: EventLimits, now: Instant) -> Self {
        EventLimiter {
            limits,
            tokens: f64::from(limits.burst),
            refilled: now,
            last_written: HashMap::new(),
            last_sweep: now,
        }
    }

    /// Decides about `event` at `now`. `Write` and `After` take a token and
    /// start the dedupe window of (pod, reason).
    pub fn admit(&mut self, event: &SchedulingEvent, now: Instant) -> Admission {
        self.sweep(now);
        let key = (event.pod.uid.clone(), event.reason);
        if let Some(t) = self.last_written.get(&key)
            && now.saturating_duration_since(*t) < self.limits.dedupe_window
        {
            return Admission::Duplicate;
        }
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.tokens = (self.tokens + elapsed * self.limits.qps).min(f64::from(self.limits.burst));
        self.tokens -= 1.0;
        self.last_written.insert(key, now);
        if self.tokens >= 0.0 || self.limits.qps <= 0.0 {
            Admission::Write
        } else {
            Admission::After(Duration::from_secs_f64(-self.tokens / self.limits.qps))
        }
    }

    /// Forgets dedupe entries older than the window (at most once a window).
    fn sweep(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_sweep) < self.limits.dedupe_window {
            return;
        }
        self.last_sweep = now;
        let window = self.limits.dedupe_window;
        self.last_written
            .retain(|_, t| now.saturating_duration_since(*t) < window);
    }
}

/// Counters of the event pipeline.
#[derive(Debug, Default)]
pub struct EventStats {
    /// Events handed to the recorder.
    pub recorded: AtomicU64,
    /// Events the API server accepted.
    pub written: AtomicU64,
    /// Repeats of a (pod, reason) within the dedupe window, dropped.
    pub deduplicated: AtomicU64,
    /// Dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Writes the API server refused or that failed (given up).
    pub failed: AtomicU64,
    /// Writes tried again after the server did not answer or answered
    /// 5xx/429.
    pub retried: AtomicU64,
}

/// A snapshot of [`EventStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// See [`EventStats::recorded`].
    pub recorded: u64,
    /// See [`EventStats::written`].
    pub written: u64,
    /// See [`EventStats::deduplicated`].
    pub deduplicated: u64,
    /// See [`EventStats::dropped`].
    pub dropped: u64,
    /// See [`EventStats::failed`].
    pub failed: u64,
    /// See [`EventStats::retried`].
    pub retried: u64,
}

impl EventStats {
    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> EventCounts {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EventCounts {
            recorded: l(&self.recorded),
            written: l(&self.written),
            deduplicated: l(&self.deduplicated),
            dropped: l(&self.dropped),
            failed: l(&self.failed),
            retried: l(&self.retried),
        }
    }
}

/// Where the recorder's task writes events (the API server).
#[tonic::async_trait]
pub trait EventWriter: Send + Sync + 'static {
    /// Writes one event.
    ///
    /// # Errors
    /// Any; the recorder counts and logs it and moves on.
    async fn write(&self, event: &SchedulingEvent) -> Result<(), ClusterError>;
}

/// What the recorder's queue carries.
#[derive(Debug)]
enum Queued {
    /// A new event.
    Event(SchedulingEvent),
    /// Answer once every event queued before has been written or given up.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Tries of one event before it is given up (upstream's event
/// broadcaster: `maxTriesPerEvent`).
pub const MAX_TRIES_PER_EVENT: u32 = 12;
/// The writer's first pause after a failed write.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Its longest pause (upstream's broadcaster sleeps 10 s between tries).
const LONGEST_BACKOFF: Duration = Duration::from_secs(10);

/// The writer's backoff while the server is unreachable: after a failed
/// write nothing more goes out until `until`, each further failure
/// doubling the pause (0.5 s to 10 s); one success ends it.
#[derive(Debug, Default)]
struct Outage {
    until: Option<tokio::time::Instant>,
    pause: Duration,
}

impl Outage {
    /// A write failed. Writes that were already out when the server went
    /// away fail together: only a failure after the pause ended (a probe)
    /// lengthens it.
    fn failed(&mut self) {
        let now = tokio::time::Instant::now();
        if self.until.is_some_and(|t| t > now) {
            return;
        }
        self.pause = if self.pause.is_zero() {
            FIRST_BACKOFF
        } else {
            (self.pause * 2).min(LONGEST_BACKOFF)
        };
        self.until = Some(now + self.pause);
    }

    fn succeeded(&mut self) {
        *self = Outage::default();
    }
}

/// The non-blocking front of the event pipeline. Cheap to clone.
///
/// Behind it one task writes the queued events, up to
/// [`CONCURRENT_WRITES`] at once, paced by the [`EventLimiter`]. A write
/// that fails because the server is unreachable (or answers 5xx/429) is
/// tried again, up to [`MAX_TRIES_PER_EVENT`] tries as upstream's
/// broadcaster, and puts the writer in backoff: while the server is down
/// one write at a time probes it, 0.5 s doubling to 10 s apart, instead of
/// every queued event failing at once. Events recorded meanwhile wait in
/// the queue (dropped and counted once it is full).
/// [`EventRecorder::flush`] waits for what is queued (a leader stopping
/// gracefully writes its last Events before it gives up the lease).
#[derive(Debug, Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<Queued>,
    stats: Arc<EventStats>,
}

impl EventRecorder {
    /// Starts the background task writing to `writer` under `limits`. It
    /// ends when every recorder clone is dropped. Needs a tokio runtime.
    pub fn spawn(writer: Arc<dyn EventWriter>, limits: EventLimits) -> Self {
        let (tx, rx) = mpsc::channel::<Queued>(limits.queue.max(1));
        let stats = Arc::new(EventStats::default());
        tokio::spawn(write_events(writer, limits, rx, stats.clone()));
        EventRecorder { tx, stats }
    }

    /// Waits until every event recorded before this call was written or
    /// given up, for at most `within`; whether it got there.
    pub async fn flush(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        let (done, wait) = tokio::sync::oneshot::channel();
        let sent = tokio::time::timeout_at(deadline, self.tx.send(Queued::Flush(done))).await;
        if !matches!(sent, Ok(Ok(()))) {
            return false;
        }
        matches!(tokio::time::timeout_at(deadline, wait).await, Ok(Ok(())))
    }

    /// Queues `event`; drops and counts it when the queue is full.
    pub fn record(&self, event: SchedulingEvent) {
        self.stats.recorded.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(Queued::Event(event)).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> &Arc<EventStats> {
        &self.stats
    }
}

/// The recorder's task: see [`EventRecorder`].
async fn write_events(
    writer: Arc<dyn EventWriter>,
    limits: EventLimits,
    mut rx: mpsc::Receiver<Queued>,
    st: Arc<EventStats>,
) {
    let mut limiter = EventLimiter::new(limits, Instant::now());
    // Writes run concurrently (each is one API round trip) so the writer
    // keeps up with binding at high client QPS; the limiter still paces
    // them in order.
    let in_flight = Arc::new(Semaphore::new(CONCURRENT_WRITES));
    let outage = Arc::new(parking_lot::Mutex::new(Outage::default()));
    // Events to try again, with the tries they had.
    let (retry_tx, mut retry_rx) = mpsc::unbounded_channel::<(SchedulingEvent, u32)>();
    let write = |ev: SchedulingEvent, tries: u32| {
        let (writer, st, outage, in_flight, retry_tx) = (
            writer.clone(),
            st.clone(),
            outage.clone(),
            in_flight.clone(),
            retry_tx.clone(),
        );
        async move {
            // While the server is down, one write at a time probes it, once
            // the pause is over.
            let backing_off = || {
                outage
                    .lock()
                    .until
                    .filter(|t| *t > tokio::time::Instant::now())
            };
            let permit = loop {
                if let Some(t) = backing_off() {
                    tokio::time::sleep_until(t).await;
                    continue;
                }
                let probing = outage.lock().until.is_some();
                let permits = if probing { CONCURRENT_WRITES } else { 1 };
                let Ok(permit) = in_flight.clone().acquire_many_owned(permits as u32).await else {
                    return;
                };
                // A write that was out meanwhile may have failed: wait again.
                if backing_off().is_none() {
                    break permit;
                }
            };
            tokio::spawn(async move {
                let _permit = permit;
                match writer.write(&ev).await {
                    Ok(()) => {
                        st.written.fetch_add(1, Ordering::Relaxed);
                        outage.lock().succeeded();
                    }
                    Err(e @ (ClusterError::Unavailable(_) | ClusterError::OutcomeUnknown(_)))
                        if tries < MAX_TRIES_PER_EVENT =>
                    {
                        let first = {
                            let mut o = outage.lock();
                            let first = o.until.is_none();
                            o.failed();
                            first
                        };
                        if first {
                            warn!(pod = %ev.pod, reason = ev.reason, error = %e,
                                "event not written; backing off while the server does not answer");
                        }
                        st.retried.fetch_add(1, Ordering::Relaxed);
                        let _ = retry_tx.send((ev, tries + 1));
                    }
                    Err(e) => {
                        // The first failure is news (RBAC, an API the
                        // server lacks); the rest are counted.
                        if st.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                            warn!(pod = %ev.pod, reason = ev.reason, error = %e,
                                "event not written (further failures are only counted)");
                        } else {
                            debug!(pod = %ev.pod, reason = ev.reason, error = %e, "event not written");
                        }
                    }
                }
            });
        }
    };
    loop {
        let next = tokio::select! {
            biased;
            Some((ev, tries)) = retry_rx.recv() => {
                write(ev, tries).await;
                continue;
            }
            next = rx.recv() => next,
        };
        match next {
            None => break,
            Some(Queued::Event(ev)) => {
                match limiter.admit(&ev, Instant::now()) {
                    Admission::Duplicate => {
                        st.deduplicated.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Admission::After(d) => tokio::time::sleep(d).await,
                    Admission::Write => {}
                }
                write(ev, 1).await;
            }
            Some(Queued::Flush(done)) => {
                // Everything before the flush is out or queued for a retry:
                // wait for the writes in flight, then for the retries.
                loop {
                    let all = CONCURRENT_WRITES as u32;
                    if in_flight.acquire_many(all).await.is_err() {
                        break;
                    }
                    match retry_rx.try_recv() {
                        Ok((ev, tries)) => write(ev, tries).await,
                        Err(_) => break,
                    }
                }
                let _ = done.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> PodRef {
        PodRef {
            namespace: "ns".into(),
            name: format!("p-{uid}"),
            uid: uid.into(),
        }
    }

    #[test]
    fn notes_follow_upstream() {
        let e = SchedulingEvent::scheduled(&pod("1"), "n1");
        assert_eq!(e.note, "Successfully assigned ns/p-1 to n1");
        assert_eq!(
            (e.type_.as_str(), e.reason, e.action),
            ("Normal", "Scheduled", "Binding")
        );
        let f = SchedulingEvent::failed_scheduling(&pod("1"), "0/1 nodes are available.");
        assert_eq!(
            (f.type_.as_str(), f.reason, f.action, f.note.as_str()),
            (
                "Warning",
                "FailedScheduling",
                "Scheduling",
                "0/1 nodes are available."
            )
        );
    }

    #[test]
    fn long_notes_are_cut_to_the_limit_with_a_marker() {
        let exact = "x".repeat(NOTE_LENGTH_LIMIT);
        assert_eq!(truncate_note(&exact), exact);
        let long = "y".repeat(NOTE_LENGTH_LIMIT + 1);
        let cut = truncate_note(&long);
        assert_eq!(cut.len(), NOTE_LENGTH_LIMIT);
        assert!(cut.ends_with("y ..."));
        // A multi-byte character across the cut is not split.
        let wide = format!("{}é{}", "a".repeat(1019), "b".repeat(10));
        let cut = truncate_note(&wide);
        assert_eq!(cut, format!("{} ...", "a".repeat(1019)));
    }

    #[test]
    fn repeats_within_the_window_are_dropped_per_pod_and_reason() {
        let t0 = Instant::now();
        let limits = EventLimits {
            dedupe_window: Duration::from_secs(60),
            ..EventLimits::default()
        };
        let mut l = EventLimiter::new(limits, t0);
        let fail = |u: &str| SchedulingEvent::failed_scheduling(&pod(u), "m");
        assert_eq!(l.admit(&fail("a"), t0), Admission::Write);
        assert_eq!(
            l.admit(&fail("a"), t0 + Duration::from_secs(59)),
            Admission::Duplicate
        );
        // Another pod, or another reason for the same pod, is not a repeat.
        assert_eq!(l.admit(&fail("b"), t0), Admission::Write);
        assert_eq!(
            l.admit(&SchedulingEvent::scheduled(&pod("a"), "n"), t0),
            Admission::Write
        );
        assert_eq!(
            l.admit(&fail("a"), t0 + Duration::from_secs(60)),
            Admission::Write
        );
    }

    #[test]
    fn the_bucket_allows_a_burst_then_paces_at_qps() {
        let t0 = Instant::now();
        let limits = EventLimits {
            qps: 10.0,
            burst: 3,
            ..EventLimits::default()
        };
        let mut l = EventLimiter::new(limits, t0);
        let ev = |i: usize| SchedulingEvent::scheduled(&pod(&i.to_string()), "n");
        for i in 0..3 {
            assert_eq!(l.admit(&ev(i), t0), Admission::Write, "event {i}");
        }
        // The 4th waits one token (100 ms), the 5th two.
        assert_eq!(
            l.admit(&ev(3), t0),
            Admission::After(Duration::from_millis(100))
        );
        assert_eq!(
            l.admit(&ev(4), t0),
            Admission::After(Duration::from_millis(200))
        );
        // One second later the debt is paid and the bucket is full again.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(l.admit(&ev(5), t1), Admission::Write);
    }

    struct Counting(parking_lot::Mutex<Vec<SchedulingEvent>>);

    #[tonic::async_trait]
    impl EventWriter for Counting {
        async fn write(&self, event: &SchedulingEvent) -> Result<(), ClusterError> {
            self.0.lock().push(event.clone());
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_recorder_never_blocks_and_counts_what_it_drops() {
        let sink = Arc::new(Counting(parking_lot::Mutex::new(Vec::new())));
        let limits = EventLimits {
            qps: 1.0,
            burst: 1,
            queue: 2,
            dedupe_window: Duration::from_secs(300),
        };
        let r = EventRecorder::spawn(sink.clone(), limits);
        // The task has not run yet: the queue takes 2, the rest are dropped.
        for i in 0..5 {
            r.record(SchedulingEvent::scheduled(&pod(&i.to_string()), "n"));
        }
        let s = r.stats().snapshot();
        assert_eq!((s.recorded, s.dropped), (5, 3));
        // Let the task drain (paused time advances through its sleeps).
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(sink.0.lock().len(), 2);
        r.record(SchedulingEvent::scheduled(&pod("0"), "n"));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let s = r.stats().snapshot();
        assert_eq!((s.written, s.deduplicated), (2, 1));
    }

    /// A server down until `up_at`: writes fail as unreachable before.
    struct DownUntil {
        up_at: tokio::time::Instant,
        tries_while_down: AtomicU64,
        written: parking_lot::Mutex<Vec<SchedulingEvent>>,
    }

    #[tonic::async_trait]
    impl EventWriter for DownUntil {
        async fn write(&self, event: &SchedulingEvent) -> Result<(), ClusterError> {
            if tokio::time::Instant::now() < self.up_at {
                self.tries_while_down.fetch_add(1, Ordering::SeqCst);
                return Err(ClusterError::Unavailable("connection refused".into()));
            }
            self.written.lock().push(event.clone());
            Ok(())
        }
    }

    fn down_for(d: Duration) -> Arc<DownUntil> {
        Arc::new(DownUntil {
            up_at: tokio::time::Instant::now() + d,
            tries_while_down: AtomicU64::new(0),
            written: parking_lot::Mutex::new(Vec::new()),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_server_is_probed_with_backoff_and_nothing_is_lost() {
        // Down for 24 s, as in the outage drill; 300 events meanwhile. (The
        // limiter's clock is not the test's paused one: no pacing here.)
        let sink = down_for(Duration::from_secs(24));
        let unpaced = EventLimits {
            qps: 1e6,
            burst: 1_000_000,
            ..EventLimits::default()
        };
        let r = EventRecorder::spawn(sink.clone(), unpaced);
        for i in 0..300 {
            r.record(SchedulingEvent::scheduled(&pod(&i.to_string()), "n"));
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        let s = r.stats().snapshot();
        assert_eq!((s.written, s.failed, s.dropped), (300, 0, 0), "{s:?}");
        // The first writes out fail together; then one probe per pause
        // (0.5, 1, 2, 4, 8, 10 s...): a handful, not one per event.
        let tries = sink.tries_while_down.load(Ordering::SeqCst);
        assert!(
            tries <= (CONCURRENT_WRITES + 10) as u64,
            "{tries} writes at a dead server"
        );
        assert_eq!(s.retried, tries);
        let written: std::collections::HashSet<String> = sink
            .written
            .lock()
            .iter()
            .map(|e| e.pod.uid.clone())
            .collect();
        assert_eq!(written.len(), 300, "each event written once");
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_is_given_up_after_upstreams_tries() {
        let sink = down_for(Duration::from_secs(3600));
        let r = EventRecorder::spawn(sink.clone(), EventLimits::default());
        r.record(SchedulingEvent::scheduled(&pod("a"), "n"));
        tokio::time::sleep(Duration::from_secs(600)).await;
        let s = r.stats().snapshot();
        assert_eq!(
            (s.written, s.failed, s.retried),
            (0, 1, u64::from(MAX_TRIES_PER_EVENT - 1)),
            "{s:?}"
        );
        assert_eq!(
            sink.tries_while_down.load(Ordering::SeqCst),
            u64::from(MAX_TRIES_PER_EVENT)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn flush_returns_once_every_queued_event_is_written() {
        let sink = Arc::new(Slow::default());
        let r = EventRecorder::spawn(sink.clone(), EventLimits::default());
        for i in 0..100 {
            r.record(SchedulingEvent::scheduled(&pod(&i.to_string()), "n"));
        }
        // Paced at 50/s after a burst of 100: all out within the wait.
        assert!(r.flush(Duration::from_secs(10)).await);
        assert_eq!(r.stats().snapshot().written, 100);
        // A server that stays down: the flush gives up at its deadline.
        let down = down_for(Duration::from_secs(3600));
        let r = EventRecorder::spawn(down, EventLimits::default());
        r.record(SchedulingEvent::scheduled(&pod("a"), "n"));
        assert!(!r.flush(Duration::from_secs(2)).await);
    }

    /// A sink whose writes take 20 ms, recording how many ran at once.
    #[derive(Default)]
    struct Slow {
        now: AtomicU64,
        most: AtomicU64,
    }

    #[tonic::async_trait]
    impl EventWriter for Slow {
        async fn write(&self, _event: &SchedulingEvent) -> Result<(), ClusterError> {
            let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(n, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn writes_overlap_up_to_the_limit_so_a_slow_server_does_not_fill_the_queue() {
        let sink = Arc::new(Slow::default());
        let limits = EventLimits {
            qps: 10_000.0,
            burst: 10_000,
            ..EventLimits::default()
        };
        let r = EventRecorder::spawn(sink.clone(), limits);
        for i in 0..100 {
            r.record(SchedulingEvent::scheduled(&pod(&i.to_string()), "n"));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let s = r.stats().snapshot();
        assert_eq!((s.written, s.dropped), (100, 0));
        let most = sink.most.load(Ordering::SeqCst);
        assert_eq!(
            most,
            u64::try_from(CONCURRENT_WRITES).unwrap(),
            "writes overlap, at most {CONCURRENT_WRITES} at once"
        );
    }
}
