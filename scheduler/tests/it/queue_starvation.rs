//! No starvation, no storm: the queue and the cycle together, as the
//! worker's scheduling loop drives them (pop → schedule → assume or park),
//! with explicit time. High-priority pods that fit nowhere are each tried
//! once and parked; they do not block a schedulable low-priority pod, and
//! nothing re-evaluates them until an event that can help them arrives.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_scheduler::Framework;
use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_scheduler::framework::ScheduleError;
use flotilla_scheduler::queue::{BackoffConfig, QueueConfig, QueueLengths, SchedulingQueue};
use flotilla_shared::framework::ClusterEvent;
use flotilla_shared::testing::PodBuilder;

use crate::{cache_with, default_framework, info, node};

const HIGH: usize = 1000;

struct Loop {
    fw: Framework,
    cache: NodeCache,
    queue: SchedulingQueue,
    snap: Snapshot,
    /// Cycles run per pod name.
    cycles: HashMap<String, u32>,
    placed: Vec<String>,
}

impl Loop {
    fn new() -> Self {
        let fw = default_framework();
        let queue = SchedulingQueue::new(
            QueueConfig {
                backoff: BackoffConfig {
                    jitter: 0.0,
                    ..BackoffConfig::default()
                },
                ..QueueConfig::default()
            },
            fw.event_interest(),
        );
        Loop {
            fw,
            cache: cache_with((1..=3).map(|i| node(&format!("n{i}"), "4", "8Gi").build_spec())),
            queue,
            snap: Snapshot::default(),
            cycles: HashMap::new(),
            placed: Vec::new(),
        }
    }

    /// One scheduling cycle, if a pod is ready at `now`; as the worker: a
    /// placement is assumed, bound (`done`) and seen as a bound-pod event.
    fn cycle(&mut self, now: Instant) -> bool {
        let Some(qp) = self.queue.pop(now) else {
            return false;
        };
        let pod = qp.pod;
        *self.cycles.entry(pod.key.name.to_string()).or_default() += 1;
        self.cache.update_snapshot(&mut self.snap);
        match self.fw.schedule(&pod, &self.snap) {
            Ok(r) => {
                self.cache
                    .assume(Arc::clone(&pod), &r.node)
                    .expect("assume");
                self.queue.done(&pod.uid);
                self.queue.on_event(ClusterEvent::AssignedPodAdded, now);
                self.placed.push(pod.key.name.to_string());
            }
            Err(ScheduleError::Unschedulable(fit)) => {
                self.queue
                    .add_unschedulable(&pod.uid, fit.diagnosis.unschedulable_plugins, now);
            }
            Err(e) => panic!("unexpected cycle error: {e}"),
        }
        true
    }

    /// Runs cycles at `now` until the queue has nothing ready; returns how many.
    fn drain(&mut self, now: Instant) -> usize {
        std::iter::from_fn(|| self.cycle(now).then_some(())).count()
    }
}

#[test]
fn a_thousand_unschedulable_high_priority_pods_do_not_starve_a_low_one() {
    let mut l = Loop::new();
    let t0 = Instant::now();
    for i in 0..HIGH {
        l.queue.add(
            info(
                PodBuilder::new(&format!("high-{i}"))
                    .cpu("8")
                    .priority(1000),
            ),
            t0,
        );
    }
    l.queue
        .add(info(PodBuilder::new("low").cpu("1").priority(0)), t0);

    // PrioritySort: every high pod first, each once, then the low one.
    let cycles = l.drain(t0);
    assert_eq!(cycles, HIGH + 1);
    assert_eq!(l.placed, ["low"]);
    assert!(l.cycles.values().all(|&c| c == 1), "each pod tried once");
    assert_eq!(
        l.queue.lengths(),
        QueueLengths {
            unschedulable: HIGH,
            ..QueueLengths::default()
        }
    );

    // No busy re-evaluation: long after their backoffs, with a stream of
    // bindings (AssignedPodAdded cannot help a pod NodeResourcesFit
    // rejected) and node label changes, nothing is popped again.
    for s in 1..=200 {
        let now = t0 + Duration::from_secs(s);
        l.queue.on_event(ClusterEvent::AssignedPodAdded, now);
        l.queue.on_event(ClusterEvent::NodeLabelChanged, now);
        assert_eq!(l.drain(now), 0, "at {s} s");
    }

    // A newcomer of low priority is scheduled in one cycle.
    let t1 = t0 + Duration::from_secs(201);
    l.queue
        .add(info(PodBuilder::new("late").cpu("1").priority(-10)), t1);
    assert_eq!(l.drain(t1), 1);
    assert_eq!(l.placed, ["low", "late"]);

    // Room freed (an assigned pod deleted) is what can help: every parked
    // pod is tried once more, and parked again.
    assert!(l.cache.forget("uid-late"));
    assert_eq!(l.queue.on_event(ClusterEvent::AssignedPodDeleted, t1), HIGH);
    assert_eq!(l.drain(t1), HIGH);
    assert!(
        l.cycles
            .iter()
            .all(|(n, &c)| c == 2 || !n.starts_with("high"))
    );
    assert_eq!(l.queue.lengths().unschedulable, HIGH);
}

#[test]
fn gated_pods_cost_no_cycles_until_released() {
    let mut l = Loop::new();
    let t0 = Instant::now();
    for i in 0..HIGH {
        l.queue.add(
            info(
                PodBuilder::new(&format!("gated-{i}"))
                    .cpu("1")
                    .priority(1000)
                    .scheduling_gate("example.com/hold"),
            ),
            t0,
        );
    }
    l.queue.add(info(PodBuilder::new("plain").cpu("1")), t0);
    assert_eq!(l.drain(t0), 1, "only the ungated pod runs a cycle");
    assert_eq!(l.queue.lengths().gated, HIGH);
    let later = t0 + Duration::from_secs(600);
    l.queue.on_event(ClusterEvent::AssignedPodDeleted, later);
    l.queue.flush_unschedulable_leftover(later);
    assert_eq!(l.drain(later), 0);

    // Releasing one (its update drops the gate) schedules it at once.
    l.queue.add(
        info(PodBuilder::new("gated-7").cpu("1").priority(1000)),
        later,
    );
    assert_eq!(l.drain(later), 1);
    assert_eq!(l.placed, ["plain", "gated-7"]);
    assert_eq!(l.queue.lengths().gated, HIGH - 1);
}
