//! `KubeSchedulerConfiguration` loading: upstream-style files, merging with
//! the default plugins as upstream does (checked through the resulting
//! `Framework`), plugin args through a test plugin, and every refusal with
//! its exact field path.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_scheduler::config::{self, ConfigError, SchedulerConfig};
use flotilla_scheduler::framework::{
    PluginHandle, ProfileMap, Registry, ScheduleError, decode_args,
};
use flotilla_scheduler::{Framework, Profile};
use flotilla_shared::WorkloadClass;
use flotilla_shared::framework::{CycleState, ExtensionPoint, Plugin, ScorePlugin, Status};
use flotilla_shared::testing::PodBuilder;
use flotilla_shared::{NodeInfo, PodInfo};

use crate::{cache_with, node, snapshot_of};

const HEAD: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

/// `HEAD` + `body`, parsed with the in-tree plugins.
fn parse(body: &str) -> Result<SchedulerConfig, ConfigError> {
    config::parse(&format!("{HEAD}{body}"), "sched.yaml")
}

fn framework(cfg: &SchedulerConfig, i: usize) -> Framework {
    Framework::new(&cfg.profiles[i], &Registry::in_tree()).expect("validated profile builds")
}

/// The error of a config that must be refused.
fn refused(body: &str) -> ConfigError {
    match parse(body) {
        Ok(cfg) => panic!("expected an error for:\n{body}\ngot {cfg:?}"),
        Err(e) => e,
    }
}

#[test]
fn a_full_upstream_style_configuration_parses_with_every_field() {
    let cfg = parse(
        r#"
parallelism: 8
leaderElection:
  leaderElect: true
  leaseDuration: 30s
  renewDeadline: 20s
  retryPeriod: 1.5s
  resourceLock: leases
  resourceName: flotilla
  resourceNamespace: flotilla-system
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
  acceptContentTypes: application/json
  contentType: application/json
  qps: 100
  burst: 200
enableProfiling: false
enableContentionProfiling: false
percentageOfNodesToScore: 40
percentageOfPlacementsToScore: 20
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
delayCacheUntilActive: true
extenders: []
profiles:
  - schedulerName: default-scheduler
    percentageOfNodesToScore: 60
    percentageOfPlacementsToScore: 50
    plugins:
      preEnqueue:
        enabled:
          - name: SchedulingGates
      queueSort:
        enabled:
          - name: PrioritySort
      preFilter:
        enabled:
          - name: NodeAffinity
      filter:
        disabled:
          - name: NodePorts
      postFilter:
        enabled:
          - name: DefaultPreemption
      preScore: {}
      score:
        enabled:
          - name: NodeResourcesFit
            weight: 5
      reserve:
        enabled:
          - name: VolumeBinding
      permit: {}
      preBind:
        enabled:
          - name: VolumeBinding
      bind:
        enabled:
          - name: DefaultBinder
      postBind: {}
      multiPoint:
        disabled:
          - name: NodeResourcesBalancedAllocation
      placementGenerate: {}
      placementScore: {}
      placementFeasible: {}
      podGroupPostFilter:
        disabled:
          - name: "*"
    pluginConfig:
      - name: DefaultPreemption
        args:
          apiVersion: kubescheduler.config.k8s.io/v1
          kind: DefaultPreemptionArgs
          minCandidateNodesPercentage: 10
          minCandidateNodesAbsolute: 100
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: LeastAllocated
            resources:
              - name: cpu
                weight: 1
              - name: memory
                weight: 1
  - schedulerName: batch-scheduler
    workloadClass: batch
    plugins:
      queueSort:
        enabled:
          - name: PrioritySort
"#,
    )
    .expect("a valid configuration");

    assert_eq!(cfg.parallelism, 8);
    assert_eq!(cfg.percentage_of_nodes_to_score, 40);
    assert_eq!(cfg.pod_initial_backoff, Duration::from_secs(2));
    assert_eq!(cfg.pod_max_backoff, Duration::from_secs(20));
    let le = &cfg.leader_election;
    assert!(le.leader_elect);
    assert_eq!(le.lease_duration, Duration::from_secs(30));
    assert_eq!(le.renew_deadline, Duration::from_secs(20));
    assert_eq!(le.retry_period, Duration::from_millis(1500));
    assert_eq!(
        (
            le.resource_lock.as_str(),
            le.resource_name.as_str(),
            le.resource_namespace.as_str()
        ),
        ("leases", "flotilla", "flotilla-system")
    );
    let cc = &cfg.client_connection;
    assert_eq!(cc.kubeconfig, "/etc/kubernetes/scheduler.conf");
    assert_eq!(cc.accept_content_types, "application/json");
    assert_eq!(cc.content_type, "application/json");
    assert!((cc.qps - 100.0).abs() < f32::EPSILON);
    assert_eq!(cc.burst, 200);
    assert!(!cfg.enable_profiling && !cfg.enable_contention_profiling);
    assert!(cfg.delay_cache_until_active);

    assert_eq!(cfg.profiles.len(), 2);
    let p0 = &cfg.profiles[0];
    assert_eq!(p0.percentage_of_nodes_to_score, 60);
    assert_eq!(p0.workload_class, None);
    // Args are kept without apiVersion/kind; not-implemented plugins' args
    // are dropped.
    assert_eq!(p0.plugin_config.len(), 2);
    assert_eq!(
        p0.plugin_config["DefaultPreemption"]["minCandidateNodesAbsolute"],
        100
    );
    assert_eq!(
        p0.plugin_config["NodeResourcesFit"]["scoringStrategy"]["type"],
        "LeastAllocated"
    );
    let fw = framework(&cfg, 0);
    assert_eq!(fw.percentage_of_nodes_to_score(), 60);
    assert_eq!(
        fw.enabled_at(ExtensionPoint::Filter),
        [
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "GpuShare"
        ],
        "NodePorts disabled at filter only"
    );
    assert_eq!(
        fw.enabled_at(ExtensionPoint::PreFilter),
        [
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "GpuShare"
        ],
        "upstream's default PreFilter plugins, then Flotilla's GpuShare"
    );
    assert_eq!(
        fw.score_weights(),
        [
            ("NodeResourcesFit", 5),
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("ImageLocality", 1),
            ("GpuShare", 5)
        ],
        "the score entry comes first with its weight; BalancedAllocation disabled"
    );
    assert_eq!(
        fw.enabled_at(ExtensionPoint::PostFilter),
        ["DefaultPreemption"],
        "named at postFilter and in the defaults: enabled once"
    );
    assert!(fw.preemption().is_some());
    assert_eq!(
        fw.enabled_at(ExtensionPoint::PreEnqueue),
        ["SchedulingGates", "DefaultPreemption", "GangScheduling"],
        "multiPoint enables DefaultPreemption at PreEnqueue, as upstream since 1.32, and \
         GangScheduling, as upstream with GenericWorkload"
    );

    // The second profile: defaults, the global percentage, its class.
    let p1 = &cfg.profiles[1];
    assert_eq!(p1.scheduler_name, "batch-scheduler");
    assert_eq!(p1.percentage_of_nodes_to_score, 40);
    assert_eq!(p1.workload_class, Some(WorkloadClass::Batch));
    // Upstream requires the same queueSort set in every profile; naming
    // the default explicitly changes nothing else.
    let (fw1, default_fw) = (
        framework(&cfg, 1),
        framework(&SchedulerConfig::default(), 0),
    );
    for point in ExtensionPoint::ALL {
        assert_eq!(
            fw1.enabled_at(point),
            default_fw.enabled_at(point),
            "{point:?}"
        );
    }
    assert_eq!(fw1.score_weights(), default_fw.score_weights());
    assert_eq!(
        served_classes(&cfg),
        [
            ("default-scheduler".to_owned(), None),
            ("batch-scheduler".to_owned(), Some(WorkloadClass::Batch))
        ]
    );
    let q = cfg.queue_config();
    assert_eq!(
        (q.backoff.initial, q.backoff.max),
        (Duration::from_secs(2), Duration::from_secs(20))
    );
    assert_eq!(
        cfg.validate_with(&Registry::in_tree())
            .map_err(|e| e.to_string()),
        Ok(())
    );
}

#[test]
fn an_empty_configuration_gives_upstream_defaults() {
    let cfg = parse("").expect("apiVersion and kind suffice");
    assert_eq!(cfg, SchedulerConfig::default());
    assert_eq!(cfg.parallelism, 16);
    assert_eq!(cfg.percentage_of_nodes_to_score, 0);
    assert_eq!(cfg.pod_initial_backoff, Duration::from_secs(1));
    assert_eq!(cfg.pod_max_backoff, Duration::from_secs(10));
    let le = &cfg.leader_election;
    assert!(le.leader_elect);
    assert_eq!(
        (le.lease_duration, le.renew_deadline, le.retry_period),
        (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2)
        )
    );
    assert_eq!(
        (
            le.resource_lock.as_str(),
            le.resource_name.as_str(),
            le.resource_namespace.as_str()
        ),
        ("leases", "kube-scheduler", "kube-system")
    );
    let cc = &cfg.client_connection;
    assert_eq!(cc.content_type, "application/vnd.kubernetes.protobuf");
    assert!((cc.qps - 50.0).abs() < f32::EPSILON);
    assert_eq!(cc.burst, 100);
    assert_eq!(cfg.profiles, [Profile::default()]);
    assert!(cfg.enable_profiling && cfg.enable_contention_profiling);

    // The same in JSON; explicit zeros take the defaults as upstream.
    let json = config::parse(
        r#"{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaseDuration": "0s"}, "clientConnection": {"qps": 0, "burst": 0},
            "profiles": null}"#,
        "sched.json",
    )
    .expect("valid JSON");
    assert_eq!(json, SchedulerConfig::default());
}

#[test]
fn a_single_unnamed_profile_is_the_default_scheduler_but_two_need_names() {
    let cfg = parse("profiles:\n- percentageOfNodesToScore: 10\n").expect("valid");
    assert_eq!(cfg.profiles[0].scheduler_name, "default-scheduler");
    let e = refused("profiles:\n- schedulerName: a\n- percentageOfNodesToScore: 10\n");
    assert_eq!(e.path(), "profiles[1].schedulerName");
}

// ---- merging with the defaults (upstream mergePlugins + multiPoint expansion)

#[test]
fn disabling_a_default_score_plugin_removes_it_from_score_only() {
    let cfg = parse(
        "profiles:\n- plugins:\n    score:\n      disabled:\n      - name: NodeResourcesBalancedAllocation\n      - name: TaintToleration\n",
    )
    .expect("valid");
    let fw = framework(&cfg, 0);
    assert_eq!(
        fw.score_weights(),
        [
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("ImageLocality", 1),
            ("GpuShare", 5)
        ]
    );
    assert!(
        fw.enabled_at(ExtensionPoint::Filter)
            .contains(&"TaintToleration"),
        "disabled at score only"
    );

    let cfg = parse(
        "profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: TaintToleration\n",
    )
    .expect("valid");
    let fw = framework(&cfg, 0);
    assert!(
        !fw.enabled_at(ExtensionPoint::Filter)
            .contains(&"TaintToleration")
    );
    assert!(
        !fw.enabled_at(ExtensionPoint::Score)
            .contains(&"TaintToleration")
    );
}

#[test]
fn re_enabling_a_default_keeps_its_position_and_takes_the_new_weight() {
    let cfg = parse(
        "profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: NodeResourcesFit\n        weight: 10\n",
    )
    .expect("valid");
    let fw = framework(&cfg, 0);
    assert_eq!(
        fw.score_weights(),
        [
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 10),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
            ("GpuShare", 5)
        ]
    );
    // Upstream replaces the default entry by the user's: without a weight
    // the plugin gets 1, not its default 3.
    let cfg = parse(
        "profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: TaintToleration\n",
    )
    .expect("valid");
    assert_eq!(
        framework(&cfg, 0).score_weights()[0],
        ("TaintToleration", 1)
    );
}

#[test]
fn multi_point_star_disabled_leaves_only_the_explicit_plugins() {
    for plugins in [
        // PrioritySort and DefaultBinder at their own points...
        "    multiPoint:\n      disabled:\n      - name: \"*\"\n    queueSort:\n      enabled:\n      - name: PrioritySort\n    filter:\n      enabled:\n      - name: NodeName\n    bind:\n      enabled:\n      - name: DefaultBinder\n",
        // ...or through multiPoint after the "*".
        "    multiPoint:\n      enabled:\n      - name: PrioritySort\n      - name: DefaultBinder\n      disabled:\n      - name: \"*\"\n    filter:\n      enabled:\n      - name: NodeName\n",
    ] {
        let cfg = parse(&format!("profiles:\n- plugins:\n{plugins}")).expect("valid");
        let fw = framework(&cfg, 0);
        assert_eq!(
            fw.enabled_at(ExtensionPoint::Filter),
            ["NodeName"],
            "{plugins}"
        );
        assert_eq!(fw.enabled_at(ExtensionPoint::QueueSort), ["PrioritySort"]);
        assert_eq!(fw.enabled_at(ExtensionPoint::Bind), ["DefaultBinder"]);
        assert!(fw.enabled_at(ExtensionPoint::PreFilter).is_empty());
        assert!(fw.score_weights().is_empty());
    }
}

#[test]
fn a_weight_at_score_beats_multi_point_and_runs_first() {
    let cfg = parse(
        "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeAffinity\n        weight: 7\n    multiPoint:\n      enabled:\n      - name: NodeAffinity\n        weight: 4\n",
    )
    .expect("valid");
    let fw = framework(&cfg, 0);
    assert_eq!(
        fw.score_weights(),
        [
            ("NodeAffinity", 7),
            ("TaintToleration", 3),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
            ("GpuShare", 5)
        ]
    );
    // multiPoint still places NodeAffinity at its other points.
    assert!(
        fw.enabled_at(ExtensionPoint::Filter)
            .contains(&"NodeAffinity")
    );
}

#[test]
fn enabling_a_plugin_twice_is_refused() {
    let e = refused(
        "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: NodeName\n      - name: NodePorts\n      - name: NodeName\n",
    );
    assert_eq!(e.path(), "profiles[0].plugins.filter.enabled[2].name");
    assert_eq!(
        e.message(),
        "plugin \"NodeName\" already registered as \"FilterPlugin\""
    );
    // Twice in multiPoint: the merge keeps both, the framework refuses
    // (upstream's "already registered" from the multiPoint expansion).
    let e = refused(
        "profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: NodePorts\n      - name: NodePorts\n",
    );
    assert_eq!(e.path(), "profiles[0].plugins");
    assert_eq!(
        e.message(),
        "plugin \"NodePorts\" already registered as \"PreFilterPlugin\""
    );
}

#[test]
fn a_plugin_at_a_point_it_does_not_implement_is_refused() {
    let e = refused("profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeName\n");
    assert_eq!(e.path(), "profiles[0].plugins.score.enabled[0].name");
    assert_eq!(
        e.message(),
        "plugin \"NodeName\" does not extend ScorePlugin plugin"
    );
    // Through multiPoint it only lands where it fits.
    let cfg =
        parse("profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: NodeName\n")
            .expect("valid");
    assert_eq!(
        framework(&cfg, 0)
            .enabled_at(ExtensionPoint::Filter)
            .iter()
            .filter(|n| **n == "NodeName")
            .count(),
        1
    );
}

#[test]
fn disabling_upstream_plugins_is_always_accepted() {
    // ImageLocality is Flotilla's; EBSLimits is an upstream name removed
    // from v1 (nothing to run either way).
    let cfg = parse(
        "profiles:\n- plugins:\n    score:\n      disabled:\n      - name: ImageLocality\n      - name: EBSLimits\n",
    )
    .expect("disabling upstream plugins is always fine");
    let want: Vec<(&str, i64)> = framework(&SchedulerConfig::default(), 0)
        .score_weights()
        .into_iter()
        .filter(|(n, _)| *n != "ImageLocality")
        .collect();
    assert_eq!(framework(&cfg, 0).score_weights(), want);
}

#[test]
fn not_implemented_plugins_are_accepted_and_left_out() {
    let cfg = parse(
        "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: DynamicResources\n      - name: NodeVolumeLimits\n    postFilter:\n      enabled:\n      - name: DefaultPreemption\n    multiPoint:\n      disabled:\n      - name: VolumeZone\n",
    )
    .expect("valid");
    let fw = framework(&cfg, 0);
    // The plugins enabled at the point come first, then multiPoint's.
    let want: Vec<&str> = std::iter::once("NodeVolumeLimits")
        .chain(
            framework(&SchedulerConfig::default(), 0)
                .enabled_at(ExtensionPoint::Filter)
                .iter()
                .copied()
                .filter(|n| !["VolumeZone", "NodeVolumeLimits"].contains(n)),
        )
        .collect();
    assert_eq!(
        fw.enabled_at(ExtensionPoint::Filter),
        want,
        "DynamicResources left out; NodeVolumeLimits enabled once; VolumeZone really disabled"
    );
    assert!(
        !fw.enabled_at(ExtensionPoint::PreFilter)
            .contains(&"VolumeZone")
    );
    assert_eq!(
        fw.enabled_at(ExtensionPoint::PostFilter),
        ["DefaultPreemption"],
        "DefaultPreemption is implemented: enabled at postFilter"
    );
}

// ---- refusals, each with its exact path

#[test]
fn bad_input_is_refused_with_the_exact_path() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "parallelizm: 4\n",
            "parallelizm",
            "unknown field `parallelizm`",
        ),
        ("parallelism: 0\n", "parallelism", "greater than zero"),
        ("parallelism: -3\n", "parallelism", "greater than zero"),
        (
            "parallelism: many\n",
            "parallelism",
            "invalid type: string \"many\"",
        ),
        (
            "percentageOfNodesToScore: 101\n",
            "percentageOfNodesToScore",
            "not in valid range [0-100]",
        ),
        (
            "percentageOfPlacementsToScore: -1\n",
            "percentageOfPlacementsToScore",
            "not in valid range",
        ),
        (
            "podInitialBackoffSeconds: 0\n",
            "podInitialBackoffSeconds",
            "must be greater than 0",
        ),
        (
            "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 4\n",
            "podMaxBackoffSeconds",
            "greater than or equal to podInitialBackoffSeconds",
        ),
        (
            "leaderElection:\n  resourceLock: endpoints\n",
            "leaderElection.resourceLock",
            "resourceLock value must be \"leases\"",
        ),
        (
            "leaderElection:\n  leaseDuration: 5s\n",
            "leaderElection.leaseDuration",
            "must be greater than renewDeadline",
        ),
        (
            "leaderElection:\n  retryPeriod: -1s\n",
            "leaderElection.retryPeriod",
            "must be greater than zero",
        ),
        (
            "leaderElection:\n  retryPeriod: 2x\n",
            "leaderElection.retryPeriod",
            "time: unknown unit \"x\" in duration \"2x\"",
        ),
        (
            "leaderElection:\n  leaderElect: yes\n",
            "leaderElection.leaderElect",
            "invalid type: string \"yes\"",
        ),
        (
            "leaderElection:\n  leaderElect: false\n  resourceLock: endpoints\n  leaseDurationn: 1s\n",
            "leaderElection.leaseDurationn",
            "unknown field",
        ),
        (
            "clientConnection:\n  burst: -1\n",
            "clientConnection.burst",
            "must be non-negative",
        ),
        (
            "extenders:\n- urlPrefix: 127.0.0.1:8888\n  filterVerb: filter\n",
            "extenders[0].urlPrefix",
            "no scheme",
        ),
        (
            "extenders:\n- urlPrefix: x\n  bogus: 1\n",
            "extenders[0].bogus",
            "unknown field `bogus`",
        ),
        (
            "profiles: []\nprofile: []\n",
            "profile",
            "unknown field `profile`",
        ),
        (
            "profiles:\n- schedulerName: a\n- schedulerName: b\n- schedulerName: a\n",
            "profiles[2].schedulerName",
            "duplicate value \"a\" (also profiles[0].schedulerName)",
        ),
        (
            "profiles:\n- schedulerName: \"\"\n",
            "profiles[0].schedulerName",
            "required",
        ),
        (
            "profiles:\n- percentageOfNodesToScore: -1\n",
            "profiles[0].percentageOfNodesToScore",
            "not in valid range",
        ),
        (
            "profiles:\n- workloadClass: interactive\n",
            "profiles[0].workloadClass",
            "\"interactive\" is not one of \"online\", \"batch\"",
        ),
        (
            "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeAffinity\n      - name: Foo\n",
            "profiles[0].plugins.score.enabled[1].name",
            "unknown plugin \"Foo\"",
        ),
        (
            "profiles:\n- plugins:\n    filter:\n      disabled:\n      - name: NodePort\n",
            "profiles[0].plugins.filter.disabled[0].name",
            "unknown plugin \"NodePort\"",
        ),
        (
            "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: EBSLimits\n",
            "profiles[0].plugins.filter.enabled[0].name",
            "was invalid in version \"kubescheduler.config.k8s.io/v1\"",
        ),
        (
            "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: \"*\"\n",
            "profiles[0].plugins.filter.enabled[0].name",
            "\"*\" may only be used in disabled",
        ),
        (
            "profiles:\n- plugins:\n    filter:\n      enabled:\n      - weight: 2\n",
            "profiles[0].plugins.filter.enabled[0].name",
            "required",
        ),
        (
            "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeAffinity\n        weight: -2\n",
            "profiles[0].plugins.score.enabled[0].weight",
            "must not be negative",
        ),
        (
            "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeAffinity\n        weight: 3000000000\n",
            "profiles[0].plugins.score.enabled[0].weight",
            "expected i32",
        ),
        (
            "profiles:\n- plugins:\n    placementScore:\n      enabled:\n      - name: NodeAffinity\n",
            "profiles[0].plugins.placementScore.enabled[0].name",
            "no pod-group scheduling",
        ),
        (
            "profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: PrioritySort\n",
            "profiles[0].plugins",
            "no queue sort plugin is enabled",
        ),
        (
            "profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: DefaultBinder\n",
            "profiles[0].plugins",
            "at least one bind plugin is needed",
        ),
        (
            "profiles:\n- schedulerName: a\n- schedulerName: b\n  plugins:\n    queueSort:\n      enabled:\n      - name: PrioritySort\n      disabled:\n      - name: \"*\"\n",
            "profiles[1].plugins.queueSort",
            "must be the same for all profiles",
        ),
        (
            "profiles:\n- pluginConfig:\n  - name: NodeAffinity\n  - name: NodeResourcesFit\n  - name: NodeAffinity\n",
            "profiles[0].pluginConfig[2]",
            "duplicate value \"NodeAffinity\" (also pluginConfig[0])",
        ),
        (
            "profiles:\n- pluginConfig:\n  - name: Foo\n    args: {}\n",
            "profiles[0].pluginConfig[0].name",
            "unknown plugin \"Foo\"",
        ),
        (
            "profiles:\n- pluginConfig:\n  - name: GCEPDLimits\n",
            "profiles[0].pluginConfig[0]",
            "was invalid in version",
        ),
        (
            "profiles:\n- pluginConfig:\n  - name: NodeAffinity\n    args:\n      kind: NodeResourcesFitArgs\n",
            "profiles[0].pluginConfig[0].args.kind",
            "expected \"NodeAffinityArgs\", got \"NodeResourcesFitArgs\"",
        ),
        (
            "profiles:\n- pluginConfig:\n  - name: NodeAffinity\n    args:\n      apiVersion: kubescheduler.config.k8s.io/v1beta3\n",
            "profiles[0].pluginConfig[0].args.apiVersion",
            "expected \"kubescheduler.config.k8s.io/v1\"",
        ),
        (
            "profiles:\n- pluginConfig:\n  - name: NodeAffinity\n    args: [1]\n",
            "profiles[0].pluginConfig[0].args",
            "expected an object (NodeAffinityArgs), got a list",
        ),
    ];
    for (body, path, message) in cases {
        let e = refused(body);
        assert_eq!(e.path(), *path, "path for:\n{body}\n{e}");
        assert!(
            e.message().contains(message),
            "message for:\n{body}\nwant it to contain {message:?}, got {e}"
        );
        assert_eq!(e.file(), "sched.yaml");
        assert!(
            e.to_string().starts_with(&format!("sched.yaml: {path}: ")),
            "{e}"
        );
    }
}

#[test]
fn api_version_and_kind_are_required_and_old_versions_are_named_as_removed() {
    let e =
        config::parse("kind: KubeSchedulerConfiguration\n", "s.yaml").expect_err("no apiVersion");
    assert_eq!(
        (e.path(), e.message().as_str()),
        (
            "apiVersion",
            "required: set it to \"kubescheduler.config.k8s.io/v1\""
        )
    );
    let e = config::parse(
        "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\nprofiles:\n- pluginConfig: []\n  oldField: 1\n",
        "s.yaml",
    )
    .expect_err("v1beta3");
    assert_eq!(e.path(), "apiVersion");
    assert!(
        e.message()
            .contains("removed from kube-scheduler in Kubernetes 1.29"),
        "{e}"
    );
    let e = config::parse(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeletConfiguration\n",
        "s.yaml",
    )
    .expect_err("wrong kind");
    assert_eq!(e.path(), "kind");
    let e = config::parse("- a\n- b\n", "s.yaml").expect_err("a list");
    assert_eq!(
        (e.path(), e.message().as_str()),
        (
            "",
            "expected a KubeSchedulerConfiguration object, got a list"
        )
    );
}

#[test]
fn syntax_errors_give_line_and_column() {
    let e = config::parse(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n  - schedulerName: a\n   plugins: [\n",
        "sched.yaml",
    )
    .expect_err("bad indentation");
    let ConfigError::Syntax { line, column, .. } = &e else {
        panic!("expected a syntax error, got {e:?}");
    };
    assert_eq!((*line, *column), (5, 4));
    assert!(
        e.to_string().starts_with("sched.yaml: line 5 column 4: "),
        "{e}"
    );

    let e =
        config::parse("apiVersion: a\napiVersion: b\n", "sched.yaml").expect_err("duplicate key");
    assert!(matches!(e, ConfigError::Syntax { line: 2, .. }), "{e:?}");
    assert!(e.message().contains("duplicate mapping key"), "{e}");

    let e = config::parse(
        "{\"apiVersion\": \"kubescheduler.config.k8s.io/v1\",\n \"kind\": }",
        "sched.json",
    )
    .expect_err("bad JSON");
    assert!(
        matches!(
            e,
            ConfigError::Syntax {
                line: 2,
                column: 10,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn load_file_names_the_file() {
    let dir = std::env::temp_dir().join(format!("flotilla-config-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("sched.yaml");
    std::fs::write(&path, format!("{HEAD}parallelism: 0\n")).expect("write");
    let e = config::load_file(&path).expect_err("parallelism 0");
    assert_eq!(e.file(), path.display().to_string());
    assert_eq!(e.path(), "parallelism");
    std::fs::write(&path, format!("{HEAD}parallelism: 3\n")).expect("write");
    assert_eq!(config::load_file(&path).expect("valid").parallelism, 3);
    let missing = dir.join("missing.yaml");
    let e = config::load_file(&missing).expect_err("missing");
    assert!(matches!(e, ConfigError::Read { .. }), "{e:?}");
    std::fs::remove_dir_all(&dir).ok();
}

// ---- plugin args, through a test plugin decoded by `decode_args`

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
enum Mode {
    #[default]
    LeastAllocated,
    MostAllocated,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct Resource {
    name: String,
    weight: i64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct DemoArgs {
    mode: Mode,
    resources: Vec<Resource>,
}

/// A Score plugin whose factory records the args it was built with.
struct Demo;

impl Plugin for Demo {
    fn name(&self) -> &'static str {
        "Demo"
    }
}

impl ScorePlugin for Demo {
    fn score(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Result<i64, Status> {
        Ok(0)
    }
}

type Seen = Arc<Mutex<Vec<DemoArgs>>>;

fn demo_registry() -> (Registry, Seen) {
    let seen: Seen = Arc::default();
    let mut r = Registry::in_tree();
    let s = seen.clone();
    r.register(
        "Demo",
        Arc::new(move |args| {
            let a: DemoArgs = decode_args(args, "DemoArgs")?;
            s.lock().expect("lock").push(a);
            let p = Arc::new(Demo);
            Ok(PluginHandle::new(p.clone()).score(p))
        }),
    )
    .expect("new name");
    (r, seen)
}

fn demo_config(args: &str) -> String {
    format!(
        "{HEAD}profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: Demo\n        weight: 4\n  pluginConfig:\n  - name: NodeAffinity\n  - name: Demo\n    args:\n{args}"
    )
}

#[test]
fn args_decode_with_or_without_api_version_and_kind() {
    let want = DemoArgs {
        mode: Mode::MostAllocated,
        resources: vec![Resource {
            name: "cpu".into(),
            weight: 2,
        }],
    };
    for args in [
        "      apiVersion: kubescheduler.config.k8s.io/v1\n      kind: DemoArgs\n      mode: MostAllocated\n      resources:\n      - name: cpu\n        weight: 2\n",
        "      mode: MostAllocated\n      resources:\n      - name: cpu\n        weight: 2\n",
    ] {
        let (registry, seen) = demo_registry();
        let cfg = config::parse_with(&demo_config(args), "sched.yaml", &registry)
            .unwrap_or_else(|e| panic!("{e}"));
        let got = seen.lock().expect("lock").clone();
        assert!(!got.is_empty());
        assert!(got.iter().all(|a| *a == want), "{got:?}");
        let fw = Framework::new(&cfg.profiles[0], &registry).expect("builds");
        assert_eq!(fw.score_weights().last(), Some(&("Demo", 4)));
        assert_eq!(
            cfg.validate_with(&registry).map_err(|e| e.to_string()),
            Ok(())
        );
        // The in-tree registry does not know the plugin.
        let e = cfg
            .validate_with(&Registry::in_tree())
            .expect_err("unknown");
        // The demo plugin comes after the defaults in the merged multiPoint.
        let at = flotilla_scheduler::framework::default_multi_point().len();
        assert_eq!(
            e.path(),
            format!("profiles[0].plugins.multiPoint.enabled[{at}].name")
        );
    }
}

#[test]
fn bad_args_are_refused_with_the_path_inside_them() {
    let (registry, _) = demo_registry();
    for (args, path, message) in [
        (
            "      mode: Balanced\n",
            "profiles[0].pluginConfig[1].args.mode",
            "unknown variant `Balanced`",
        ),
        (
            "      resources:\n      - name: cpu\n        weight: heavy\n",
            "profiles[0].pluginConfig[1].args.resources[0].weight",
            "invalid type: string \"heavy\"",
        ),
        (
            "      bogus: 1\n",
            "profiles[0].pluginConfig[1].args.bogus",
            "unknown field `bogus`",
        ),
        (
            "      kind: NodeResourcesFitArgs\n",
            "profiles[0].pluginConfig[1].args.kind",
            "expected \"DemoArgs\"",
        ),
    ] {
        let e =
            config::parse_with(&demo_config(args), "sched.yaml", &registry).expect_err("bad args");
        assert_eq!(e.path(), path, "{e}");
        assert!(e.message().contains(message), "{e}");
        assert!(
            e.to_string().starts_with(&format!("sched.yaml: {path}: ")),
            "{e}"
        );
    }
    // The same check on a configuration changed in code.
    let mut cfg = config::parse_with(&demo_config("      mode: MostAllocated\n"), "s", &registry)
        .expect("valid");
    cfg.profiles[0]
        .plugin_config
        .insert("Demo".into(), serde_json::json!({"mode": "Sideways"}));
    let e = cfg.validate_with(&registry).expect_err("bad args");
    assert_eq!(e.path(), "profiles[0].pluginConfig[0].args.mode", "{e}");
}

// ---- several profiles: each pod runs its own profile's framework

#[test]
fn the_worker_picks_the_framework_by_scheduler_name() {
    let cfg = parse(
        "profiles:\n- schedulerName: default-scheduler\n- schedulerName: tolerant-scheduler\n  workloadClass: batch\n  plugins:\n    filter:\n      disabled:\n      - name: TaintToleration\n",
    )
    .expect("valid");
    let map = ProfileMap::new(&cfg.profiles, &Registry::in_tree()).expect("frameworks");
    let cache = cache_with([node("tainted", "4", "8Gi")
        .taint("dedicated", "gpu", "NoSchedule")
        .build_spec()]);
    let snap = snapshot_of(&cache);
    let pod_of = |name: &str, scheduler: Option<&str>| {
        let mut pod = PodBuilder::new(name).cpu("100m").build();
        pod.spec.as_mut().expect("spec").scheduler_name = scheduler.map(str::to_owned);
        PodInfo::from_pod(Arc::new(pod)).expect("valid pod")
    };

    let plain = pod_of("plain", None);
    let fw = map.for_pod(&plain).expect("default-scheduler profile");
    assert_eq!(fw.profile_name(), "default-scheduler");
    match fw.schedule(&plain, &snap) {
        Err(ScheduleError::Unschedulable(fit)) => assert_eq!(
            fit.to_string(),
            "0/1 nodes are available: 1 node(s) had untolerated taint(s)."
        ),
        other => panic!("the taint must reject the pod: {other:?}"),
    }

    let tolerant = pod_of("tolerant", Some("tolerant-scheduler"));
    let fw = map.for_pod(&tolerant).expect("tolerant-scheduler profile");
    assert_eq!(fw.profile_name(), "tolerant-scheduler");
    let r = fw
        .schedule(&tolerant, &snap)
        .expect("TaintToleration is off here");
    assert_eq!(&*r.node, "tainted");

    assert!(
        map.for_pod(&pod_of("stranger", Some("other-scheduler")))
            .is_none()
    );
}

#[test]
fn the_example_configuration_in_deploy_is_valid() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/examples/scheduler-config.yaml");
    let cfg = config::load_file(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.parallelism, 4);
    assert_eq!(
        served_classes(&cfg),
        [
            ("default-scheduler".to_owned(), None),
            ("batch-scheduler".to_owned(), Some(WorkloadClass::Batch))
        ]
    );
    assert_eq!(
        framework(&cfg, 0).score_weights()[0],
        ("NodeResourcesFit", 2)
    );
    assert_eq!(cfg.profiles[1].percentage_of_nodes_to_score, 30);
}

#[test]
fn two_documents_in_one_file_are_refused_in_operator_terms() {
    let e = refused(&format!("parallelism: 4\n---\n{HEAD}"));
    assert!(
        e.message()
            .contains("a configuration file holds exactly one"),
        "{e}"
    );
    assert!(!e.to_string().contains("from_str_multiple"), "{e}");
}

/// Each served profile's `(schedulerName, workloadClass)`, as the
/// coordinator dispatches by them.
fn served_classes(cfg: &SchedulerConfig) -> Vec<(String, Option<WorkloadClass>)> {
    cfg.served_profiles(&Registry::in_tree())
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|p| (p.scheduler_name, p.workload_class))
        .collect()
}

#[test]
fn the_profiles_fingerprint_tells_configurations_apart_and_not_their_spelling() {
    let fp = |body: &str| Profile::fingerprint_of(&parse(body).expect("valid").profiles);
    let plain = fp("profiles:\n- schedulerName: default-scheduler\n");
    assert_eq!(plain, fp(""), "the same profile, written or defaulted");
    assert_eq!(plain, Profile::fingerprint_of(&[Profile::default()]));
    let ignored = "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      ignoredResourceGroups: [example.com]\n";
    assert_ne!(plain, fp(ignored), "plugin args count");
    assert_eq!(fp(ignored), fp(ignored));
    assert_ne!(
        plain,
        fp(
            "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: ImageLocality\n        weight: 5\n"
        ),
        "weights count"
    );
    assert_ne!(
        plain,
        fp("profiles:\n- schedulerName: other\n"),
        "scheduler names count"
    );
    let two = "profiles:\n- schedulerName: a\n- schedulerName: b\n";
    let swapped = "profiles:\n- schedulerName: b\n- schedulerName: a\n";
    assert_eq!(fp(two), fp(swapped), "profile order does not");
}

#[test]
fn tie_break_is_random_by_default_node_name_on_request_and_checked() {
    use flotilla_scheduler::framework::profile::TieBreak;
    let cfg = parse("profiles:\n- schedulerName: a\n- schedulerName: b\n  tieBreak: NodeName\n")
        .expect("valid");
    assert_eq!(cfg.profiles[0].tie_break, TieBreak::Random);
    assert_eq!(cfg.profiles[1].tie_break, TieBreak::NodeName);
    assert_ne!(
        cfg.profiles[0].fingerprint(),
        Profile {
            scheduler_name: "a".into(),
            tie_break: TieBreak::NodeName,
            ..cfg.profiles[0].clone()
        }
        .fingerprint(),
        "workers of both must not pass for the same profiles"
    );
    let e = refused("profiles:\n- tieBreak: Smallest\n");
    assert_eq!(e.path(), "profiles[0].tieBreak");
    assert!(e.to_string().contains("\"Random\", \"NodeName\""), "{e}");
}
