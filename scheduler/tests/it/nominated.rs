//! Nominated pods through the whole cycle: upstream's
//! `RunFilterPluginsWithNominatedPods` (pods nominated to a node with
//! priority ≥ the pod's hold their room; pass 2 without them) and
//! `evaluateNominatedNode` (a pod's own nominated node is tried first).

use flotilla_scheduler::Profile;
use flotilla_scheduler::cache::NodeCache;
use flotilla_scheduler::plugins::names;
use flotilla_shared::framework::{Code, FitError, Status};
use flotilla_shared::pod_affinity::{
    REASON_AFFINITY_RULES_NOT_MATCH, REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
};
use flotilla_shared::testing::{PodAffinityKind, PodBuilder, pod_affinity_term};

use crate::{
    cache_with, default_framework, expect_fit_error, framework_with, info, node, snapshot_of,
};

const HOSTNAME: &str = "kubernetes.io/hostname";

/// Nodes `n1`, `n2` (4 cpu each, hostname labels).
fn two_nodes() -> NodeCache {
    cache_with(
        ["n1", "n2"]
            .into_iter()
            .map(|n| node(n, "4", "8Gi").label(HOSTNAME, n).build_spec()),
    )
}

/// The Filter status a FitError records for `node`.
fn status_of<'a>(fit: &'a FitError, node: &str) -> &'a Status {
    fit.diagnosis
        .node_to_status
        .iter()
        .find(|(n, _)| n.as_ref() == node)
        .map(|(_, st)| st)
        .unwrap_or_else(|| panic!("{node} has no status"))
}

fn nominate(cache: &NodeCache, pod: PodBuilder, node: &str) {
    cache.set_nominated(info(pod.nominated_node_name(node)), node);
}

#[test]
fn nominated_pods_of_greater_or_equal_priority_hold_their_room() {
    // n1 has 4 cpu; a 3-cpu pod of priority `nominated` is nominated to it.
    // A 2-cpu pod of priority `pod` fits n1 only if the nominated pod does
    // not count (upstream: it counts when its priority is >= the pod's).
    let cases: &[(i32, i32, bool)] = &[
        (100, 50, false),
        (100, 100, false),
        (100, 101, true),
        (0, 0, false),
        (-5, 0, true),
    ];
    for &(nominated, pod, fits) in cases {
        let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
        nominate(
            &cache,
            PodBuilder::new("preemptor").cpu("3").priority(nominated),
            "n1",
        );
        let snap = snapshot_of(&cache);
        let r =
            default_framework().schedule(&info(PodBuilder::new("p").cpu("2").priority(pod)), &snap);
        if fits {
            assert_eq!(r.expect("fits").node.as_ref(), "n1", "{nominated} vs {pod}");
        } else {
            let fit = expect_fit_error(r);
            let st = status_of(&fit, "n1");
            assert_eq!(st.reasons, ["Insufficient cpu"], "{nominated} vs {pod}");
            assert_eq!(st.plugin, names::NODE_RESOURCES_FIT);
        }
    }
}

#[test]
fn a_node_with_room_taken_by_nominated_pods_is_skipped_for_another() {
    let cache = two_nodes();
    nominate(&cache, PodBuilder::new("big").cpu("3").priority(10), "n1");
    // n1 is emptier in the cache, so without the nomination it would win
    // the score; with it, only n2 fits.
    cache.add_bound_pod(info(PodBuilder::new("bound").cpu("1").node_name("n2")));
    let snap = snapshot_of(&cache);
    let r = default_framework()
        .schedule(&info(PodBuilder::new("p").cpu("2")), &snap)
        .expect("fits on n2");
    assert_eq!(r.node.as_ref(), "n2");
}

#[test]
fn nominated_host_ports_and_pod_counts_are_held_too() {
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    nominate(
        &cache,
        PodBuilder::new("web").host_port(8080).priority(1),
        "n1",
    );
    let snap = snapshot_of(&cache);
    let fit = expect_fit_error(
        default_framework().schedule(&info(PodBuilder::new("p").host_port(8080)), &snap),
    );
    assert_eq!(status_of(&fit, "n1").plugin, names::NODE_PORTS);

    let cache = cache_with([node("n1", "4", "8Gi").pods(1).build_spec()]);
    nominate(&cache, PodBuilder::new("one").priority(1), "n1");
    let snap = snapshot_of(&cache);
    let fit = expect_fit_error(default_framework().schedule(&info(PodBuilder::new("p")), &snap));
    assert_eq!(status_of(&fit, "n1").reasons, ["Too many pods"]);
}

#[test]
fn pass_one_sees_nominated_pods_in_inter_pod_affinity_counts() {
    // A nominated app=web pod on n1: a pod anti-affine to app=web per host
    // must avoid n1 (pass 1 re-runs InterPodAffinity's PreFilter with it).
    let cache = two_nodes();
    nominate(
        &cache,
        PodBuilder::new("web").label("app", "web").priority(10),
        "n1",
    );
    let snap = snapshot_of(&cache);
    let anti = PodBuilder::new("p").pod_affinity(
        PodAffinityKind::RequiredAnti,
        pod_affinity_term("app", "In", &["web"], HOSTNAME),
    );
    let fw = framework_with(&Profile::only(&[(names::INTER_POD_AFFINITY, 1)]));
    let (r, detail) = fw.schedule_detailed(&info(anti), &snap);
    assert_eq!(r.expect("n2 is free").node.as_ref(), "n2");
    let (_, st) = detail
        .rejected
        .iter()
        .find(|(n, _)| n.as_ref() == "n1")
        .expect("n1 rejected");
    assert_eq!(st.code, Code::Unschedulable);
    assert_eq!(st.reasons, [REASON_ANTI_AFFINITY_RULES_NOT_MATCH]);
}

#[test]
fn pass_two_refuses_what_fits_only_thanks_to_a_nominated_pod() {
    // Required affinity to app=web per host: the only web pod is merely
    // nominated to n1. Pass 1 passes with it, pass 2 (without it) fails:
    // a nominated pod may land elsewhere, so it cannot satisfy affinity.
    let cache = two_nodes();
    nominate(
        &cache,
        PodBuilder::new("web").label("app", "web").priority(10),
        "n1",
    );
    let snap = snapshot_of(&cache);
    let follower = PodBuilder::new("p").pod_affinity(
        PodAffinityKind::Required,
        pod_affinity_term("app", "In", &["web"], HOSTNAME),
    );
    let fw = framework_with(&Profile::only(&[(names::INTER_POD_AFFINITY, 1)]));
    let fit = expect_fit_error(fw.schedule(&info(follower), &snap));
    for n in ["n1", "n2"] {
        assert_eq!(
            status_of(&fit, n).reasons,
            [REASON_AFFINITY_RULES_NOT_MATCH],
            "{n}"
        );
    }
}

#[test]
fn a_pod_is_not_counted_against_itself_and_its_nominated_node_is_tried_first() {
    let cache = two_nodes();
    // n1 is busier, so scoring would prefer n2; the pod's nomination to
    // n1 wins without scoring (upstream evaluateNominatedNode).
    cache.add_bound_pod(info(PodBuilder::new("bound").cpu("1").node_name("n1")));
    let me = PodBuilder::new("me").cpu("3").priority(100);
    nominate(&cache, me.clone(), "n1");
    let snap = snapshot_of(&cache);
    let r = default_framework()
        .schedule(&info(me.clone().nominated_node_name("n1")), &snap)
        .expect("its own nomination does not block it");
    assert_eq!(r.node.as_ref(), "n1");
    assert_eq!((r.evaluated, r.feasible), (1, 1), "only the nominated node");

    // A nominated node that no longer fits: the full search runs.
    cache.add_bound_pod(info(PodBuilder::new("more").cpu("2").node_name("n1")));
    let snap = snapshot_of(&cache);
    let r = default_framework()
        .schedule(&info(me.nominated_node_name("n1")), &snap)
        .expect("fits on n2");
    assert_eq!(r.node.as_ref(), "n2");
    assert_eq!(r.evaluated, 2);
}

#[test]
fn nominations_end_when_the_pod_is_placed_bound_or_deleted() {
    let cache = two_nodes();
    let nominated = |c: &NodeCache| c.nominated_pods("n1").len();
    nominate(&cache, PodBuilder::new("a"), "n1");
    nominate(&cache, PodBuilder::new("b"), "n1");
    nominate(&cache, PodBuilder::new("c"), "n1");
    assert_eq!(nominated(&cache), 3);
    // Re-nominating moves it.
    nominate(&cache, PodBuilder::new("c"), "n2");
    assert_eq!(nominated(&cache), 2);
    assert_eq!(cache.nominated_pods("n2").len(), 1);

    cache.assume(info(PodBuilder::new("a")), "n1").unwrap();
    assert_eq!(nominated(&cache), 1, "assume drops it");
    assert!(cache.forget("uid-a"));
    assert_eq!(nominated(&cache), 1, "a failed binding does not restore it");
    cache.add_bound_pod(info(PodBuilder::new("b").node_name("n2")));
    assert_eq!(nominated(&cache), 0, "bound elsewhere");
    assert!(!cache.remove_pod("uid-c"), "c held no room on a node");
    assert!(cache.nominated_pods("n2").is_empty(), "deleted");
    assert!(!cache.clear_nominated("uid-c"));

    // A placed pod is not nominated again.
    nominate(&cache, PodBuilder::new("b"), "n1");
    assert_eq!(nominated(&cache), 0);

    // Snapshots see nominations only after a refresh.
    nominate(&cache, PodBuilder::new("d"), "n1");
    let mut snap = snapshot_of(&cache);
    assert!(snap.has_nominated_pods());
    assert!(cache.clear_nominated("uid-d"));
    assert_eq!(snap.nominated_pods_for_node("n1").len(), 1, "stable view");
    cache.update_snapshot(&mut snap);
    assert!(!snap.has_nominated_pods());
}

#[test]
fn with_nominations_about_rejections_still_carry_their_reasons() {
    // A nomination anywhere turns the hot path off: every node goes through
    // the nominated-pods check, whose rejections by NodeResourcesFit are
    // recorded without their reasons until the FitError reads them.
    let cache = two_nodes();
    nominate(&cache, PodBuilder::new("big").cpu("3").priority(10), "n1");
    cache.add_bound_pod(info(PodBuilder::new("bound").cpu("3").node_name("n2")));
    let snap = snapshot_of(&cache);
    let pod = info(
        PodBuilder::new("p")
            .cpu("2")
            .request("example.com/gpu", "1"),
    );
    let fit = expect_fit_error(default_framework().schedule(&pod, &snap));
    // n1: pass 1 (with the nominee) fails on cpu; n2 (no nominee): cpu
    // short, and the GPU is more than the node has at all.
    let n1 = status_of(&fit, "n1");
    assert_eq!(
        n1.reasons,
        ["Insufficient cpu", "Insufficient example.com/gpu"]
    );
    let n2 = status_of(&fit, "n2");
    assert_eq!(
        n2.reasons,
        ["Insufficient cpu", "Insufficient example.com/gpu"]
    );
    assert_eq!(n2.plugin, names::NODE_RESOURCES_FIT);
    assert_eq!(n2.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(
        fit.to_string(),
        "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient example.com/gpu."
    );
}
