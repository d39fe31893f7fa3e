//! Upstream `volume_binding_test.go` and `binder_test.go`
//! (`TestFindPodVolumesWithoutProvisioning`, `...WithProvisioning`,
//! `TestFindMatchingVolume`) in shape: claims, PVs and classes per case,
//! a pod, two nodes; PreFilter's status, else each node's decisions or
//! reasons.

use super::*;
use crate::framework::Code;
use crate::testing::PodBuilder;
use crate::testing::volumes::{PvBuilder, PvcBuilder, allowed_topology, storage_class};

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
const CSI: &str = "csi.example.com";

/// The two nodes every case runs on: `node1` in zone `a`, `node2` in `b`.
fn nodes() -> [(&'static str, BTreeMap<String, String>); 2] {
    let labels = |host: &str, zone: &str| {
        [(HOST, host), (ZONE, zone)]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    [
        ("node1", labels("node1", "a")),
        ("node2", labels("node2", "b")),
    ]
}

/// Classes: `wait` (WaitForFirstConsumer, no provisioner: static PVs
/// only), `wait-prov` (WaitForFirstConsumer, CSI provisioner),
/// `wait-topo` (as `wait-prov`, allowed in zone `a` only), `immediate`,
/// `nomode` (binding mode unset).
fn state(claims: Vec<PvcBuilder>, pvs: Vec<PvBuilder>) -> VolumeState {
    let mut s = VolumeState::default();
    let wffc = Some("WaitForFirstConsumer");
    for class in [
        storage_class("wait", NOT_SUPPORTED_PROVISIONER, wffc),
        storage_class("wait-prov", CSI, wffc),
        allowed_topology(storage_class("wait-topo", CSI, wffc), ZONE, &["a"]),
        storage_class("immediate", CSI, Some("Immediate")),
        storage_class("nomode", CSI, None),
    ] {
        s.apply_storage_class(&class).unwrap();
    }
    for c in claims {
        s.apply_claim(&c.build()).unwrap();
    }
    for pv in pvs {
        s.apply_pv(&pv.build()).unwrap();
    }
    s
}

/// An unbound `ReadWriteOnce` claim of `class` asking `size`.
fn claim(name: &str, class: &str, size: &str) -> PvcBuilder {
    PvcBuilder::new(name)
        .class(class)
        .access_mode("ReadWriteOnce")
        .storage(size)
}

/// An `Available` `ReadWriteOnce` PV of `class` with `size`.
fn pv(name: &str, class: &str, size: &str) -> PvBuilder {
    PvBuilder::new(name)
        .class(class)
        .access_mode("ReadWriteOnce")
        .capacity(size)
        .available()
}

/// A PV reachable from `host` only (a local PV).
fn local_pv(name: &str, class: &str, size: &str, host: &str) -> PvBuilder {
    pv(name, class, size).node_affinity(HOST, "In", &[host])
}

fn pod(claims: &[&str]) -> PodInfo {
    PodBuilder::new("p").pvc_volumes(claims).build_info()
}

/// What a node answers: the decisions (static bindings as (claim, PV),
/// provisioned claims) or the reasons.
type NodeWant = Result<(Vec<(&'static str, &'static str)>, Vec<&'static str>), Vec<&'static str>>;

/// PreFilter's rejection, or each node's answer.
type Want = Result<[NodeWant; 2], (Code, String)>;

struct Case {
    name: &'static str,
    claims: Vec<PvcBuilder>,
    pvs: Vec<PvBuilder>,
    pod: PodInfo,
    want: Want,
}

fn ok_empty() -> NodeWant {
    Ok((vec![], vec![]))
}

fn bind(claim: &'static str, pv: &'static str) -> NodeWant {
    Ok((vec![(claim, pv)], vec![]))
}

fn provision(claim: &'static str) -> NodeWant {
    Ok((vec![], vec![claim]))
}

fn no_pv() -> NodeWant {
    Err(vec![REASON_BIND_CONFLICT])
}

fn prefilter(code: Code, reason: &str) -> Want {
    Err((code, reason.to_owned()))
}

/// A node's answer, owned.
type NodeGot = Result<(Vec<(String, String)>, Vec<String>), Vec<String>>;

fn owned(w: &NodeWant) -> NodeGot {
    let s = |v: &&str| (*v).to_owned();
    match w {
        Ok((bindings, provisions)) => Ok((
            bindings.iter().map(|(c, p)| (s(c), s(p))).collect(),
            provisions.iter().map(s).collect(),
        )),
        Err(reasons) => Err(reasons.iter().map(s).collect()),
    }
}

/// PreFilter then Filter on both nodes, as the plugin runs them.
fn run(pod: &PodInfo, s: &VolumeState) -> Result<Vec<NodeGot>, (Code, String)> {
    let claims = pod_claims(pod, s)
        .map_err(|r| (r.code, r.reason.into_owned()))?
        .expect("the pod has claims");
    let s = |v: &Arc<str>| v.to_string();
    Ok(nodes()
        .iter()
        .map(
            |(name, labels)| match find_pod_volumes(&claims, name, labels) {
                Ok(d) => Ok((
                    d.static_bindings
                        .iter()
                        .map(|b| (s(&b.claim), s(&b.pv)))
                        .collect(),
                    d.dynamic_provisions.iter().map(s).collect(),
                )),
                Err(c) => Err(c.reasons().map(str::to_owned).collect()),
            },
        )
        .collect())
}

#[allow(clippy::too_many_lines)] // one table
fn cases() -> Vec<Case> {
    let unresolvable = Code::UnschedulableAndUnresolvable;
    vec![
        // Bound claims.
        Case {
            name: "bound claim, PV affinity matches node1, conflicts on node2",
            claims: vec![PvcBuilder::new("data").bound_to("pv-1")],
            pvs: vec![local_pv("pv-1", "wait", "10Gi", "node1")],
            pod: pod(&["data"]),
            want: Ok([ok_empty(), Err(vec![REASON_NODE_CONFLICT])]),
        },
        Case {
            name: "bound claim, PV without affinity fits everywhere",
            claims: vec![PvcBuilder::new("data").bound_to("pv-1")],
            pvs: vec![pv("pv-1", "wait", "10Gi")],
            pod: pod(&["data"]),
            want: Ok([ok_empty(), ok_empty()]),
        },
        Case {
            name: "bound claim whose PV does not exist: Filter's reason on every node",
            claims: vec![PvcBuilder::new("data").bound_to("pv-gone")],
            pvs: vec![],
            pod: pod(&["data"]),
            want: Ok([
                Err(vec![REASON_PV_NOT_EXIST]),
                Err(vec![REASON_PV_NOT_EXIST]),
            ]),
        },
        Case {
            name: "claim Lost: PreFilter names claim and PV",
            claims: vec![PvcBuilder::new("data").bound_to("pv-gone").lost()],
            pvs: vec![],
            pod: pod(&["data"]),
            want: prefilter(
                unresolvable,
                "persistentvolumeclaim \"data\" bound to non-existent persistentvolume \"pv-gone\"",
            ),
        },
        Case {
            name: "reasons come in upstream's order",
            claims: vec![
                PvcBuilder::new("local").bound_to("pv-1"),
                claim("later", "wait", "1Gi"),
            ],
            pvs: vec![
                local_pv("pv-1", "wait", "10Gi", "node1")
                    .phase("Bound")
                    .claim_ref("local", None),
            ],
            pod: pod(&["later", "local"]),
            want: Ok([
                no_pv(),
                Err(vec![REASON_NODE_CONFLICT, REASON_BIND_CONFLICT]),
            ]),
        },
        Case {
            name: "missing PV, and a bind conflict where the free PV is out of reach",
            claims: vec![
                PvcBuilder::new("gone").bound_to("pv-gone"),
                claim("later", "wait", "1Gi"),
            ],
            pvs: vec![local_pv("pv-1", "wait", "10Gi", "node1")],
            pod: pod(&["gone", "later"]),
            want: Ok([
                Err(vec![REASON_PV_NOT_EXIST]),
                Err(vec![REASON_BIND_CONFLICT, REASON_PV_NOT_EXIST]),
            ]),
        },
        Case {
            name: "the first bound claim that fails decides (upstream checkBoundClaims)",
            claims: vec![
                PvcBuilder::new("gone").bound_to("pv-gone"),
                PvcBuilder::new("local").bound_to("pv-1"),
            ],
            pvs: vec![local_pv("pv-1", "wait", "10Gi", "node1")],
            pod: pod(&["gone", "local"]),
            want: Ok([
                Err(vec![REASON_PV_NOT_EXIST]),
                Err(vec![REASON_PV_NOT_EXIST]),
            ]),
        },
        // Unbound WaitForFirstConsumer claims: static PVs.
        Case {
            name: "WFFC claim with a matching local PV on node1",
            claims: vec![claim("data", "wait", "5Gi")],
            pvs: vec![local_pv("pv-1", "wait", "10Gi", "node1")],
            pod: pod(&["data"]),
            want: Ok([bind("data", "pv-1"), no_pv()]),
        },
        Case {
            name: "WFFC claim without any PV, class cannot provision",
            claims: vec![claim("data", "wait", "5Gi")],
            pvs: vec![],
            pod: pod(&["data"]),
            want: Ok([no_pv(), no_pv()]),
        },
        Case {
            name: "smallest fitting PV is chosen",
            claims: vec![claim("data", "wait", "5Gi")],
            pvs: vec![
                pv("pv-a-20g", "wait", "20Gi"),
                pv("pv-b-8g", "wait", "8Gi"),
                pv("pv-c-3g", "wait", "3Gi"),
            ],
            pod: pod(&["data"]),
            want: Ok([bind("data", "pv-b-8g"), bind("data", "pv-b-8g")]),
        },
        Case {
            name: "two claims compete for one PV",
            claims: vec![claim("one", "wait", "1Gi"), claim("two", "wait", "1Gi")],
            pvs: vec![pv("pv-1", "wait", "10Gi")],
            pod: pod(&["one", "two"]),
            want: Ok([no_pv(), no_pv()]),
        },
        Case {
            name: "two claims, two PVs: smaller request first takes the smaller PV",
            claims: vec![claim("big", "wait", "5Gi"), claim("small", "wait", "1Gi")],
            pvs: vec![pv("pv-10g", "wait", "10Gi"), pv("pv-5g", "wait", "5Gi")],
            pod: pod(&["big", "small"]),
            want: Ok([
                Ok((vec![("small", "pv-5g"), ("big", "pv-10g")], vec![])),
                Ok((vec![("small", "pv-5g"), ("big", "pv-10g")], vec![])),
            ]),
        },
        Case {
            name: "one claim matched, the other provisioned",
            claims: vec![
                claim("static", "wait", "1Gi"),
                claim("dynamic", "wait-prov", "1Gi"),
            ],
            pvs: vec![local_pv("pv-1", "wait", "10Gi", "node1")],
            pod: pod(&["static", "dynamic"]),
            want: Ok([Ok((vec![("static", "pv-1")], vec!["dynamic"])), no_pv()]),
        },
        Case {
            name: "PV pre-bound to the claim wins over a smaller available one",
            claims: vec![claim("data", "wait", "1Gi")],
            pvs: vec![
                pv("pv-a-small", "wait", "1Gi"),
                pv("pv-b-prebound", "wait", "50Gi")
                    .phase("Bound")
                    .claim_ref("data", Some("uid-data")),
            ],
            pod: pod(&["data"]),
            want: Ok([bind("data", "pv-b-prebound"), bind("data", "pv-b-prebound")]),
        },
        Case {
            name: "PV pre-bound by name only (no uid) counts as pre-bound",
            claims: vec![claim("data", "wait", "1Gi")],
            pvs: vec![
                pv("pv-a-small", "wait", "1Gi"),
                pv("pv-b-prebound", "wait", "50Gi").claim_ref("data", None),
            ],
            pod: pod(&["data"]),
            want: Ok([bind("data", "pv-b-prebound"), bind("data", "pv-b-prebound")]),
        },
        Case {
            name: "PV pre-bound to another uid is not taken",
            claims: vec![claim("data", "wait", "1Gi")],
            pvs: vec![pv("pv-1", "wait", "50Gi").claim_ref("data", Some("uid-old"))],
            pod: pod(&["data"]),
            want: Ok([no_pv(), no_pv()]),
        },
        Case {
            name: "pre-bound PV out of reach: no match on that node, though another PV fits",
            claims: vec![claim("data", "wait", "1Gi")],
            pvs: vec![
                pv("pv-a-free", "wait", "1Gi"),
                local_pv("pv-b-prebound", "wait", "5Gi", "node1").claim_ref("data", None),
            ],
            pod: pod(&["data"]),
            want: Ok([bind("data", "pv-b-prebound"), no_pv()]),
        },
        Case {
            name: "access modes must all be offered",
            claims: vec![claim("data", "wait", "1Gi").access_mode("ReadOnlyMany")],
            pvs: vec![
                pv("pv-rwo", "wait", "1Gi"),
                pv("pv-both", "wait", "5Gi").access_mode("ReadOnlyMany"),
            ],
            pod: pod(&["data"]),
            want: Ok([bind("data", "pv-both"), bind("data", "pv-both")]),
        },
        Case {
            name: "access mode mismatch",
            claims: vec![
                PvcBuilder::new("data")
                    .class("wait")
                    .access_mode("ReadWriteMany")
                    .storage("1Gi"),
            ],
            pvs: vec![pv("pv-1", "wait", "10Gi")],
            pod: pod(&["data"]),
            want: Ok([no_pv(), no_pv()]),
        },
        Case {
            name: "size mismatch",
            claims: vec![claim("data", "wait", "20Gi")],
            pvs: vec![pv("pv-1", "wait", "10Gi")],
            pod: pod(&["data"]),
            want: Ok([no_pv(), no_pv()]),
        },
        Case {
            name: "label selector on the claim picks the labelled PV",
            claims: vec![claim("data", "wait", "1Gi").selector_label("tier", "gold")],
            pvs: vec![
                pv("pv-plain", "wait", "1Gi"),
                pv("pv-gold", "wait", "10Gi").label("tier", "gold"),
            ],
            pod: pod(&["data"]),
            want: Ok([bind("data", "pv-gold"), bind("data", "pv-gold")]),
        },
        Case {
            name: "label selector matching no PV",
            claims: vec![claim("data", "wait", "1Gi").selector_label("tier", "gold")],
            pvs: vec![pv("pv-silver", "wait", "10Gi").label("tier", "silver")],
            pod: pod(&["data"]),
            want: Ok([no_pv(), no_pv()]),
        },
        Case {
            name: "PVs released, being deleted, of another class or volume mode are skipped",
            claims: vec![claim("data", "wait", "1Gi")],
            pvs: vec![
                pv("pv-released", "wait", "1Gi").phase("Released"),
                pv("pv-deleting", "wait", "1Gi").deleting(),
                pv("pv-other-class", "wait-prov", "1Gi"),
                pv("pv-block", "wait", "1Gi").volume_mode("Block"),
                pv("pv-no-phase", "wait", "1Gi").phase(""),
            ],
            pod: pod(&["data"]),
            want: Ok([no_pv(), no_pv()]),
        },
        // Unbound WaitForFirstConsumer claims: provisioning.
        Case {
            name: "WFFC claim without PV, class provisions anywhere",
            claims: vec![claim("data", "wait-prov", "5Gi")],
            pvs: vec![],
            pod: pod(&["data"]),
            want: Ok([provision("data"), provision("data")]),
        },
        Case {
            name: "WFFC claim without PV, allowedTopologies admit node1 only",
            claims: vec![claim("data", "wait-topo", "5Gi")],
            pvs: vec![],
            pod: pod(&["data"]),
            want: Ok([provision("data"), no_pv()]),
        },
        Case {
            name: "selected-node names node1: provisioned there, node2 rejected at once",
            claims: vec![
                claim("data", "wait-prov", "5Gi")
                    .annotation("volume.kubernetes.io/selected-node", "node1"),
            ],
            pvs: vec![local_pv("pv-2", "wait-prov", "10Gi", "node2")],
            pod: pod(&["data"]),
            want: Ok([provision("data"), no_pv()]),
        },
        Case {
            name: "selected-node on a class that cannot provision",
            claims: vec![
                claim("data", "wait", "5Gi")
                    .annotation("volume.kubernetes.io/selected-node", "node1"),
            ],
            pvs: vec![pv("pv-1", "wait", "10Gi")],
            pod: pod(&["data"]),
            want: Ok([no_pv(), no_pv()]),
        },
        // Claims that must wait before any node is looked at.
        Case {
            name: "Immediate unbound claim",
            claims: vec![claim("data", "immediate", "1Gi")],
            pvs: vec![],
            pod: pod(&["data"]),
            want: prefilter(unresolvable, REASON_UNBOUND_IMMEDIATE),
        },
        Case {
            name: "unbound claim without class counts as Immediate",
            claims: vec![PvcBuilder::new("data").storage("1Gi")],
            pvs: vec![],
            pod: pod(&["data"]),
            want: prefilter(unresolvable, REASON_UNBOUND_IMMEDIATE),
        },
        Case {
            name: "unbound claim of a class not found counts as Immediate",
            claims: vec![claim("data", "ghost", "1Gi")],
            pvs: vec![],
            pod: pod(&["data"]),
            want: prefilter(unresolvable, REASON_UNBOUND_IMMEDIATE),
        },
        Case {
            name: "WFFC claim pre-bound by volumeName, not bind-completed: Immediate",
            claims: vec![claim("data", "wait", "1Gi").volume_name("pv-1")],
            pvs: vec![pv("pv-1", "wait", "10Gi")],
            pod: pod(&["data"]),
            want: prefilter(unresolvable, REASON_UNBOUND_IMMEDIATE),
        },
        Case {
            name: "class without binding mode is an error",
            claims: vec![claim("data", "nomode", "1Gi")],
            pvs: vec![],
            pod: pod(&["data"]),
            want: prefilter(
                Code::Error,
                "VolumeBindingMode not set for StorageClass \"nomode\"",
            ),
        },
        Case {
            name: "claim being deleted",
            claims: vec![claim("data", "wait-prov", "1Gi").deleting()],
            pvs: vec![],
            pod: pod(&["data"]),
            want: prefilter(
                unresolvable,
                "persistentvolumeclaim \"data\" is being deleted",
            ),
        },
        Case {
            name: "claims are all checked before classes (upstream podHasPVCs first)",
            claims: vec![
                claim("nomode", "nomode", "1Gi"),
                claim("data", "wait-prov", "1Gi").deleting(),
            ],
            pvs: vec![],
            pod: pod(&["nomode", "data"]),
            want: prefilter(
                unresolvable,
                "persistentvolumeclaim \"data\" is being deleted",
            ),
        },
        Case {
            name: "missing claim",
            claims: vec![],
            pvs: vec![],
            pod: pod(&["ghost"]),
            want: prefilter(unresolvable, "persistentvolumeclaim \"ghost\" not found"),
        },
        Case {
            name: "ephemeral claim not created yet",
            claims: vec![],
            pvs: vec![],
            pod: PodBuilder::new("p")
                .ephemeral_volume("scratch")
                .build_info(),
            want: prefilter(
                unresolvable,
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \
                 \"p-scratch\"",
            ),
        },
        Case {
            name: "ephemeral claim owned by another pod",
            claims: vec![claim("p-scratch", "wait-prov", "1Gi").owner_pod("uid-other")],
            pvs: vec![],
            pod: PodBuilder::new("p")
                .ephemeral_volume("scratch")
                .build_info(),
            want: prefilter(
                unresolvable,
                "PVC default/p-scratch was not created for pod default/p (pod is not owner)",
            ),
        },
        Case {
            name: "ephemeral claim owned by the pod is provisioned",
            claims: vec![claim("p-scratch", "wait-prov", "1Gi").owner_pod("uid-p")],
            pvs: vec![],
            pod: PodBuilder::new("p")
                .ephemeral_volume("scratch")
                .build_info(),
            want: Ok([provision("p-scratch"), provision("p-scratch")]),
        },
    ]
}

#[test]
fn volume_binding_table() {
    for c in cases() {
        let s = state(c.claims, c.pvs);
        let got = run(&c.pod, &s);
        let want = c.want.map(|nodes| nodes.iter().map(owned).collect());
        assert_eq!(got, want, "{}", c.name);
    }
}

#[test]
fn pod_without_claims_is_skipped() {
    let s = state(vec![], vec![]);
    assert_eq!(pod_claims(&PodBuilder::new("p").build_info(), &s), Ok(None));
}

#[test]
fn candidate_pvs_keep_available_pvs_of_the_class_and_those_prebound_to_the_pod() {
    let s = state(
        vec![
            claim("data", "wait", "1Gi"),
            claim("other", "wait", "1Gi"),
            claim("fast", "wait-prov", "1Gi"),
        ],
        vec![
            pv("pv-b", "wait", "1Gi"),
            pv("pv-a", "wait", "1Gi"),
            pv("pv-bound-elsewhere", "wait", "1Gi")
                .phase("Bound")
                .claim_ref("someone", None),
            pv("pv-prebound", "wait", "1Gi")
                .phase("Bound")
                .claim_ref("data", None),
            pv("pv-pending", "wait", "1Gi").phase("Pending"),
            pv("pv-fast", "wait-prov", "1Gi"),
            pv("pv-unused-class", "immediate", "1Gi"),
        ],
    );
    let claims = pod_claims(&pod(&["data", "fast"]), &s).unwrap().unwrap();
    let names = |class: &str| -> Vec<&str> {
        claims.candidate_pvs[class]
            .iter()
            .map(|p| &*p.name)
            .collect()
    };
    assert_eq!(
        names("wait"),
        ["pv-a", "pv-b", "pv-prebound"],
        "sorted by name"
    );
    assert_eq!(names("wait-prov"), ["pv-fast"]);
    assert_eq!(claims.candidate_pvs.len(), 2);
}

#[test]
fn matching_skips_taken_pvs_and_prefers_the_first_of_equal_size() {
    let s = state(
        vec![claim("data", "wait", "1Gi")],
        vec![pv("pv-a", "wait", "5Gi"), pv("pv-b", "wait", "5Gi")],
    );
    let claims = pod_claims(&pod(&["data"]), &s).unwrap().unwrap();
    let (node, labels) = &nodes()[0];
    let pvs = &claims.candidate_pvs["wait"];
    let c = &claims.delay_binding[0].claim;
    let found = |taken: &str| find_matching_volume(c, pvs, labels, |n| n == taken);
    assert_eq!(found("none").map(|p| &*p.name), Some("pv-a"));
    assert_eq!(found("pv-a").map(|p| &*p.name), Some("pv-b"));
    assert!(
        find_pod_volumes(&claims, node, labels).is_ok(),
        "the Filter agrees"
    );
}

#[test]
fn conflicts_become_one_unresolvable_status_with_every_reason() {
    let st = BindingConflicts(vec![
        BindingConflict::NodeAffinity,
        BindingConflict::NoVolumeToBind,
        BindingConflict::NotEnoughSpace,
        BindingConflict::PvNotExist,
    ])
    .into_status("VolumeBinding");
    assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(st.plugin, "VolumeBinding");
    assert_eq!(
        st.message(),
        "node(s) had volume node affinity conflict, node(s) didn't find available persistent \
         volumes to bind, node(s) did not have enough free storage, node(s) unavailable due to \
         one or more pvc(s) bound to non-existent pv(s)"
    );
}

#[test]
fn provisioning_needs_a_provisioner_and_an_allowed_topology() {
    let labels = &nodes()[0].1;
    let class =
        |c: k8s_openapi::api::storage::v1::StorageClass| StorageClass::try_from(&c).unwrap();
    let wffc = Some("WaitForFirstConsumer");
    assert!(can_provision(&class(storage_class("c", CSI, wffc)), labels));
    assert!(!can_provision(&class(storage_class("c", "", wffc)), labels));
    assert!(!can_provision(
        &class(storage_class("c", NOT_SUPPORTED_PROVISIONER, wffc)),
        labels
    ));
    let mut empty_term = storage_class("c", CSI, wffc);
    empty_term.allowed_topologies = Some(vec![Default::default()]);
    assert!(
        !can_provision(&class(empty_term), labels),
        "an empty topology term selects no node"
    );
}

#[test]
fn bound_claim_whose_pv_cannot_be_read_is_rejected_naming_the_pv() {
    let mut s = state(vec![PvcBuilder::new("data").bound_to("pv-bad")], vec![]);
    let e = s
        .apply_pv(
            &PvBuilder::new("pv-bad")
                .node_affinity(HOST, "Near", &["n1"])
                .build(),
        )
        .unwrap_err();
    let r = pod_claims(&pod(&["data"]), &s).unwrap_err();
    assert_eq!(
        (r.code, r.reason.as_ref()),
        (Code::UnschedulableAndUnresolvable, e.to_string().as_str())
    );
    assert!(
        r.reason
            .starts_with("PersistentVolume pv-bad: spec.nodeAffinity")
    );
}

/// Node `node1`'s name and labels.
fn node1() -> (Arc<str>, BTreeMap<String, String>) {
    let [(name, labels), _] = nodes();
    (Arc::from(name), labels)
}

fn plan_on_node1(pod: &PodInfo, s: &VolumeState) -> Option<VolumePlan> {
    let (name, labels) = node1();
    plan(pod, &name, &labels, s, Duration::from_secs(5)).expect("node1 fits")
}

#[test]
fn a_plan_assumed_keeps_its_pv_from_other_claims_until_forgotten() {
    let mut s = state(
        vec![claim("a", "wait", "1Gi"), claim("b", "wait", "1Gi")],
        vec![pv("pv-1", "wait", "5Gi")],
    );
    let pa = plan_on_node1(&pod(&["a"]), &s).expect("a plan");
    assert_eq!(
        pa.decisions.static_bindings,
        [StaticBinding {
            claim: "a".into(),
            pv: "pv-1".into()
        }]
    );
    pa.assume(&mut s);
    let (name, labels) = node1();
    assert_eq!(
        plan(&pod(&["b"]), &name, &labels, &s, Duration::ZERO),
        Err(REASON_BIND_CONFLICT.into()),
        "pv-1 is a's now"
    );
    // A second pod sharing claim a holds the same assumption.
    let pa2 = plan_on_node1(&pod(&["a"]), &s).expect("pre-bound to a");
    assert_eq!(pa2.decisions, pa.decisions);
    pa2.assume(&mut s);
    pa.forget(&mut s);
    assert!(
        plan(&pod(&["b"]), &name, &labels, &s, Duration::ZERO).is_err(),
        "still held"
    );
    pa2.forget(&mut s);
    assert!(
        plan_on_node1(&pod(&["b"]), &s).is_some(),
        "the last hold dropped: pv-1 is free again"
    );
}

#[test]
fn the_watch_ends_an_assumption_only_when_it_shows_the_write() {
    let mut s = state(
        vec![claim("a", "wait", "1Gi")],
        vec![pv("pv-1", "wait", "5Gi")],
    );
    let pa = plan_on_node1(&pod(&["a"]), &s).expect("a plan");
    pa.assume(&mut s);
    // A stale copy without claimRef (another field changed): still assumed.
    s.apply_pv(&pv("pv-1", "wait", "5Gi").label("x", "y").build())
        .unwrap();
    let shown = s.pv("pv-1").found().expect("pv-1");
    assert_eq!(shown.claim_ref.as_ref().map(|r| &*r.name), Some("a"));
    assert_eq!(
        shown.labels.get("x").map(String::as_str),
        Some("y"),
        "the new copy, assumed"
    );
    // The write lands: the watch's copy is shown, forgetting changes nothing.
    s.apply_pv(
        &pv("pv-1", "wait", "5Gi")
            .claim_ref("a", Some("uid-a"))
            .build(),
    )
    .unwrap();
    pa.forget(&mut s);
    let shown = s.pv("pv-1").found().expect("pv-1");
    assert_eq!(shown.claim_ref.as_ref().map(|r| &*r.name), Some("a"));

    // A provision: the claim shows the node until the watch shows one.
    let mut s = state(vec![claim("d", "wait-prov", "1Gi")], vec![]);
    let pd = plan_on_node1(&pod(&["d"]), &s).expect("a plan");
    assert_eq!(pd.decisions.dynamic_provisions, [Arc::<str>::from("d")]);
    pd.assume(&mut s);
    let selected = |s: &VolumeState| {
        s.claim("default", "d")
            .found()
            .and_then(|c| c.selected_node.clone())
    };
    assert_eq!(selected(&s).as_deref(), Some("node1"));
    pd.forget(&mut s);
    assert_eq!(selected(&s), None, "unreserved");
}

#[test]
fn prebind_waits_for_bound_claims_and_fails_on_a_binding_that_cannot_complete() {
    let (_, labels) = node1();
    let mut s = state(
        vec![claim("a", "wait", "1Gi")],
        vec![local_pv("pv-1", "wait", "5Gi", "node1")],
    );
    let pa = plan_on_node1(&pod(&["a"]), &s).expect("a plan");
    pa.assume(&mut s);
    assert_eq!(check_bindings(&pa, &s, &labels), Ok(false), "not bound yet");
    s.apply_claim(&claim("a", "wait", "1Gi").bound_to("pv-1").build())
        .unwrap();
    assert_eq!(check_bindings(&pa, &s, &labels), Ok(true));

    // The PV taken by another claim meanwhile.
    let mut s = state(
        vec![claim("a", "wait", "1Gi"), claim("other", "wait", "1Gi")],
        vec![pv("pv-1", "wait", "5Gi")],
    );
    let pa = plan_on_node1(&pod(&["a"]), &s).expect("a plan");
    pa.assume(&mut s);
    s.apply_pv(&pv("pv-1", "wait", "5Gi").claim_ref("other", None).build())
        .unwrap();
    assert_eq!(
        check_bindings(&pa, &s, &labels),
        Err("persistentvolume \"pv-1\" was bound to another claim".into())
    );

    // A provision whose selected node was reset (the provisioner gave up),
    // and one bound to a PV the node cannot reach.
    let mut s = state(vec![claim("d", "wait-prov", "1Gi")], vec![]);
    let pd = plan_on_node1(&pod(&["d"]), &s).expect("a plan");
    s.apply_claim(&claim("d", "wait-prov", "1Gi").build())
        .unwrap();
    assert_eq!(
        check_bindings(&pd, &s, &labels),
        Err("selectedNode annotation reset for PVC \"d\"".into())
    );
    s.apply_pv(&local_pv("pvc-d", "wait-prov", "1Gi", "node2").build())
        .unwrap();
    s.apply_claim(&claim("d", "wait-prov", "1Gi").bound_to("pvc-d").build())
        .unwrap();
    assert_eq!(
        check_bindings(&pd, &s, &labels),
        Err("pv \"pvc-d\" node affinity doesn't match node \"node1\"".into())
    );
}
