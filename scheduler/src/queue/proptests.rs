//! Property test: any sequence of queue operations keeps every pod that was
//! added and not deleted or done tracked exactly once, in the location a
//! simple model predicts; pops return each pod at most once per stay, the
//! highest-priority ready pod first, never a gated one, and with nothing
//! ready (`SchedulerPopFromBackoffQ` on) the fit failure whose backoff ends
//! first, never an error's; `lengths()` adds up. Time is explicit (`Instant`s advanced by the sequence), so runs are
//! deterministic apart from the proptest seed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use flotilla_shared::PodInfo;
use flotilla_shared::framework::ClusterEvent;
use flotilla_shared::testing::PodBuilder;

use super::{BackoffConfig, Location, QueueConfig, SchedulingQueue};

const PODS: u8 = 8;
const PLUGINS: [&str; 2] = ["NodeResourcesFit", "NodeAffinity"];
const EVENTS: [ClusterEvent; 3] = [
    ClusterEvent::AssignedPodDeleted,
    ClusterEvent::NodeLabelChanged,
    // Nobody registered for it.
    ClusterEvent::NodeAdded,
];

#[derive(Debug, Clone)]
enum Op {
    Add { pod: u8, gated: bool },
    Delete(u8),
    Pop,
    Done(u8),
    AddUnschedulable { pod: u8, plugin: Option<usize> },
    AddBackoff(u8),
    OnEvent(usize),
    Flush,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..PODS, any::<bool>()).prop_map(|(pod, gated)| Op::Add { pod, gated }),
        1 => (0..PODS).prop_map(Op::Delete),
        4 => Just(Op::Pop),
        1 => (0..PODS).prop_map(Op::Done),
        2 => (0..PODS, proptest::option::of(0..PLUGINS.len()))
            .prop_map(|(pod, plugin)| Op::AddUnschedulable { pod, plugin }),
        1 => (0..PODS).prop_map(Op::AddBackoff),
        1 => (0..EVENTS.len()).prop_map(Op::OnEvent),
        1 => Just(Op::Flush),
        // Up to 6 min: crosses backoffs (1-10 s) and the 5 min flush.
        2 => (0u64..360_000).prop_map(Op::Advance),
    ]
}

/// What the model knows of a tracked pod.
#[derive(Debug, Clone, Copy)]
struct ModelPod {
    gated: bool,
    in_flight: bool,
    /// Its last failure was a fit failure with a plugin named: its backoff
    /// may be cut short.
    early: bool,
}

fn uid(pod: u8) -> String {
    format!("uid-p{pod}")
}

/// Priority is fixed per pod (Kubernetes does not let it change).
fn priority(pod: u8) -> i32 {
    i32::from(pod % 3) * 10
}

fn build(pod: u8, gated: bool) -> Arc<PodInfo> {
    let mut b = PodBuilder::new(&format!("p{pod}")).priority(priority(pod));
    if gated {
        b = b.scheduling_gate("example.com/hold");
    }
    Arc::new(b.build_info())
}

fn queue(jitter: bool, pop_from_backoff: bool) -> SchedulingQueue {
    let interest = HashMap::from([
        (
            ClusterEvent::AssignedPodDeleted,
            HashSet::from([PLUGINS[0]]),
        ),
        (ClusterEvent::NodeLabelChanged, HashSet::from([PLUGINS[1]])),
    ]);
    SchedulingQueue::new(
        QueueConfig {
            backoff: BackoffConfig {
                jitter: if jitter { 0.1 } else { 0.0 },
                ..BackoffConfig::default()
            },
            pop_from_backoff,
            ..QueueConfig::default()
        },
        interest,
    )
}

/// Whether a pod at `loc` would be popped at `now` (activeQ, or backoffQ
/// with its backoff over).
fn ready(loc: Option<Location>, now: Instant) -> bool {
    match loc {
        Some(Location::Active) => true,
        Some(Location::Backoff(until)) => until <= now,
        _ => false,
    }
}

fn check(q: &SchedulingQueue, model: &BTreeMap<u8, ModelPod>) -> Result<(), TestCaseError> {
    q.assert_consistent();
    for pod in 0..PODS {
        let loc = q.location(&uid(pod));
        match model.get(&pod) {
            None => prop_assert_eq!(loc, None, "p{} is not tracked", pod),
            Some(m) if m.in_flight => {
                prop_assert_eq!(loc, Some(Location::InFlight), "p{}", pod);
            }
            Some(m) if m.gated => prop_assert_eq!(loc, Some(Location::Gated), "p{}", pod),
            Some(_) => prop_assert!(
                matches!(
                    loc,
                    Some(Location::Active | Location::Backoff(_) | Location::Unschedulable(_))
                ),
                "p{} at {:?}",
                pod,
                loc
            ),
        }
    }
    let l = q.lengths();
    prop_assert_eq!(
        l.active + l.backoff + l.unschedulable + l.in_flight + l.gated,
        model.len()
    );
    prop_assert_eq!(l.in_flight, model.values().filter(|m| m.in_flight).count());
    prop_assert_eq!(
        l.gated,
        model.values().filter(|m| m.gated && !m.in_flight).count()
    );
    Ok(())
}

fn run(ops: &[Op], jitter: bool, pop_from_backoff: bool) -> Result<(), TestCaseError> {
    let q = queue(jitter, pop_from_backoff);
    let mut model: BTreeMap<u8, ModelPod> = BTreeMap::new();
    let mut now = Instant::now();
    for op in ops {
        match *op {
            Op::Add { pod, gated } => {
                q.add(build(pod, gated), now);
                model
                    .entry(pod)
                    .and_modify(|m| m.gated = gated)
                    .or_insert(ModelPod {
                        gated,
                        in_flight: false,
                        early: false,
                    });
            }
            Op::Delete(pod) => {
                prop_assert_eq!(q.delete(&uid(pod)), model.remove(&pod).is_some());
            }
            Op::Pop => {
                let ready_prios: Vec<i32> = (0..PODS)
                    .filter(|&p| ready(q.location(&uid(p)), now))
                    .map(priority)
                    .collect();
                // With nothing ready: the fit failures backing off, by the
                // end of their backoff.
                let early: Vec<(u8, Instant)> = (0..PODS)
                    .filter(|p| model.get(p).is_some_and(|m| m.early))
                    .filter_map(|p| match q.location(&uid(p)) {
                        Some(Location::Backoff(until)) => Some((p, until)),
                        _ => None,
                    })
                    .collect();
                let first_early = early.iter().map(|(_, t)| *t).min();
                match q.pop(now) {
                    Some(qp) => {
                        let name = qp.pod.key.name.to_string();
                        let pod: u8 = name[1..].parse().expect("p<n>");
                        let m = model.get_mut(&pod);
                        prop_assert!(m.is_some(), "{} popped but not tracked", name);
                        let m = m.expect("checked");
                        prop_assert!(!m.in_flight, "{} popped twice", name);
                        prop_assert!(!m.gated, "{} popped while gated", name);
                        if ready_prios.is_empty() {
                            prop_assert!(pop_from_backoff, "{} popped while backing off", name);
                            let until = early.iter().find(|(p, _)| *p == pod).map(|(_, t)| *t);
                            prop_assert!(until.is_some(), "{} is no fit failure backing off", name);
                            prop_assert_eq!(until, first_early, "{} is not the first to end", name);
                        } else {
                            prop_assert_eq!(
                                Some(qp.pod.priority),
                                ready_prios.iter().copied().max(),
                                "{} is not the highest-priority ready pod",
                                name
                            );
                        }
                        m.in_flight = true;
                    }
                    None => {
                        prop_assert!(ready_prios.is_empty(), "a ready pod was not popped");
                        prop_assert!(
                            !pop_from_backoff || early.is_empty(),
                            "an empty activeQ left a fit failure backing off"
                        );
                    }
                }
            }
            Op::Done(pod) => {
                q.done(&uid(pod));
                if model.get(&pod).is_some_and(|m| m.in_flight) {
                    model.remove(&pod);
                }
            }
            Op::AddUnschedulable { pod, plugin } => {
                let plugins: BTreeSet<&'static str> =
                    plugin.map(|i| PLUGINS[i]).into_iter().collect();
                let fit_failure = !plugins.is_empty();
                q.add_unschedulable(&uid(pod), plugins, now);
                if let Some(m) = model.get_mut(&pod)
                    && m.in_flight
                {
                    m.in_flight = false;
                    m.early = fit_failure;
                }
            }
            Op::AddBackoff(pod) => {
                q.add_backoff(&uid(pod), now);
                if let Some(m) = model.get_mut(&pod)
                    && m.in_flight
                {
                    m.in_flight = false;
                    m.early = false;
                }
            }
            Op::OnEvent(i) => {
                q.on_event(EVENTS[i], now);
            }
            Op::Flush => {
                q.flush_unschedulable_leftover(now);
            }
            Op::Advance(ms) => now += Duration::from_millis(ms),
        }
        check(&q, &model)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_pod_is_tracked_exactly_once_and_popped_once_per_stay(
        ops in proptest::collection::vec(op(), 1..120),
        jitter in any::<bool>(),
        pop_from_backoff in any::<bool>(),
    ) {
        run(&ops, jitter, pop_from_backoff)?;
    }
}
