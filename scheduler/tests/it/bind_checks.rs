//! Bind checks: every in-tree Filter provides one, a profile's served form
//! carries its enabled Filters' checks in Filter order (and names the
//! Filters without one), and a check configured by its plugin's args
//! decides as that Filter does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use flotilla_scheduler::config::{self, SchedulerConfig};
use flotilla_scheduler::framework::PluginHandle;
use flotilla_scheduler::{Framework, Profile, Registry};
use flotilla_shared::framework::{
    BindCheck, BindView, CycleState, ExtensionPoint, FilterPlugin, KeptCounts, Plugin,
    ServedProfile, Status,
};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use flotilla_shared::{NodeInfo, PodInfo, WorkloadClass};

const HEAD: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

fn names(checks: &[Arc<dyn BindCheck>]) -> Vec<&'static str> {
    checks.iter().map(|c| c.name()).collect()
}

fn served(yaml: &str, registry: &Registry) -> Vec<ServedProfile> {
    config::parse_with(&format!("{HEAD}{yaml}"), "test.yaml", registry)
        .unwrap_or_else(|e| panic!("{e}"))
        .served_profiles(registry)
        .expect("the profiles build")
}

/// `check`'s verdict for `pod` on the only node of a one-node view.
fn check_on(check: &dyn BindCheck, pod: &PodInfo, node: NodeInfo) -> Result<(), String> {
    let nodes: HashMap<Arc<str>, NodeInfo> = [(node.spec.name.clone(), node)].into();
    let namespaces = BTreeMap::new();
    let mut kept = KeptCounts::default();
    let node = nodes.values().next().expect("one node");
    let mut view = BindView::new(&nodes, &namespaces, 0, &mut kept);
    check
        .check_bind(pod, node, &mut view)
        .map_err(|r| r.into_owned())
}

#[test]
fn every_in_tree_filter_provides_a_bind_check() {
    let registry = Registry::in_tree();
    let mut filters = 0;
    for name in registry.names() {
        let h = registry
            .build(name, None)
            .expect("builds with default args");
        if h.filter.is_some() {
            filters += 1;
            let check = h
                .bind_check
                .unwrap_or_else(|| panic!("{name} filters but provides no bind check"));
            assert_eq!(check.name(), name);
        } else {
            assert!(h.bind_check.is_none(), "{name} checks without a Filter");
        }
    }
    assert_eq!(
        filters, 14,
        "the thirteen default Filters (GpuShare last) and MaxInstancesPerNode"
    );
}

#[test]
fn the_default_profile_is_served_with_its_filters_checks_in_filter_order() {
    let served = SchedulerConfig::default()
        .served_profiles(&Registry::in_tree())
        .expect("builds");
    assert_eq!(served.len(), 1);
    let p = &served[0];
    assert_eq!(p.scheduler_name, "default-scheduler");
    assert_eq!(p.workload_class, None);
    let fw = Framework::new(&Profile::default(), &Registry::in_tree()).expect("builds");
    assert_eq!(names(&p.bind_checks), fw.enabled_at(ExtensionPoint::Filter));
    assert_eq!(
        names(&p.bind_checks),
        [
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "GpuShare",
        ]
    );
    assert!(p.unchecked_filters.is_empty());
    // The node-local ones also guard nominated pods' room.
    let local: Vec<bool> = p.bind_checks.iter().map(|c| c.node_local()).collect();
    // VolumeRestrictions reads the claims' users across the view,
    // VolumeBinding the PVs other grants reserved.
    assert_eq!(
        local,
        [
            true, true, true, true, true, true, false, true, false, true, false, false, true
        ]
    );
}

#[test]
fn a_profile_is_held_only_to_the_filters_it_enables() {
    let served = served(
        "profiles:
- schedulerName: no-taints
  workloadClass: batch
  plugins:
    filter:
      disabled:
      - name: TaintToleration
    multiPoint:
      enabled:
      - name: MaxInstancesPerNode
",
        &Registry::in_tree(),
    );
    let p = &served[0];
    assert_eq!(p.workload_class, Some(WorkloadClass::Batch));
    let got = names(&p.bind_checks);
    assert!(!got.contains(&"TaintToleration"), "{got:?}");
    assert_eq!(got.last(), Some(&"MaxInstancesPerNode"), "{got:?}");
}

/// A Filter registered out of tree without a bind check.
struct Unchecked;

impl Plugin for Unchecked {
    fn name(&self) -> &'static str {
        "Unchecked"
    }
}

impl FilterPlugin for Unchecked {
    fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
        Status::success()
    }
}

#[test]
fn a_filter_without_a_check_is_listed_as_unchecked() {
    let mut registry = Registry::in_tree();
    registry
        .register(
            "Unchecked",
            Arc::new(|_| {
                let p = Arc::new(Unchecked);
                Ok(PluginHandle::new(p.clone()).filter(p))
            }),
        )
        .expect("a new name");
    let served = served(
        "profiles:
- plugins:
    multiPoint:
      enabled:
      - name: Unchecked
",
        &registry,
    );
    assert_eq!(served[0].unchecked_filters, ["Unchecked"]);
    assert!(!names(&served[0].bind_checks).contains(&"Unchecked"));
    assert_eq!(served[0].bind_checks.len(), 13, "the defaults still are");
}

#[test]
fn checks_take_their_plugins_args() {
    let served = served(
        "profiles:
- plugins:
    multiPoint:
      enabled:
      - name: MaxInstancesPerNode
  pluginConfig:
  - name: NodeAffinity
    args:
      addedAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - {key: pool, operator: In, values: [gpu]}
  - name: NodeResourcesFit
    args:
      ignoredResourceGroups: [example.com]
  - name: MaxInstancesPerNode
    args:
      labelKey: service
",
        &Registry::in_tree(),
    );
    let check = |name: &str| {
        served[0]
            .bind_checks
            .iter()
            .find(|c| c.name() == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} check"))
    };
    let node = |pool: &str| {
        NodeBuilder::new("n1")
            .cpu("4")
            .pods(110)
            .label("pool", pool)
            .build_info_with([PodBuilder::new("s1")
                .label("service", "web")
                .annotation("scheduling.flotilla.dev/max-instances-per-node", "1")
                .build_info()])
    };
    let plain = PodBuilder::new("p").cpu("1").build_info();
    let affinity = check("NodeAffinity");
    assert_eq!(check_on(&*affinity, &plain, node("gpu")), Ok(()));
    assert_eq!(
        check_on(&*affinity, &plain, node("cpu")),
        Err("node(s) didn't match scheduler-enforced node affinity".into())
    );
    // The node does not advertise example.com/fpga: ignored by the group.
    let fit = check("NodeResourcesFit");
    let fpga = PodBuilder::new("f")
        .cpu("5")
        .request("example.com/fpga", "1")
        .build_info();
    assert_eq!(
        check_on(&*fit, &fpga, node("gpu")),
        Err("Insufficient cpu".into())
    );
    let small = PodBuilder::new("s")
        .cpu("1")
        .request("example.com/fpga", "1")
        .build_info();
    assert_eq!(check_on(&*fit, &small, node("gpu")), Ok(()));
    // Instances counted by the `service` label, not `app`.
    let cap = check("MaxInstancesPerNode");
    let web = PodBuilder::new("w").label("service", "web").build_info();
    assert_eq!(
        check_on(&*cap, &web, node("gpu")),
        Err("node(s) already run the maximum number of instances of this app".into())
    );
    let app_web = PodBuilder::new("a").label("app", "web").build_info();
    assert_eq!(check_on(&*cap, &app_web, node("gpu")), Ok(()));
}
