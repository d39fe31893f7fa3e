//! Choosing one candidate node (upstream `pickOneNodeForPreemption` in
//! `pkg/scheduler/framework/preemption/preemption.go`).

use super::Candidate;
use super::victims::StartTime;

/// The index in `candidates` of the node to preempt on. Each criterion
/// keeps the candidates scoring best; the first one left alone wins:
/// 1. fewest PodDisruptionBudget violations;
/// 2. lowest priority of the most important victim;
/// 3. smallest sum of victim priorities, each shifted by `MaxInt32 + 1` so
///    every term is positive (a node with many negative-priority victims
///    does not beat one with fewer);
/// 4. fewest victims;
/// 5. latest start time of the earliest-starting victim among those of the
///    highest priority (victims without a start time count as *now*);
/// 6. the first remaining candidate.
///
/// `None` only for an empty slice. Victims must be ordered most important
/// first, as the dry run returns them.
#[must_use]
pub fn pick_one_node_for_preemption(candidates: &[Candidate]) -> Option<usize> {
    if candidates.is_empty() {
        return None;
    }
    let mut left: Vec<usize> = (0..candidates.len()).collect();
    // Each criterion runs only while more than one candidate is left.
    let _decided = keep_best(&mut left, |c| {
        -i64::try_from(candidates[c].pdb_violations).unwrap_or(i64::MAX)
    }) || keep_best(&mut left, |c| {
        -candidates[c]
            .victims
            .first()
            .map_or(i64::MIN, |v| i64::from(v.priority))
    }) || keep_best(&mut left, |c| {
        -candidates[c]
            .victims
            .iter()
            .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
            .sum::<i64>()
    }) || keep_best(&mut left, |c| {
        -i64::try_from(candidates[c].victims.len()).unwrap_or(i64::MAX)
    }) || keep_best(&mut left, |c| {
        earliest_start_of_highest_priority(&candidates[c])
    });
    left.first().copied()
}

/// Keeps the candidates with the highest `score`; true when one is left.
fn keep_best<K: Ord>(left: &mut Vec<usize>, score: impl Fn(usize) -> K) -> bool {
    let best = left.iter().map(|&c| score(c)).max();
    if let Some(best) = best {
        left.retain(|&c| score(c) == best);
    }
    left.len() == 1
}

/// Upstream `GetEarliestPodStartTime`: among the victims of the highest
/// priority, the earliest start.
fn earliest_start_of_highest_priority(c: &Candidate) -> Option<StartTime> {
    let top = c.victims.iter().map(|v| v.priority).max()?;
    c.victims
        .iter()
        .filter(|v| v.priority == top)
        .map(|v| StartTime::of(v))
        .min()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use flotilla_shared::PodInfo;
    use flotilla_shared::testing::PodBuilder;

    /// A victim `(priority, start second or None)`.
    type V = (i32, Option<i64>);

    fn candidate(node: &str, pdb_violations: usize, victims: &[V]) -> Candidate {
        let victims = victims
            .iter()
            .enumerate()
            .map(|(i, (prio, start))| {
                let mut p = PodBuilder::new(&format!("{node}-v{i}"))
                    .priority(*prio)
                    .build();
                p.status.as_mut().expect("status").start_time =
                    start.map(|s| Time(Timestamp::from_second(s).expect("valid")));
                Arc::new(PodInfo::from_pod(Arc::new(p)).expect("valid"))
            })
            .collect();
        Candidate {
            node: Arc::from(node),
            victims,
            pdb_violations,
        }
    }

    #[test]
    fn each_criterion_decides_on_its_own() {
        // (criterion, candidates in order, expected node). In each case every
        // earlier criterion ties, and the winner is not the first candidate.
        let cases: Vec<(&str, Vec<Candidate>, &str)> = vec![
            (
                "fewest PDB violations",
                vec![
                    candidate("a", 1, &[(1, Some(5))]),
                    candidate("b", 0, &[(9, Some(5)), (9, Some(5))]),
                ],
                "b",
            ),
            (
                "lowest highest-victim priority",
                vec![
                    candidate("a", 0, &[(10, Some(5))]),
                    candidate("b", 0, &[(5, Some(5)), (5, Some(5)), (5, Some(5))]),
                ],
                "b",
            ),
            (
                "smallest sum of shifted priorities",
                vec![
                    candidate("a", 0, &[(5, Some(5)), (5, Some(5))]),
                    candidate("b", 0, &[(5, Some(5)), (1, Some(5))]),
                ],
                "b",
            ),
            (
                // Unshifted, a's sum (-20) would be smaller than b's (-10).
                "shifted sums: fewer negative-priority victims win",
                vec![
                    candidate("a", 0, &[(-10, Some(5)), (-10, Some(5))]),
                    candidate("b", 0, &[(-10, Some(5))]),
                ],
                "b",
            ),
            (
                // The shift makes every victim add at least 0, so equal sums
                // with different counts need a MinInt32 victim (which adds
                // exactly 0): both sums are 7 + MaxInt32 + 1.
                "fewest victims",
                vec![
                    candidate("a", 0, &[(7, Some(5)), (i32::MIN, Some(5))]),
                    candidate("b", 0, &[(7, Some(5))]),
                ],
                "b",
            ),
            (
                "latest start of the earliest highest-priority victim",
                vec![
                    candidate("a", 0, &[(5, Some(100)), (5, Some(300))]),
                    candidate("b", 0, &[(5, Some(200)), (5, Some(250))]),
                ],
                "b",
            ),
            (
                "a victim without a start time counts as now (latest)",
                vec![
                    candidate("a", 0, &[(5, Some(100))]),
                    candidate("b", 0, &[(5, None)]),
                ],
                "b",
            ),
            (
                "full tie: the first candidate",
                vec![
                    candidate("a", 0, &[(5, Some(100))]),
                    candidate("b", 0, &[(5, Some(100))]),
                ],
                "a",
            ),
        ];
        for (name, cands, want) in cases {
            let i = pick_one_node_for_preemption(&cands).expect("non-empty");
            assert_eq!(&*cands[i].node, want, "{name}");
        }
        assert_eq!(pick_one_node_for_preemption(&[]), None);
    }
}
