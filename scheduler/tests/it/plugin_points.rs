//! Each plugin is accepted at exactly the extension points its upstream
//! counterpart implements (the `var _ framework.XPlugin = &P{}` assertions
//! in `pkg/scheduler/framework/plugins/*`, and scheduler-plugins'
//! Coscheduling), refused elsewhere with upstream's message; and a plugin
//! enabled at Score without its PreScore scores as it does with it.

use flotilla_scheduler::Framework;
use flotilla_scheduler::config::{self, SchedulerConfig};
use flotilla_scheduler::framework::Registry;
use flotilla_shared::framework::ExtensionPoint as E;
use flotilla_shared::testing::PodBuilder;

use crate::{bind_in_cache, cache_with, info, node, snapshot_of};

/// Upstream's points per plugin (kube-scheduler 1.35–1.37; the PreEnqueue
/// of DefaultPreemption since 1.32). MaxInstancesPerNode and GpuShare are
/// Flotilla's own.
/// The table of docs/plugins.md.
const UPSTREAM_POINTS: &[(&str, &[E])] = &[
    ("PrioritySort", &[E::QueueSort]),
    ("SchedulingGates", &[E::PreEnqueue]),
    ("NodeUnschedulable", &[E::Filter]),
    ("NodeName", &[E::Filter]),
    ("TaintToleration", &[E::Filter, E::PreScore, E::Score]),
    (
        "NodeAffinity",
        &[E::PreFilter, E::Filter, E::PreScore, E::Score],
    ),
    ("NodePorts", &[E::PreFilter, E::Filter]),
    (
        "NodeResourcesFit",
        &[E::PreFilter, E::Filter, E::PreScore, E::Score],
    ),
    ("VolumeRestrictions", &[E::PreFilter, E::Filter]),
    ("NodeVolumeLimits", &[E::PreFilter, E::Filter]),
    (
        "VolumeBinding",
        &[
            E::PreFilter,
            E::Filter,
            E::PreScore,
            E::Score,
            E::Reserve,
            E::PreBind,
        ],
    ),
    ("VolumeZone", &[E::PreFilter, E::Filter]),
    (
        "PodTopologySpread",
        &[E::PreFilter, E::Filter, E::PreScore, E::Score],
    ),
    (
        "InterPodAffinity",
        &[E::PreFilter, E::Filter, E::PreScore, E::Score],
    ),
    ("NodeResourcesBalancedAllocation", &[E::PreScore, E::Score]),
    ("ImageLocality", &[E::Score]),
    ("DefaultPreemption", &[E::PreEnqueue, E::PostFilter]),
    ("DefaultBinder", &[E::Bind]),
    ("MaxInstancesPerNode", &[E::PreFilter, E::Filter]),
    (
        "GpuShare",
        &[E::PreFilter, E::Filter, E::PreScore, E::Score, E::Reserve],
    ),
    // 1.36's GangScheduling (1.37 replaces Reserve and Permit with the pod
    // group cycle's PlacementFeasible, which has no configuration point).
    ("GangScheduling", &[E::PreEnqueue, E::Reserve, E::Permit]),
    // scheduler-plugins' Coscheduling also implements QueueSort, which
    // Flotilla's does not (docs/plugins.md).
    (
        "Coscheduling",
        &[E::PreFilter, E::PostFilter, E::Reserve, E::Permit],
    ),
];

/// A profile with no default plugin: PrioritySort and DefaultBinder (unless
/// `plugin` is put at their point), and `plugin` enabled at `point` only.
fn alone_at(plugin: &str, points: &[E]) -> String {
    let mut yaml = String::from(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         profiles:\n- schedulerName: default-scheduler\n  plugins:\n    \
         multiPoint: {disabled: [{name: \"*\"}]}\n",
    );
    if !points.contains(&E::QueueSort) {
        yaml.push_str("    queueSort: {enabled: [{name: PrioritySort}]}\n");
    }
    if !points.contains(&E::Bind) {
        yaml.push_str("    bind: {enabled: [{name: DefaultBinder}]}\n");
    }
    for p in points {
        yaml.push_str(&format!(
            "    {}: {{enabled: [{{name: {plugin}}}]}}\n",
            p.config_name()
        ));
    }
    yaml
}

fn parse(yaml: &str) -> Result<SchedulerConfig, config::ConfigError> {
    config::parse(yaml, "sched.yaml")
}

#[test]
fn every_plugin_is_accepted_exactly_where_upstream_implements_it() {
    let registry = Registry::in_tree();
    for (plugin, upstream) in UPSTREAM_POINTS {
        assert!(
            registry.names().contains(plugin),
            "{plugin} is not registered"
        );
        for point in E::ALL {
            let yaml = alone_at(plugin, &[point]);
            match (parse(&yaml), upstream.contains(&point)) {
                (Ok(cfg), true) => {
                    // The framework builds it too (the worker's path).
                    Framework::new(&cfg.profiles[0], &registry)
                        .unwrap_or_else(|e| panic!("{plugin} at {point:?}: {e}"));
                }
                (Err(e), true) => panic!("{plugin} at {point:?} refused: {e}"),
                (Ok(_), false) => panic!("{plugin} at {point:?} accepted; upstream refuses it"),
                (Err(e), false) => {
                    assert_eq!(
                        e.path(),
                        format!(
                            "profiles[0].plugins.{}.enabled[0].name",
                            point.config_name()
                        )
                    );
                    assert_eq!(
                        e.message(),
                        format!(
                            "plugin {plugin:?} does not extend {} plugin",
                            point.plugin_interface()
                        )
                    );
                }
            }
        }
        // All of its points at once: accepted.
        let all = parse(&alone_at(plugin, upstream))
            .unwrap_or_else(|e| panic!("{plugin} at all of {upstream:?}: {e}"));
        Framework::new(&all.profiles[0], &registry).expect("builds");
    }
}

#[test]
fn the_configuration_of_the_issue_is_accepted_and_schedules() {
    // Accepted by kube-scheduler; Flotilla refused NodePorts at preFilter
    // and TaintToleration / NodeResourcesFit at preScore.
    let cfg = parse(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         profiles:\n- schedulerName: default-scheduler\n  plugins:\n\
         \x20   multiPoint: {disabled: [{name: \"*\"}]}\n\
         \x20   queueSort: {enabled: [{name: PrioritySort}]}\n\
         \x20   bind: {enabled: [{name: DefaultBinder}]}\n\
         \x20   preFilter: {enabled: [{name: NodeResourcesFit}, {name: NodePorts}]}\n\
         \x20   filter: {enabled: [{name: NodeResourcesFit}, {name: NodePorts}]}\n\
         \x20   preScore: {enabled: [{name: NodeResourcesFit}, {name: TaintToleration}]}\n\
         \x20   score: {enabled: [{name: NodeResourcesFit}, {name: TaintToleration}]}\n",
    )
    .expect("upstream accepts it");
    let fw = Framework::new(&cfg.profiles[0], &Registry::in_tree()).expect("builds");
    let cache = cache_with([
        node("small", "1", "1Gi").build_spec(),
        node("tainted", "8", "8Gi")
            .taint("slow", "", "PreferNoSchedule")
            .build_spec(),
        node("big", "8", "8Gi").build_spec(),
    ]);
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("p").cpu("2"));
    assert_eq!(&*fw.schedule(&pod, &snap).expect("fits").node, "big");
}

/// The node `plugin` alone at `points` picks for `pod` among `nodes`
/// (the pods of `bound` bound to their node).
fn chosen_with(
    plugin: &str,
    points: &[E],
    nodes: &crate::NodeCacheNodes,
    bound: &[(PodBuilder, &str)],
    pod: &PodBuilder,
) -> String {
    let cfg = parse(&alone_at(plugin, points)).expect("valid");
    let fw = Framework::new(&cfg.profiles[0], &Registry::in_tree()).expect("builds");
    let cache = cache_with(nodes.iter().cloned());
    for (p, n) in bound {
        bind_in_cache(&cache, p.clone(), n);
    }
    let snap = snapshot_of(&cache);
    let r = fw
        .schedule(&info(pod.clone()), &snap)
        .unwrap_or_else(|e| panic!("{plugin} at {points:?}: {e}"));
    r.node.to_string()
}

fn chosen(plugin: &str, points: &[E], nodes: &crate::NodeCacheNodes, pod: &PodBuilder) -> String {
    chosen_with(plugin, points, nodes, &[], pod)
}

#[test]
fn a_score_without_its_prescore_scores_as_with_it() {
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    // ImageLocality has no PreScore upstream: Score alone must work (it
    // failed every pod: "reading PreScoreImageLocality from cycleState").
    let images: crate::NodeCacheNodes = vec![
        node("bare", "4", "4Gi").build_spec(),
        node("cached", "4", "4Gi")
            .image(&["registry/app:v1"], 800 * 1024 * 1024)
            .build_spec(),
    ];
    let pod = PodBuilder::new("p").image("registry/app:v1");
    assert_eq!(
        chosen("ImageLocality", &[E::Score], &images, &pod),
        "cached"
    );

    // Each plugin with a PreScore: the same choice with and without it.
    let tainted: crate::NodeCacheNodes = vec![
        node("a", "4", "4Gi")
            .taint("slow", "", "PreferNoSchedule")
            .build_spec(),
        node("b", "4", "4Gi").build_spec(),
    ];
    let affine: crate::NodeCacheNodes = vec![
        node("a", "4", "4Gi").label("zone", "x").build_spec(),
        node("b", "4", "4Gi").label("zone", "y").build_spec(),
    ];
    let spread = TopologySpreadConstraint {
        max_skew: 1,
        topology_key: "zone".into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        label_selector: Some(LabelSelector {
            match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
            ..LabelSelector::default()
        }),
        ..TopologySpreadConstraint::default()
    };
    let cases: [(&str, &crate::NodeCacheNodes, PodBuilder, &str); 4] = [
        ("TaintToleration", &tainted, PodBuilder::new("p"), "b"),
        (
            "NodeAffinity",
            &affine,
            PodBuilder::new("p").preferred_affinity(5, "zone", "In", &["y"]),
            "b",
        ),
        (
            "NodeResourcesBalancedAllocation",
            &vec![
                node("a", "4", "1Gi").build_spec(),
                node("b", "4", "4Gi").build_spec(),
            ],
            // 1 cpu of 4 and 256 Mi of 1 Gi: the same share of both.
            PodBuilder::new("p").cpu("1").memory("256Mi"),
            "a",
        ),
        (
            "NodeResourcesFit",
            &affine,
            PodBuilder::new("p").cpu("1"),
            "b",
        ),
    ];
    // NodeResourcesFit: node a already holds 2 cpu of 4.
    let busy = [(PodBuilder::new("busy").cpu("2"), "a")];
    for (plugin, nodes, pod, want) in cases {
        let bound: &[(PodBuilder, &str)] = if plugin == "NodeResourcesFit" {
            &busy
        } else {
            &[]
        };
        let with = chosen_with(plugin, &[E::PreScore, E::Score], nodes, bound, &pod);
        let without = chosen_with(plugin, &[E::Score], nodes, bound, &pod);
        assert_eq!(with, want, "{plugin} with its PreScore");
        assert_eq!(without, want, "{plugin} without its PreScore");
    }
    // PodTopologySpread (and InterPodAffinity alike) read what PreScore
    // counted across the cluster: two web pods in zone x, none in y.
    let web = [
        (PodBuilder::new("w1").label("app", "web"), "a"),
        (PodBuilder::new("w2").label("app", "web"), "a"),
    ];
    let pod = PodBuilder::new("p")
        .label("app", "web")
        .spread_constraint(spread);
    for points in [&[E::PreScore, E::Score][..], &[E::Score]] {
        assert_eq!(
            chosen_with("PodTopologySpread", points, &affine, &web, &pod),
            "b",
            "PodTopologySpread at {points:?}"
        );
    }
}
