//! Upstream `csi_test.go` (`TestCSILimits`) in shape: a new pod's CSI
//! volumes against the node's CSINode limit, with pods already on the
//! node, VolumeAttachments, ephemeral and unbound claims, shared volumes.

use super::*;
use crate::framework::Code;
use crate::testing::volumes::{PvBuilder, PvcBuilder, csi_node, storage_class, volume_attachment};
use crate::testing::{NodeBuilder, PodBuilder};

const EBS: &str = "ebs.csi.aws.com";
const GCE: &str = "pd.csi.storage.gke.io";

/// Claims `csi-ebs-<i>` bound to PVs `pv-ebs-<i>` (handle `vol-<i>`) for
/// i in 0..4, `csi-gce-<i>` likewise on the GCE driver; `unbound-<i>` of
/// class `csi-sc` (provisioner EBS); `noclass` unbound without class;
/// `nfs` bound to a non-CSI PV; `p-scratch`, the ephemeral claim of pod
/// `p`, bound to `pv-ebs-3` when `owned`.
fn state(ebs_limit: Option<i32>, owned: bool) -> VolumeState {
    let mut s = VolumeState::default();
    for i in 0..4 {
        for (kind, driver) in [("ebs", EBS), ("gce", GCE)] {
            s.apply_pv(
                &PvBuilder::new(&format!("pv-{kind}-{i}"))
                    .csi(driver, &format!("{kind}-vol-{i}"))
                    .build(),
            )
            .unwrap();
            s.apply_claim(
                &PvcBuilder::new(&format!("csi-{kind}-{i}"))
                    .bound_to(&format!("pv-{kind}-{i}"))
                    .build(),
            )
            .unwrap();
        }
        s.apply_claim(
            &PvcBuilder::new(&format!("unbound-{i}"))
                .class("csi-sc")
                .build(),
        )
        .unwrap();
    }
    s.apply_pv(&PvBuilder::new("pv-nfs").build()).unwrap();
    s.apply_claim(&PvcBuilder::new("nfs").bound_to("pv-nfs").build())
        .unwrap();
    s.apply_claim(&PvcBuilder::new("noclass").build()).unwrap();
    let scratch = PvcBuilder::new("p-scratch").bound_to("pv-ebs-3");
    let scratch = if owned {
        scratch.owner_pod("uid-p")
    } else {
        scratch
    };
    s.apply_claim(&scratch.build()).unwrap();
    s.apply_storage_class(&storage_class("csi-sc", EBS, Some("WaitForFirstConsumer")))
        .unwrap();
    s.apply_csi_node(&csi_node("n1", &[(EBS, ebs_limit), (GCE, None)]))
        .unwrap();
    s
}

fn pod(name: &str, claims: &[&str]) -> PodBuilder {
    PodBuilder::new(name).pvc_volumes(claims)
}

/// PreFilter (the new pod's volumes) then Filter on node `n1` holding
/// `existing`, with `attachments` (PV names) attached to it.
fn run(
    new: &PodInfo,
    existing: Vec<PodInfo>,
    attachments: &[&str],
    mut s: VolumeState,
) -> Result<(), VolumeRejection> {
    for (i, pv) in attachments.iter().enumerate() {
        s.apply_volume_attachment(&volume_attachment(&format!("va-{i}"), EBS, "n1", pv))
            .unwrap();
    }
    let volumes = new_pod_csi_volumes(new, &s)?;
    let node = NodeBuilder::new("n1").build_info_with(existing);
    check_csi_limits(&volumes, &node, &s)
}

/// (name, new pod, pods on `n1`, PVs attached to `n1`, EBS limit, want).
type Case = (
    &'static str,
    PodInfo,
    Vec<PodInfo>,
    &'static [&'static str],
    Option<i32>,
    Result<(), VolumeRejection>,
);

#[test]
fn csi_limits_table() {
    let exceed = Err(VolumeRejection::unschedulable(REASON_MAX_VOLUME_COUNT));
    let on = |name: &str, claims: &[&str]| pod(name, claims).node_name("n1").build_info();
    let cases: Vec<Case> = vec![
        (
            "one volume, limit 1",
            pod("p", &["csi-ebs-0"]).build_info(),
            vec![],
            &[],
            Some(1),
            Ok(()),
        ),
        (
            "two volumes, limit 1",
            pod("p", &["csi-ebs-0", "csi-ebs-1"]).build_info(),
            vec![],
            &[],
            Some(1),
            exceed.clone(),
        ),
        (
            "a pod on the node holds the only slot",
            pod("p", &["csi-ebs-1"]).build_info(),
            vec![on("e", &["csi-ebs-0"])],
            &[],
            Some(1),
            exceed.clone(),
        ),
        (
            "room for one more",
            pod("p", &["csi-ebs-1"]).build_info(),
            vec![on("e", &["csi-ebs-0"])],
            &[],
            Some(2),
            Ok(()),
        ),
        (
            "a volume shared with a pod on the node counts once",
            pod("p", &["csi-ebs-0"]).build_info(),
            vec![on("e", &["csi-ebs-0"])],
            &[],
            Some(1),
            Ok(()),
        ),
        (
            "volumes all on a node already over its limit: nothing new",
            pod("p", &["csi-ebs-0"]).build_info(),
            vec![on("e", &["csi-ebs-0", "csi-ebs-1"])],
            &[],
            Some(1),
            Ok(()),
        ),
        (
            "one new volume on a node already over its limit",
            pod("p", &["csi-ebs-0", "csi-ebs-2"]).build_info(),
            vec![on("e", &["csi-ebs-0", "csi-ebs-1"])],
            &[],
            Some(1),
            exceed.clone(),
        ),
        (
            "the same claim twice in one pod counts once",
            pod("p", &["csi-ebs-0", "csi-ebs-0"]).build_info(),
            vec![],
            &[],
            Some(1),
            Ok(()),
        ),
        (
            "a VolumeAttachment holds the only slot",
            pod("p", &["csi-ebs-0"]).build_info(),
            vec![],
            &["pv-ebs-1"],
            Some(1),
            exceed.clone(),
        ),
        (
            "a VolumeAttachment of the pod's own volume",
            pod("p", &["csi-ebs-0"]).build_info(),
            vec![],
            &["pv-ebs-0"],
            Some(1),
            Ok(()),
        ),
        (
            "a VolumeAttachment of a pod's volume counts once",
            pod("p", &["csi-ebs-1"]).build_info(),
            vec![on("e", &["csi-ebs-0"])],
            &["pv-ebs-0"],
            Some(2),
            Ok(()),
        ),
        (
            "an ephemeral claim counts",
            PodBuilder::new("p")
                .ephemeral_volume("scratch")
                .build_info(),
            vec![on("e", &["csi-ebs-0"])],
            &[],
            Some(1),
            exceed.clone(),
        ),
        (
            "an unbound claim counts for its class's provisioner",
            pod("p", &["unbound-0"]).build_info(),
            vec![on("e", &["csi-ebs-0"])],
            &[],
            Some(1),
            exceed.clone(),
        ),
        (
            "the same unbound claim on the node counts once",
            pod("p", &["unbound-0"]).build_info(),
            vec![on("e", &["unbound-0"])],
            &[],
            Some(1),
            Ok(()),
        ),
        (
            "an unbound claim without class is not counted",
            pod("p", &["noclass"]).build_info(),
            vec![on("e", &["csi-ebs-0"])],
            &[],
            Some(1),
            Ok(()),
        ),
        (
            "a non-CSI PV is not counted",
            pod("p", &["nfs"]).build_info(),
            vec![on("e", &["csi-ebs-0"])],
            &[],
            Some(1),
            Ok(()),
        ),
        (
            "another driver's volumes do not count",
            pod("p", &["csi-ebs-0"]).build_info(),
            vec![on("e", &["csi-gce-0", "csi-gce-1"])],
            &[],
            Some(1),
            Ok(()),
        ),
        (
            "a driver without a count has no limit",
            pod("p", &["csi-gce-0", "csi-gce-1", "csi-gce-2"]).build_info(),
            vec![on("e", &["csi-gce-3"])],
            &[],
            Some(0),
            Ok(()),
        ),
        (
            "a pod on the node whose claim is gone is not counted",
            pod("p", &["csi-ebs-1"]).build_info(),
            vec![on("e", &["ghost"])],
            &[],
            Some(1),
            Ok(()),
        ),
        (
            "a missing claim",
            pod("p", &["ghost"]).build_info(),
            vec![],
            &[],
            Some(1),
            Err(VolumeRejection::unresolvable(
                "looking up PVC default/ghost: persistentvolumeclaim \"ghost\" not found",
            )),
        ),
        (
            "a claim without a name",
            pod("p", &[""]).build_info(),
            vec![],
            &[],
            Some(1),
            Err(VolumeRejection::error("PersistentVolumeClaim had no name")),
        ),
    ];
    for (name, new, existing, attachments, limit, want) in cases {
        assert_eq!(
            run(&new, existing, attachments, state(limit, true)),
            want,
            "{name}"
        );
    }
}

#[test]
fn an_ephemeral_claim_not_owned_by_the_pod_is_an_error() {
    let p = PodBuilder::new("p")
        .ephemeral_volume("scratch")
        .build_info();
    let r = run(&p, vec![], &[], state(Some(5), false)).unwrap_err();
    assert_eq!(r.code, Code::Error);
    assert_eq!(
        r.reason,
        "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
    );
}

#[test]
fn node_without_csi_node_or_with_an_unreadable_one() {
    let mut s = state(Some(0), true);
    let new = new_pod_csi_volumes(&pod("p", &["csi-ebs-0"]).build_info(), &s).unwrap();
    let n2 = NodeBuilder::new("n2").build_info_with([]);
    assert_eq!(
        check_csi_limits(&new, &n2, &s),
        Ok(()),
        "no CSINode: no limit"
    );
    let n1 = NodeBuilder::new("n1").build_info_with([]);
    assert_eq!(
        check_csi_limits(&new, &n1, &s),
        Err(VolumeRejection::unschedulable(REASON_MAX_VOLUME_COUNT)),
        "a count of 0"
    );
    let e = s
        .apply_csi_node(&csi_node("n1", &[(EBS, Some(-1))]))
        .unwrap_err();
    let r = check_csi_limits(&new, &n1, &s).unwrap_err();
    assert_eq!(r, VolumeRejection::invalid(&e));
    assert_eq!(
        r.reason,
        "CSINode n1: spec.drivers[0].allocatable.count: -1 must be greater than or equal to 0"
    );
}

#[test]
fn new_volumes_are_told_apart_by_driver_and_handle() {
    let s = state(Some(1), true);
    let got = new_pod_csi_volumes(
        &pod("p", &["csi-ebs-0", "unbound-1", "nfs", "noclass"]).build_info(),
        &s,
    )
    .unwrap();
    assert_eq!(
        got,
        [
            CsiVolumeId::Handle {
                driver: EBS.into(),
                handle: "ebs-vol-0".into()
            },
            CsiVolumeId::UnboundClaim {
                driver: EBS.into(),
                namespace: "default".into(),
                claim: "unbound-1".into()
            },
        ]
    );
}
