//! Upstream `volume_restrictions_test.go` in shape: inline disk conflicts
//! per type (`TestGCEDiskConflicts`, `TestAWSDiskConflicts`,
//! `TestRBDDiskConflicts`, `TestISCSIDiskConflicts`) and
//! `TestAccessModeConflicts` for `ReadWriteOncePod` claims.

use super::*;
use crate::framework::Code;
use crate::testing::volumes::{PvcBuilder, ebs, gce_pd, iscsi, rbd};
use crate::testing::{NodeBuilder, PodBuilder};
use crate::volumes::ClaimUsers;
use k8s_openapi::api::core::v1::Volume;

fn with_volume(name: &str, v: Volume) -> PodInfo {
    PodBuilder::new(name).node_name("n1").volume(v).build_info()
}

/// The whole plugin for a pod without claims: PreFilter finds no claim,
/// Filter checks the disks.
fn disk_check(pod: &PodInfo, on_node: Vec<PodInfo>) -> Result<(), VolumeRejection> {
    let node = NodeBuilder::new("n1").build_info_with(on_node);
    check_restrictions(pod, 0, &node)
}

/// (name, incoming pod's volume, volumes of the pods on the node, want).
type DiskCase = (
    &'static str,
    Volume,
    Vec<Volume>,
    Result<(), VolumeRejection>,
);
/// (name, incoming pod, pods on another node, want: `Ok(None)` = skip).
type ClaimCase = (
    &'static str,
    PodInfo,
    Vec<PodInfo>,
    Result<Option<()>, VolumeRejection>,
);

#[test]
fn inline_disk_conflict_table() {
    let unsched = Err(VolumeRejection::unschedulable(REASON_DISK_CONFLICT));
    let cases: Vec<DiskCase> = vec![
        (
            "gce: nothing on node",
            gce_pd("v", "foo", false),
            vec![],
            Ok(()),
        ),
        (
            "gce: other disk",
            gce_pd("v", "foo", false),
            vec![gce_pd("v", "bar", false)],
            Ok(()),
        ),
        (
            "gce: same disk read-write",
            gce_pd("v", "foo", false),
            vec![gce_pd("v", "foo", false)],
            unsched.clone(),
        ),
        (
            "gce: same disk, one side read-only",
            gce_pd("v", "foo", true),
            vec![gce_pd("v", "foo", false)],
            unsched.clone(),
        ),
        (
            "gce: same disk, read-only on both sides",
            gce_pd("v", "foo", true),
            vec![gce_pd("v", "foo", true)],
            Ok(()),
        ),
        (
            "aws: same volume, read-only both sides still conflicts",
            ebs("v", "vol-1", true),
            vec![ebs("v", "vol-1", true)],
            unsched.clone(),
        ),
        (
            "aws: other volume",
            ebs("v", "vol-1", false),
            vec![ebs("v", "vol-2", false)],
            Ok(()),
        ),
        (
            "rbd: shared monitor, same pool and image",
            rbd("v", &["a", "b"], "img", false),
            vec![rbd("v", &["b", "c"], "img", false)],
            unsched.clone(),
        ),
        (
            "rbd: read-only both sides",
            rbd("v", &["a"], "img", true),
            vec![rbd("v", &["a"], "img", true)],
            Ok(()),
        ),
        (
            "rbd: no monitor in common",
            rbd("v", &["a"], "img", false),
            vec![rbd("v", &["c"], "img", false)],
            Ok(()),
        ),
        (
            "iscsi: same iqn",
            iscsi("v", "iqn.2016-12.server:storage.target01", false),
            vec![iscsi("v", "iqn.2016-12.server:storage.target01", false)],
            unsched.clone(),
        ),
        (
            "iscsi: same iqn read-only both sides",
            iscsi("v", "iqn.2016-12.server:storage.target01", true),
            vec![iscsi("v", "iqn.2016-12.server:storage.target01", true)],
            Ok(()),
        ),
        (
            "iscsi: other iqn",
            iscsi("v", "iqn.2016-12.server:storage.target01", false),
            vec![iscsi("v", "iqn.2017-12.server:storage.target01", false)],
            Ok(()),
        ),
        (
            "any of several pods on the node",
            gce_pd("v", "foo", false),
            vec![ebs("v", "foo", false), gce_pd("v", "foo", false)],
            unsched,
        ),
    ];
    for (name, incoming, existing, want) in cases {
        let pod = PodBuilder::new("in").volume(incoming).build_info();
        let on_node = existing
            .into_iter()
            .enumerate()
            .map(|(i, v)| with_volume(&format!("e{i}"), v))
            .collect();
        assert_eq!(disk_check(&pod, on_node), want, "{name}");
    }
}

fn rwop_state() -> VolumeState {
    let mut s = VolumeState::default();
    for c in [
        PvcBuilder::new("rwop-1").access_mode("ReadWriteOncePod"),
        PvcBuilder::new("rwop-2").access_mode("ReadWriteOncePod"),
        PvcBuilder::new("rwx").access_mode("ReadWriteMany"),
    ] {
        s.apply_claim(&c.build()).unwrap();
    }
    s
}

/// PreFilter (claims, then the cluster-wide count) then Filter on `node`,
/// as the plugin runs them; `Ok(None)` when PreFilter would skip.
fn rwop_check(
    pod: &PodInfo,
    s: &VolumeState,
    nodes: &[NodeInfo],
) -> Result<Option<()>, VolumeRejection> {
    let claims = read_write_once_pod_claims(pod, s)?;
    let users = ClaimUsers::count_nodes(nodes);
    let in_use = count_in_use(&claims, |c| {
        users.used_by_other_pod(&pod.key.namespace, c, &pod.uid)
    });
    let has_disks = pod
        .volumes
        .as_deref()
        .is_some_and(|v| !v.inline_disks.is_empty());
    if in_use == 0 && !has_disks {
        return Ok(None);
    }
    check_restrictions(pod, in_use, &nodes[0]).map(Some)
}

#[test]
fn read_write_once_pod_table() {
    let s = rwop_state();
    let user = |name: &str, claim: &str| {
        PodBuilder::new(name)
            .node_name("n2")
            .pvc_volume("v", claim)
            .build_info()
    };
    let incoming = |claims: &[&str]| PodBuilder::new("in").pvc_volumes(claims).build_info();
    let conflict = Err(VolumeRejection::unschedulable(
        REASON_READ_WRITE_ONCE_POD_CONFLICT,
    ));
    let cases: Vec<ClaimCase> = vec![
        (
            "no claim in use: skip",
            incoming(&["rwop-1"]),
            vec![],
            Ok(None),
        ),
        (
            "another pod uses the claim, on another node",
            incoming(&["rwop-1"]),
            vec![user("other", "rwop-1")],
            conflict.clone(),
        ),
        (
            "another pod uses a different claim",
            incoming(&["rwop-1"]),
            vec![user("other", "rwop-2")],
            Ok(None),
        ),
        (
            "two conflicts",
            incoming(&["rwop-1", "rwop-2"]),
            vec![user("a", "rwop-1"), user("b", "rwop-2")],
            conflict.clone(),
        ),
        (
            "ReadWriteMany claim shared: no check",
            incoming(&["rwx"]),
            vec![user("other", "rwx")],
            Ok(None),
        ),
        (
            "the same pod already placed is no other pod",
            PodBuilder::new("in").pvc_volume("v", "rwop-1").build_info(),
            vec![user("in", "rwop-1")],
            Ok(None),
        ),
        (
            "a claim of the same name in another namespace",
            incoming(&["rwop-1"]),
            vec![
                PodBuilder::new("other")
                    .namespace("team-b")
                    .node_name("n2")
                    .pvc_volume("v", "rwop-1")
                    .build_info(),
            ],
            Ok(None),
        ),
        (
            "missing claim",
            incoming(&["ghost"]),
            vec![],
            Err(VolumeRejection::unresolvable(
                "persistentvolumeclaim \"ghost\" not found",
            )),
        ),
    ];
    for (name, pod, users, want) in cases {
        let nodes = [
            NodeBuilder::new("n1").build_info_with([]),
            NodeBuilder::new("n2").build_info_with(users),
        ];
        assert_eq!(rwop_check(&pod, &s, &nodes), want, "{name}");
    }
}

#[test]
fn disk_conflict_comes_before_the_claim_check_and_both_are_unschedulable() {
    let pod = PodBuilder::new("in")
        .volume(ebs("d", "vol-1", false))
        .build_info();
    let node = NodeBuilder::new("n1").build_info_with([with_volume("e", ebs("d", "vol-1", false))]);
    let r = check_restrictions(&pod, 1, &node).unwrap_err();
    assert_eq!(
        (r.code, &*r.reason),
        (Code::Unschedulable, REASON_DISK_CONFLICT)
    );
    let free = NodeBuilder::new("n2").build_info_with([]);
    let r = check_restrictions(&pod, 1, &free).unwrap_err();
    assert_eq!(r.code, Code::Unschedulable, "preemption may free the claim");
    assert_eq!(
        r.reason,
        "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode \
         already in-use by another pod"
    );
}
