//! Victim selection on one node (upstream `SelectVictimsOnNode` of
//! `defaultpreemption/default_preemption.go`), the importance order of
//! victims (`util.MoreImportantPod`) and the PodDisruptionBudget grouping
//! (`filterPodsWithPDBViolation`).

use std::cmp::Ordering;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use flotilla_shared::framework::Status;
use flotilla_shared::pdb::PdbInfo;
use flotilla_shared::{NodeInfo, PodInfo};

use crate::cache::Snapshot;
use crate::framework::Framework;

/// Per-node reason when the node holds no pod of lower priority than the
/// preemptor (code UnschedulableAndUnresolvable).
pub const REASON_NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// A start time as preemption compares it: pods without `status.startTime`
/// count as started *now*, later than every recorded start (upstream
/// `GetPodStartTime` returns `time.Now()` for them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum StartTime {
    /// `status.startTime`.
    At(Time),
    /// Not started yet: "now".
    NotStarted,
}

impl StartTime {
    pub(crate) fn of(pod: &PodInfo) -> Self {
        pod.start_time
            .clone()
            .map_or(StartTime::NotStarted, StartTime::At)
    }
}

/// Upstream `MoreImportantPod` as an ordering: the more important pod sorts
/// first (higher priority, then the earlier start time).
pub(crate) fn more_important_first(a: &Arc<PodInfo>, b: &Arc<PodInfo>) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| StartTime::of(a).cmp(&StartTime::of(b)))
}

/// Splits `pods` (kept in their order) into those whose eviction would
/// violate a budget and the others. Budgets are consumed in order: each pod
/// a budget limits takes one of its `disruptionsAllowed`; the pod violates
/// the budget once the count drops below 0 (upstream
/// `filterPodsWithPDBViolation`).
pub(crate) fn split_by_pdb_violation(
    pods: &[Arc<PodInfo>],
    pdbs: &[PdbInfo],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = pdbs.iter().map(|p| p.disruptions_allowed).collect();
    let (mut violating, mut non_violating) = (Vec::new(), Vec::new());
    for pod in pods {
        let mut violated = false;
        for (left, pdb) in allowed.iter_mut().zip(pdbs) {
            if pdb.limits_preemption_of(pod) {
                *left = left.saturating_sub(1);
                violated |= *left < 0;
            }
        }
        if violated {
            violating.push(pod.clone());
        } else {
            non_violating.push(pod.clone());
        }
    }
    (violating, non_violating)
}

/// Whether `pod` fits on `node` with `node` standing in for its snapshot
/// entry in `scratch` (PreFilter over the changed snapshot, then Filter).
fn fits(fw: &Framework, pod: &PodInfo, scratch: &mut Snapshot, node: &NodeInfo) -> Status {
    let node = Arc::new(node.clone());
    scratch.replace(&node);
    fw.dry_run_filters(pod, scratch, &node)
}

/// Finds the fewest pods of `node` to evict so that `pod` fits there.
/// `scratch` is a copy of the cycle's snapshot; `node`'s entry in it is
/// replaced while trying and restored before returning.
///
/// 1. Every pod of lower priority than `pod` is a potential victim; none →
///    `UnschedulableAndUnresolvable` [`REASON_NO_VICTIMS`].
/// 2. Without all of them `pod` must fit, else that check's status (e.g.
///    `Insufficient cpu`) is returned.
/// 3. Victims are sorted most important first and reprieved one by one
///    (those whose eviction would violate a PodDisruptionBudget first, then
///    the rest): a pod stays if `pod` still fits with it back.
///
/// Returns the victims (most important first) and how many of them violate
/// a budget.
///
/// # Errors
/// The rejecting [`Status`] as described in 1 and 2.
pub(crate) fn select_victims_on_node(
    fw: &Framework,
    pod: &PodInfo,
    scratch: &mut Snapshot,
    node: &Arc<NodeInfo>,
    pdbs: &[PdbInfo],
) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
    let result = select(fw, pod, scratch, node, pdbs);
    scratch.replace(node);
    result
}

fn select(
    fw: &Framework,
    pod: &PodInfo,
    scratch: &mut Snapshot,
    node: &Arc<NodeInfo>,
    pdbs: &[PdbInfo],
) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
    let mut potential: Vec<Arc<PodInfo>> = node
        .pods
        .iter()
        .filter(|p| p.priority < pod.priority)
        .cloned()
        .collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(REASON_NO_VICTIMS));
    }
    let mut info = NodeInfo::clone(node);
    for v in &potential {
        info.remove_pod(&v.uid);
    }
    let st = fits(fw, pod, scratch, &info);
    if !st.is_success() {
        return Err(st);
    }
    potential.sort_by(more_important_first);
    let (violating, non_violating) = split_by_pdb_violation(&potential, pdbs);
    let both_groups = !violating.is_empty() && !non_violating.is_empty();
    let mut victims = Vec::new();
    let mut violations = 0;
    for (group, violates) in [(violating, true), (non_violating, false)] {
        for p in group {
            info.add_pod(p.clone());
            if !fits(fw, pod, scratch, &info).is_success() {
                info.remove_pod(&p.uid);
                victims.push(p);
                violations += usize::from(violates);
            }
        }
    }
    if both_groups {
        victims.sort_by(more_important_first);
    }
    Ok((victims, violations))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::policy::v1::{
        PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use flotilla_shared::testing::PodBuilder;

    fn pod(name: &str, priority: i32, started: Option<i64>) -> Arc<PodInfo> {
        let mut p = PodBuilder::new(name)
            .priority(priority)
            .label("app", "web")
            .build();
        p.status.as_mut().expect("status").start_time =
            started.map(|s| Time(Timestamp::from_second(s).expect("valid")));
        Arc::new(PodInfo::from_pod(Arc::new(p)).expect("valid"))
    }

    fn names(pods: &[Arc<PodInfo>]) -> Vec<&str> {
        pods.iter().map(|p| &*p.key.name).collect()
    }

    #[test]
    fn importance_is_priority_then_earlier_start_with_unstarted_last() {
        let mut pods = vec![
            pod("low", 1, Some(10)),
            pod("unstarted", 5, None),
            pod("late", 5, Some(200)),
            pod("early", 5, Some(100)),
        ];
        pods.sort_by(more_important_first);
        assert_eq!(names(&pods), ["early", "late", "unstarted", "low"]);
    }

    fn pdb(allowed: i32, disrupted: &[&str]) -> PdbInfo {
        PdbInfo::from_pdb(&PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: allowed.into(),
                disrupted_pods: Some(
                    disrupted
                        .iter()
                        .map(|n| ((*n).to_owned(), Time(Timestamp::UNIX_EPOCH)))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..Default::default()
            }),
        })
        .expect("valid pdb")
    }

    #[test]
    fn pdb_budget_is_consumed_in_order_and_disrupted_pods_are_free() {
        let pods = vec![pod("a", 1, None), pod("b", 1, None), pod("c", 1, None)];
        // (allowed, disruptedPods, violating, non-violating)
        type Case<'a> = (i32, &'a [&'a str], &'a [&'a str], &'a [&'a str]);
        let cases: &[Case] = &[
            (0, &[], &["a", "b", "c"], &[]),
            (1, &[], &["b", "c"], &["a"]),
            (3, &[], &[], &["a", "b", "c"]),
            (1, &["a"], &["c"], &["a", "b"]),
        ];
        for (allowed, disrupted, want_v, want_nv) in cases {
            let (v, nv) = split_by_pdb_violation(&pods, &[pdb(*allowed, disrupted)]);
            assert_eq!(
                (names(&v), names(&nv)),
                (want_v.to_vec(), want_nv.to_vec()),
                "allowed {allowed}, disrupted {disrupted:?}"
            );
        }
        let (v, nv) = split_by_pdb_violation(&pods, &[]);
        assert!(v.is_empty() && nv.len() == 3, "no budget, no violation");
    }
}
