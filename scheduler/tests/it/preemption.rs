//! DefaultPreemption through the real framework: a cycle over a `NodeCache`
//! snapshot fails with a `FitError`, then `preemption::preempt` decides the
//! victims and the node. Expected values follow upstream's
//! `SelectVictimsOnNode` / `DryRunPreemption` / `pickOneNodeForPreemption`
//! and the FailedScheduling messages of `fiterror-format.md`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodCondition,
    TopologySpreadConstraint,
};
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_scheduler::framework::{PluginSet, ScheduleError};
use flotilla_scheduler::preemption::{
    Candidate, DefaultPreemptionArgs, PostFilterOutcome, disruption_target_condition, preempt,
};
use flotilla_scheduler::{Framework, Profile};
use flotilla_shared::PodInfo;
use flotilla_shared::framework::{Code, Diagnosis, ExtensionPoint, FitError, Status};
use flotilla_shared::pdb::PdbInfo;
use flotilla_shared::testing::{PodAffinityKind, PodBuilder, pod_affinity_term};

use crate::{
    bind_in_cache, cache_with, default_framework, expect_fit_error, framework_with, node,
    snapshot_of,
};

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

/// A pod asking for `cpu` with `priority`.
fn pod(name: &str, priority: i32, cpu: &str) -> PodBuilder {
    PodBuilder::new(name).priority(priority).cpu(cpu)
}

/// Binds `pod` to `node` with `status.startTime` at `started` (seconds).
fn bind_started(cache: &NodeCache, pod: PodBuilder, node: &str, started: i64) {
    let mut p = pod.node_name(node).build();
    p.status.as_mut().expect("status").start_time =
        Some(Time(Timestamp::from_second(started).expect("valid time")));
    cache.add_bound_pod(Arc::new(PodInfo::from_pod(Arc::new(p)).expect("valid pod")));
}

/// Runs a cycle that must fail, then DefaultPreemption with `args` from `offset`.
fn run(
    fw: &Framework,
    snap: &Snapshot,
    preemptor: &PodInfo,
    pdbs: &[PdbInfo],
    args: &DefaultPreemptionArgs,
    offset: usize,
) -> (Box<FitError>, PostFilterOutcome) {
    let fit = expect_fit_error(fw.schedule(preemptor, snap));
    let out = preempt(fw, preemptor, snap, &fit, pdbs, args, offset).expect("no internal error");
    (fit, out)
}

fn preempt_default(cache: &NodeCache, preemptor: PodBuilder) -> PostFilterOutcome {
    let fw = default_framework();
    let snap = snapshot_of(cache);
    run(
        &fw,
        &snap,
        &preemptor.build_info(),
        &[],
        &DefaultPreemptionArgs::default(),
        0,
    )
    .1
}

fn nominated(out: PostFilterOutcome) -> Candidate {
    match out {
        PostFilterOutcome::Nominate(c) => c,
        PostFilterOutcome::NotHelpful(m) | PostFilterOutcome::NoCandidate(m) => {
            panic!("expected a nomination, got {m:?}")
        }
    }
}

fn not_helpful(out: PostFilterOutcome) -> String {
    match out {
        PostFilterOutcome::NotHelpful(m) | PostFilterOutcome::NoCandidate(m) => m,
        PostFilterOutcome::Nominate(c) => panic!("expected no preemption, got {c:?}"),
    }
}

fn victims(c: &Candidate) -> Vec<&str> {
    c.victims.iter().map(|v| &*v.key.name).collect()
}

/// A budget over `app=<app>` in `default` with `allowed` disruptions left.
fn pdb(app: &str, allowed: i32) -> PdbInfo {
    PdbInfo::from_pdb(&PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(format!("{app}-pdb")),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some([("app".to_owned(), app.to_owned())].into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: Some(PodDisruptionBudgetStatus {
            disruptions_allowed: allowed.into(),
            ..Default::default()
        }),
    })
    .expect("valid pdb")
}

fn args(pct: u32, abs: u32) -> DefaultPreemptionArgs {
    DefaultPreemptionArgs {
        min_candidate_nodes_percentage: pct,
        min_candidate_nodes_absolute: abs,
    }
}

// ---- victims on one node

#[test]
fn only_lower_priority_pods_are_victims_and_the_more_important_go_back_first() {
    // n1 (4 cpu): low(p1, 1 cpu), mid(p2, 2 cpu), peer(p10, 1 cpu). The
    // preemptor (p10, 2 cpu) needs 2 cpu: without low and mid it fits;
    // mid goes back first (more important) but then 5 > 4; low goes back
    // (1 + 1 + 2 = 4). peer has the preemptor's priority: never a victim.
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    bind_in_cache(&cache, pod("low", 1, "1"), "n1");
    bind_in_cache(&cache, pod("mid", 2, "2"), "n1");
    bind_in_cache(&cache, pod("peer", 10, "1"), "n1");
    let c = nominated(preempt_default(&cache, pod("high", 10, "2")));
    assert_eq!(&*c.node, "n1");
    assert_eq!(victims(&c), ["mid"]);
    assert_eq!(c.pdb_violations, 0);
}

#[test]
fn an_empty_cluster_is_not_an_error_for_preemption() {
    // No node at all: upstream stops with ErrNoNodesAvailable before
    // PostFilter; here the FitError says so and preemption finds nothing
    // to do, so the pod waits unschedulable for a node, not in error
    // backoff.
    let cache = cache_with(Vec::<flotilla_shared::NodeSpec>::new());
    let fw = default_framework();
    let snap = snapshot_of(&cache);
    let (fit, out) = run(
        &fw,
        &snap,
        &pod("p", 10, "1").build_info(),
        &[],
        &DefaultPreemptionArgs::default(),
        0,
    );
    assert_eq!(fit.to_string(), "no nodes available to schedule pods");
    assert_eq!(not_helpful(out), "preemption: no nodes available");
}

#[test]
fn equal_and_higher_priority_pods_are_never_victims() {
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    bind_in_cache(&cache, pod("peer", 10, "2"), "n1");
    bind_in_cache(&cache, pod("boss", 20, "2"), "n1");
    assert_eq!(
        not_helpful(preempt_default(&cache, pod("high", 10, "1"))),
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );
}

#[test]
fn a_node_where_even_evicting_every_lower_priority_pod_is_not_enough_reports_the_filter_reason() {
    // Upstream returns the Filter status of the "all removed" check.
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    bind_in_cache(&cache, pod("low", 1, "1"), "n1");
    bind_in_cache(&cache, pod("peer", 10, "3"), "n1");
    assert_eq!(
        not_helpful(preempt_default(&cache, pod("high", 10, "2"))),
        "preemption: 0/1 nodes are available: 1 Insufficient cpu."
    );
}

#[test]
fn victims_are_listed_most_important_first() {
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    bind_started(&cache, pod("young", 3, "1"), "n1", 300);
    bind_started(&cache, pod("old", 3, "1"), "n1", 100);
    bind_started(&cache, pod("lowest", 1, "1"), "n1", 50);
    bind_started(&cache, pod("top", 5, "1"), "n1", 400);
    let c = nominated(preempt_default(&cache, pod("high", 10, "4")));
    assert_eq!(victims(&c), ["top", "old", "young", "lowest"]);
}

// ---- PodDisruptionBudgets

#[test]
fn pdb_protected_victims_are_reprieved_first() {
    // n1 (4 cpu): guarded (p1, 2 cpu, app=db) and other (p2, 2 cpu). One of
    // them must go for a 2-cpu pod. Without a budget the more important
    // `other` goes back first and `guarded` is evicted; with a budget of 0
    // `guarded` goes back first.
    // (budgets, victim, pdb violations)
    let cases: [(&[PdbInfo], &str, usize); 3] = [
        (&[], "guarded", 0),
        (&[pdb("db", 0)], "other", 0),
        (&[pdb("db", 1)], "guarded", 0),
    ];
    for (pdbs, want, violations) in cases {
        let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
        bind_in_cache(&cache, pod("guarded", 1, "2").label("app", "db"), "n1");
        bind_in_cache(&cache, pod("other", 2, "2"), "n1");
        let fw = default_framework();
        let snap = snapshot_of(&cache);
        let high = pod("high", 10, "2").build_info();
        let (_, out) = run(
            &fw,
            &snap,
            &high,
            pdbs,
            &DefaultPreemptionArgs::default(),
            0,
        );
        let c = nominated(out);
        assert_eq!(
            (victims(&c), c.pdb_violations),
            (vec![want], violations),
            "{pdbs:?}"
        );
    }
}

#[test]
fn a_victim_that_must_go_despite_its_budget_counts_and_a_node_with_fewer_violations_wins() {
    // n1: one guarded pod (p1) must go → 1 violation; n2: an unguarded pod of
    // higher priority (p5). Without the budget n1 wins on victim priority.
    let build = || {
        let cache = cache_with([
            node("n1", "2", "8Gi").build_spec(),
            node("n2", "2", "8Gi").build_spec(),
        ]);
        bind_in_cache(&cache, pod("guarded", 1, "2").label("app", "db"), "n1");
        bind_in_cache(&cache, pod("plain", 5, "2"), "n2");
        cache
    };
    let fw = default_framework();
    let high = pod("high", 10, "2").build_info();
    let cache = build();
    let snap = snapshot_of(&cache);
    let all = DefaultPreemptionArgs::default();
    let c = nominated(run(&fw, &snap, &high, &[], &all, 0).1);
    assert_eq!(&*c.node, "n1", "no budget: the lower victim priority wins");
    let c = nominated(run(&fw, &snap, &high, &[pdb("db", 0)], &all, 0).1);
    assert_eq!(
        (&*c.node, c.pdb_violations),
        ("n2", 0),
        "fewer violations win"
    );

    // Alone, the violating node is still a candidate, with its count.
    let cache = cache_with([node("n1", "2", "8Gi").build_spec()]);
    bind_in_cache(&cache, pod("guarded", 1, "2").label("app", "db"), "n1");
    let snap = snapshot_of(&cache);
    let c = nominated(run(&fw, &snap, &high, &[pdb("db", 0)], &all, 0).1);
    assert_eq!(
        (&*c.node, victims(&c), c.pdb_violations),
        ("n1", vec!["guarded"], 1)
    );
}

// ---- eligibility

#[test]
fn preemption_policy_never_is_not_eligible() {
    let cache = cache_with([node("n1", "2", "8Gi").build_spec()]);
    bind_in_cache(&cache, pod("low", 1, "2"), "n1");
    let mut p = pod("high", 10, "2").build();
    p.spec.as_mut().expect("spec").preemption_policy = Some("Never".into());
    let fw = default_framework();
    let snap = snapshot_of(&cache);
    let high = PodInfo::from_pod(Arc::new(p)).expect("valid");
    let (mut fit, out) = run(&fw, &snap, &high, &[], &DefaultPreemptionArgs::default(), 0);
    let msg = not_helpful(out);
    assert_eq!(
        msg,
        "preemption: not eligible due to preemptionPolicy=Never."
    );
    fit.diagnosis.post_filter_msg = Some(msg);
    assert_eq!(
        fit.to_string(),
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    );
}

/// Binds a low-priority pod that is terminating; `by_preemption` adds the
/// DisruptionTarget condition upstream sets on preemption victims.
fn bind_terminating(cache: &NodeCache, name: &str, node: &str, by_preemption: bool) {
    let mut p = pod(name, 1, "2").node_name(node).build();
    p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    if by_preemption {
        let conditions: &mut Vec<PodCondition> = p
            .status
            .as_mut()
            .expect("status")
            .conditions
            .get_or_insert_with(Vec::new);
        conditions.push(disruption_target_condition("default-scheduler"));
    }
    cache.add_bound_pod(Arc::new(PodInfo::from_pod(Arc::new(p)).expect("valid")));
}

fn nominated_to(p: PodBuilder, node: &str) -> PodInfo {
    let mut p = p.build();
    p.status.as_mut().expect("status").nominated_node_name = Some(node.into());
    PodInfo::from_pod(Arc::new(p)).expect("valid")
}

#[test]
fn a_pod_waits_while_its_nominated_node_still_terminates_a_victim() {
    let fw = default_framework();
    let all = DefaultPreemptionArgs::default();
    // (victim terminating by preemption?, n1 tainted (unresolvable)?, expected)
    for (by_preemption, tainted, want_eligible) in [
        (true, false, false),
        (false, false, true),
        (true, true, true),
    ] {
        let mut n1 = node("n1", "2", "8Gi");
        if tainted {
            n1 = n1.taint("dedicated", "x", "NoSchedule");
        }
        let cache = cache_with([n1.build_spec(), node("n2", "2", "8Gi").build_spec()]);
        bind_terminating(&cache, "leaving", "n1", by_preemption);
        bind_in_cache(&cache, pod("low", 1, "2"), "n2");
        let snap = snapshot_of(&cache);
        let high = nominated_to(pod("high", 10, "2"), "n1");
        let (_, out) = run(&fw, &snap, &high, &[], &all, 0);
        let case = format!("by preemption {by_preemption}, tainted {tainted}");
        match out {
            PostFilterOutcome::NotHelpful(m) => {
                assert!(!want_eligible, "{case}: {m}");
                assert_eq!(
                    m,
                    "preemption: not eligible due to a terminating pod on the nominated node."
                );
            }
            PostFilterOutcome::Nominate(c) => {
                assert!(want_eligible, "{case}: {c:?}");
                let want = if tainted { "n2" } else { "n1" };
                assert_eq!(&*c.node, want, "{case}");
            }
            PostFilterOutcome::NoCandidate(m) => panic!("{case}: {m}"),
        }
    }
}

#[test]
fn no_candidate_ends_the_nomination_but_not_being_eligible_keeps_it() {
    // Upstream's PostFilter clears nominatedNodeName when it finds no
    // candidate, and keeps it when the pod is not eligible to preempt.
    let fw = default_framework();
    let all = DefaultPreemptionArgs::default();
    // A 2-cpu nominee of priority 10 on n1 (2 cpu), given what n1 holds.
    let outcome_on_n1 = |occupy: &dyn Fn(&NodeCache)| {
        let cache = cache_with([node("n1", "2", "8Gi").build_spec()]);
        occupy(&cache);
        let snap = snapshot_of(&cache);
        let high = nominated_to(pod("high", 10, "2"), "n1");
        run(&fw, &snap, &high, &[], &all, 0).1
    };
    // Only pods of higher priority on the node: nothing to evict.
    let out = outcome_on_n1(&|c| bind_in_cache(c, pod("higher", 20, "2"), "n1"));
    match out {
        PostFilterOutcome::NoCandidate(m) => {
            assert!(m.starts_with("preemption: 0/1 nodes are available"), "{m}");
        }
        other => panic!("expected no candidate, got {other:?}"),
    }
    // A victim still terminating on the nominated node: wait, nominated.
    let out = outcome_on_n1(&|c| bind_terminating(c, "leaving", "n1", true));
    assert!(
        matches!(&out, PostFilterOutcome::NotHelpful(m) if m.contains("not eligible")),
        "{out:?}"
    );
}

// ---- which nodes are tried

#[test]
fn unresolvable_nodes_are_not_tried() {
    // n1 is tainted (UnschedulableAndUnresolvable) though evicting its
    // low-priority pod would free room; n2 is full of a peer.
    let cache = cache_with([
        node("n1", "2", "8Gi")
            .taint("dedicated", "x", "NoSchedule")
            .build_spec(),
        node("n2", "2", "8Gi").build_spec(),
    ]);
    bind_in_cache(&cache, pod("low", 1, "2"), "n1");
    bind_in_cache(&cache, pod("peer", 10, "2"), "n2");
    assert_eq!(
        not_helpful(preempt_default(&cache, pod("high", 10, "2"))),
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, \
         1 Preemption is not helpful for scheduling."
    );
    // With a lower-priority pod on n2 instead, n2 is the one nominated.
    let cache = cache_with([
        node("n1", "2", "8Gi")
            .taint("dedicated", "x", "NoSchedule")
            .build_spec(),
        node("n2", "2", "8Gi").build_spec(),
    ]);
    bind_in_cache(&cache, pod("low", 1, "2"), "n1");
    bind_in_cache(&cache, pod("mid", 5, "2"), "n2");
    let c = nominated(preempt_default(&cache, pod("high", 10, "2")));
    assert_eq!((&*c.node, victims(&c)), ("n2", vec!["mid"]));
}

/// n0..n4, each full with one pod `v<i>` (priority 1 + i, `app=v<i>`):
/// n0's victim has the lowest priority.
fn five_full_nodes() -> NodeCache {
    let cache = cache_with((0..5).map(|i| node(&format!("n{i}"), "2", "8Gi").build_spec()));
    for i in 0..5 {
        let name = format!("v{i}");
        bind_in_cache(
            &cache,
            pod(&name, 1 + i, "2").label("app", &name),
            &format!("n{i}"),
        );
    }
    cache
}

#[test]
fn the_candidate_limit_is_honoured_from_the_offset() {
    let cache = five_full_nodes();
    let fw = default_framework();
    let snap = snapshot_of(&cache);
    let high = pod("high", 10, "2").build_info();
    // (args, offset, expected node): with one candidate wanted the search
    // stops at the first node it tries; with all five it finds n0's cheaper
    // victim wherever it starts. Offsets wrap around the potential nodes.
    for (a, offset, want) in [
        (args(0, 1), 0, "n0"),
        (args(0, 1), 2, "n2"),
        (args(0, 1), 4, "n4"),
        (args(0, 1), 7, "n2"),
        (args(20, 0), 3, "n3"),
        (args(40, 0), 3, "n3"),
        (args(40, 0), 4, "n0"),
        (args(10, 100), 2, "n0"),
        (args(100, 0), 4, "n0"),
    ] {
        let (_, out) = run(&fw, &snap, &high, &[], &a, offset);
        assert_eq!(&*nominated(out).node, want, "{a:?} from offset {offset}");
    }
}

#[test]
fn the_search_goes_on_until_one_candidate_violates_no_budget() {
    // One candidate wanted, starting at n0, whose victim (app=v0) is guarded
    // by a budget with no disruption left: n1 is tried too, and wins.
    let cache = five_full_nodes();
    let fw = default_framework();
    let snap = snapshot_of(&cache);
    let high = pod("high", 10, "2").build_info();
    let (_, out) = run(&fw, &snap, &high, &[pdb("v0", 0)], &args(0, 1), 0);
    let c = nominated(out);
    assert_eq!((&*c.node, c.pdb_violations), ("n1", 0));
    // Without the budget the first node tried is taken.
    let (_, out) = run(&fw, &snap, &high, &[], &args(0, 1), 0);
    assert_eq!(&*nominated(out).node, "n0");
}

// ---- filters beyond resources in the dry run

#[test]
fn required_pod_affinity_is_checked_against_the_snapshot_without_the_victims() {
    // Zone a: n1 and n2. The only app=cache pod (p1) runs on n2. The
    // preemptor needs app=cache in its zone. Evicting n2's pods would remove
    // the cache pod and break the affinity, so n2 is no candidate even
    // though its victim is cheaper; n1's filler (p5) is evicted instead.
    let build = |filler_priority: i32| {
        let cache =
            cache_with(["n1", "n2"].map(|n| node(n, "4", "8Gi").label(ZONE, "a").build_spec()));
        bind_in_cache(&cache, pod("filler", filler_priority, "4"), "n1");
        bind_in_cache(&cache, pod("cache", 1, "3").label("app", "cache"), "n2");
        cache
    };
    let high = || {
        pod("high", 10, "2").pod_affinity(
            PodAffinityKind::Required,
            pod_affinity_term("app", "In", &["cache"], ZONE),
        )
    };
    let c = nominated(preempt_default(&build(5), high()));
    assert_eq!((&*c.node, victims(&c)), ("n1", vec!["filler"]));
    // With n1's filler a peer, nothing helps; n2 reports the affinity.
    assert_eq!(
        not_helpful(preempt_default(&build(10), high())),
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, \
         1 node(s) didn't match pod affinity rules."
    );
}

#[test]
fn required_anti_affinity_keeps_a_victim_that_resources_alone_would_reprieve() {
    // n1 (4 cpu): web (p2, 1 cpu, app=web) and filler (p1, 2 cpu). For 2 cpu,
    // bringing web back would fit by resources, but the preemptor avoids
    // app=web on its host: web is evicted, the filler stays.
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    bind_in_cache(&cache, pod("web", 2, "1").label("app", "web"), "n1");
    bind_in_cache(&cache, pod("filler", 1, "2"), "n1");
    let c = nominated(preempt_default(
        &cache,
        pod("high", 10, "2").pod_affinity(
            PodAffinityKind::RequiredAnti,
            pod_affinity_term("app", "In", &["web"], HOST),
        ),
    ));
    assert_eq!(victims(&c), ["web"]);
    // Without the anti-affinity the filler goes instead.
    let c = nominated(preempt_default(&cache, pod("high", 10, "2")));
    assert_eq!(victims(&c), ["filler"]);
}

#[test]
fn topology_spread_counts_the_victims_still_on_the_node() {
    // n1 (2 cpu) holds two low-priority app=web pods; n2 is full of a peer
    // without the label. The preemptor (app=web, 1 cpu) spreads web pods by
    // host with maxSkew 1: with either web pod back, n1 would have skew
    // 2 - 0 > 1, so both go, though resources would take one back.
    let cache = cache_with(["n1", "n2"].map(|n| node(n, "2", "8Gi").build_spec()));
    bind_in_cache(&cache, pod("web-a", 1, "1").label("app", "web"), "n1");
    bind_in_cache(&cache, pod("web-b", 1, "1").label("app", "web"), "n1");
    bind_in_cache(&cache, pod("peer", 10, "2"), "n2");
    let spread = TopologySpreadConstraint {
        max_skew: 1,
        topology_key: HOST.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(LabelSelector {
            match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let high = pod("high", 10, "1").label("app", "web");
    let c = nominated(preempt_default(
        &cache,
        high.clone().spread_constraint(spread),
    ));
    assert_eq!((&*c.node, c.victims.len()), ("n1", 2));
    let c = nominated(preempt_default(&cache, high));
    assert_eq!(
        c.victims.len(),
        1,
        "without the constraint one web pod stays"
    );
}

// ---- the FailedScheduling message (fiterror-format.md §5)

/// The cycle's FitError with DefaultPreemption's message appended.
fn failed_scheduling(cache: &NodeCache, preemptor: PodInfo) -> String {
    let fw = default_framework();
    let snap = snapshot_of(cache);
    let (mut fit, out) = run(
        &fw,
        &snap,
        &preemptor,
        &[],
        &DefaultPreemptionArgs::default(),
        0,
    );
    fit.diagnosis.post_filter_msg = Some(not_helpful(out));
    fit.to_string()
}

#[test]
fn example_one_insufficient_cpu_and_node_selector() {
    let cache = cache_with([
        node("n1", "2", "8Gi").label("disk", "ssd").build_spec(),
        node("n2", "2", "8Gi").build_spec(),
        node("n3", "2", "8Gi").build_spec(),
    ]);
    bind_in_cache(&cache, pod("peer", 10, "2"), "n1");
    let p = pod("p", 10, "1").node_selector("disk", "ssd").build_info();
    assert_eq!(
        failed_scheduling(&cache, p),
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, \
         2 Preemption is not helpful for scheduling."
    );
}

#[test]
fn example_two_request_beyond_allocatable_and_taint() {
    // The pod asks for more cpu and memory than n1 has at all (unresolvable
    // since v1.34); n2 is tainted.
    let cache = cache_with([
        node("n1", "2", "4Gi").build_spec(),
        node("n2", "8", "32Gi")
            .taint("dedicated", "x", "NoSchedule")
            .build_spec(),
    ]);
    bind_in_cache(&cache, pod("low", 1, "1"), "n1");
    let p = pod("p", 10, "4").memory("8Gi").build_info();
    assert_eq!(
        failed_scheduling(&cache, p),
        "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 node(s) had untolerated taint(s). \
         preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

/// `p` with one required node affinity term whose matchFields are
/// `metadata.name In <names>` for each entry of `requirements` (ANDed).
fn pinned_to_names(p: PodBuilder, requirements: &[&[&str]]) -> PodInfo {
    let mut p = p.build();
    p.spec.as_mut().expect("spec").affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(
                        requirements
                            .iter()
                            .map(|names| NodeSelectorRequirement {
                                key: "metadata.name".into(),
                                operator: "In".into(),
                                values: Some(names.iter().map(|n| (*n).to_owned()).collect()),
                            })
                            .collect(),
                    ),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    PodInfo::from_pod(Arc::new(p)).expect("valid")
}

#[test]
fn example_three_prefilter_result_and_ports() {
    // Node affinity on metadata.name keeps only n1 (PreFilterResult); n1's
    // port is held by a peer.
    let cache = cache_with(["n1", "n2", "n3"].map(|n| node(n, "4", "8Gi").build_spec()));
    bind_in_cache(&cache, pod("peer", 10, "100m").host_port(8080), "n1");
    let p = pinned_to_names(pod("p", 10, "100m").host_port(8080), &[&["n1"]]);
    assert_eq!(
        failed_scheduling(&cache, p),
        "0/3 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, \
         2 node is filtered out by the prefilter result. \
         preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, \
         2 Preemption is not helpful for scheduling."
    );
}

#[test]
fn a_prefilter_rejection_leaves_preemption_nothing_to_try() {
    // Two matchFields requirements that no node name satisfies both:
    // NodeAffinity's PreFilter rejects the pod (UnschedulableAndUnresolvable)
    // on every node, even the one with a low-priority pod.
    let cache = cache_with(["n1", "n2"].map(|n| node(n, "1", "8Gi").build_spec()));
    bind_in_cache(&cache, pod("low", 1, "1"), "n1");
    let p = pinned_to_names(pod("p", 10, "1"), &[&["n1"], &["n2"]]);
    assert_eq!(
        failed_scheduling(&cache, p),
        "0/2 nodes are available: pod affinity terms conflict. \
         preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

// ---- errors and configuration

#[test]
fn a_node_that_needs_no_victim_is_an_error_as_upstream() {
    // A FitError claiming n1 was Unschedulable while the pod fits there
    // (the cluster changed): upstream's dry run reports
    // "expected at least one victim pod on node" and, with no candidate,
    // preemption fails with that error.
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    bind_in_cache(&cache, pod("low", 1, "1"), "n1");
    let fw = default_framework();
    let snap = snapshot_of(&cache);
    let high = pod("high", 10, "1").build_info();
    let fit = FitError {
        pod: high.key.clone(),
        num_all_nodes: 1,
        diagnosis: Diagnosis {
            node_to_status: vec![(Arc::from("n1"), Status::unschedulable("Insufficient cpu"))],
            ..Diagnosis::default()
        },
    };
    match preempt(
        &fw,
        &high,
        &snap,
        &fit,
        &[],
        &DefaultPreemptionArgs::default(),
        0,
    ) {
        Err(ScheduleError::Internal { plugin, message }) => {
            assert_eq!(plugin, "DefaultPreemption");
            assert_eq!(message, "expected at least one victim pod on node \"n1\"");
        }
        other => panic!("expected an internal error, got {other:?}"),
    }
    assert_eq!(
        fit.diagnosis.node_to_status[0].1.code,
        Code::Unschedulable,
        "the fixture must make n1 a potential node"
    );
}

#[test]
fn the_profile_decides_whether_preemption_runs_and_with_which_args() {
    let fw = default_framework();
    assert_eq!(
        fw.enabled_at(ExtensionPoint::PostFilter),
        ["DefaultPreemption"]
    );
    assert_eq!(fw.preemption(), Some(&DefaultPreemptionArgs::default()));

    let mut off = Profile::default();
    off.plugins.points.insert(
        ExtensionPoint::PostFilter,
        PluginSet {
            enabled: Vec::new(),
            disabled: vec!["DefaultPreemption".into()],
        },
    );
    assert_eq!(
        framework_with(&off).preemption(),
        None,
        "disabled at postFilter"
    );

    let head = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
    let cfg = flotilla_scheduler::config::parse(
        &format!("{head}profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: DefaultPreemption\n"),
        "sched.yaml",
    )
    .expect("valid");
    let fw = framework_with(&cfg.profiles[0]);
    assert!(fw.enabled_at(ExtensionPoint::PostFilter).is_empty());
    assert_eq!(fw.preemption(), None, "disabled in multiPoint");

    let mut tuned = Profile::default();
    tuned.plugin_config.insert(
        "DefaultPreemption".into(),
        serde_json::json!({"minCandidateNodesPercentage": 30, "minCandidateNodesAbsolute": 5}),
    );
    assert_eq!(framework_with(&tuned).preemption(), Some(&args(30, 5)));

    let e = flotilla_scheduler::config::parse(
        &format!(
            "{head}profiles:\n- pluginConfig:\n  - name: DefaultPreemption\n    args:\n      \
             minCandidateNodesPercentage: 0\n      minCandidateNodesAbsolute: 0\n"
        ),
        "sched.yaml",
    )
    .expect_err("both zero is invalid");
    assert_eq!(
        e.path(),
        "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage",
        "{e}"
    );
    assert!(
        e.message().contains("cannot be zero at the same time"),
        "{e}"
    );
}
