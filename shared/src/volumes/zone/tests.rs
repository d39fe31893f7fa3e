//! Upstream `volume_zone_test.go` in shape: PVs with GA, beta and
//! multi-zone labels; bound, unbound and missing claims; nodes with and
//! without zone labels.

use super::*;
use crate::framework::Code;
use crate::testing::PodBuilder;
use crate::testing::volumes::{PvBuilder, PvcBuilder, storage_class};
use crate::volumes::model::{LABEL_BETA_REGION, LABEL_BETA_ZONE, LABEL_REGION, LABEL_ZONE};

fn state() -> VolumeState {
    let mut s = VolumeState::default();
    for pv in [
        PvBuilder::new("pv-a").label(LABEL_ZONE, "us-west1-a"),
        PvBuilder::new("pv-b")
            .label(LABEL_BETA_REGION, "us-west1")
            .label(LABEL_BETA_ZONE, "us-west1-b"),
        PvBuilder::new("pv-multi").label(LABEL_ZONE, "us-west1-b__us-west1-c"),
        PvBuilder::new("pv-nolabel"),
        PvBuilder::new("pv-bad").node_affinity("zone", "Near", &["a"]),
    ] {
        let _ = s.apply_pv(&pv.build());
    }
    for c in [
        PvcBuilder::new("claim-a").bound_to("pv-a"),
        PvcBuilder::new("claim-b").bound_to("pv-b"),
        PvcBuilder::new("claim-multi").bound_to("pv-multi"),
        PvcBuilder::new("claim-nolabel").bound_to("pv-nolabel"),
        PvcBuilder::new("claim-binding").volume_name("pv-a"),
        PvcBuilder::new("claim-gone-pv").bound_to("pv-gone"),
        PvcBuilder::new("claim-bad-pv").bound_to("pv-bad"),
        PvcBuilder::new("claim-wffc").class("wffc"),
        PvcBuilder::new("claim-immediate").class("immediate"),
        PvcBuilder::new("claim-noclass"),
        PvcBuilder::new("claim-nomode").class("nomode"),
        PvcBuilder::new("claim-ghost-class").class("ghost"),
    ] {
        s.apply_claim(&c.build()).unwrap();
    }
    for (name, mode) in [
        ("wffc", Some("WaitForFirstConsumer")),
        ("immediate", Some("Immediate")),
        ("nomode", None),
    ] {
        s.apply_storage_class(&storage_class(name, "csi.example.com", mode))
            .unwrap();
    }
    s
}

fn labels(l: &[(&str, &str)]) -> BTreeMap<String, String> {
    l.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// PreFilter then Filter, as the plugin runs them.
fn run(pod: &PodInfo, s: &VolumeState, node: &[(&str, &str)]) -> Result<(), VolumeRejection> {
    let pvs = pod_zone_pvs(pod, s)?;
    check_zone(&pvs, &labels(node))
}

fn pod(claims: &[&str]) -> PodInfo {
    PodBuilder::new("p").pvc_volumes(claims).build_info()
}

/// (name, pod, node labels, want: `Ok` or (code, reason)).
type Case<'a> = (
    &'a str,
    PodInfo,
    &'a [(&'a str, &'a str)],
    Result<(), (Code, String)>,
);

#[test]
fn volume_zone_table() {
    let s = state();
    let zone_a = [(LABEL_ZONE, "us-west1-a"), (LABEL_REGION, "us-west1")];
    let zone_b = [(LABEL_ZONE, "us-west1-b"), (LABEL_REGION, "us-west1")];
    let zone_c = [(LABEL_ZONE, "us-west1-c")];
    let beta_a = [(LABEL_BETA_ZONE, "us-west1-a")];
    let beta_b = [
        (LABEL_BETA_ZONE, "us-west1-b"),
        (LABEL_BETA_REGION, "us-west1"),
    ];
    let unresolvable = |r: &str| Err((Code::UnschedulableAndUnresolvable, r.to_owned()));
    let conflict = unresolvable(REASON_ZONE_CONFLICT);
    let cases: Vec<Case<'_>> = vec![
        (
            "pod without volumes",
            PodBuilder::new("p").build_info(),
            &zone_a,
            Ok(()),
        ),
        ("GA label matches", pod(&["claim-a"]), &zone_a, Ok(())),
        (
            "GA label mismatches",
            pod(&["claim-a"]),
            &zone_b,
            conflict.clone(),
        ),
        (
            "node without any zone label passes",
            pod(&["claim-a"]),
            &[("kubernetes.io/hostname", "n1")],
            Ok(()),
        ),
        (
            "GA PV label, node with the beta label only",
            pod(&["claim-a"]),
            &beta_a,
            conflict.clone(),
        ),
        (
            "node with a region but not the PV's zone key",
            pod(&["claim-a"]),
            &[(LABEL_REGION, "us-west1")],
            conflict.clone(),
        ),
        (
            "beta PV labels match GA node labels",
            pod(&["claim-b"]),
            &zone_b,
            Ok(()),
        ),
        (
            "beta PV labels match beta node labels",
            pod(&["claim-b"]),
            &beta_b,
            Ok(()),
        ),
        (
            "beta PV labels mismatch",
            pod(&["claim-b"]),
            &zone_a,
            conflict.clone(),
        ),
        (
            "multi-zone value, second zone",
            pod(&["claim-multi"]),
            &zone_c,
            Ok(()),
        ),
        (
            "multi-zone value, first zone",
            pod(&["claim-multi"]),
            &zone_b,
            Ok(()),
        ),
        (
            "multi-zone value, other zone",
            pod(&["claim-multi"]),
            &zone_a,
            conflict.clone(),
        ),
        (
            "every PV must match",
            pod(&["claim-a", "claim-multi"]),
            &zone_a,
            conflict.clone(),
        ),
        (
            "PV without zone labels",
            pod(&["claim-nolabel"]),
            &zone_a,
            Ok(()),
        ),
        (
            "volumeName without bind-completed reads the PV",
            pod(&["claim-binding"]),
            &zone_b,
            conflict,
        ),
        (
            "unbound WaitForFirstConsumer claim passes",
            pod(&["claim-wffc"]),
            &zone_a,
            Ok(()),
        ),
        (
            "unbound Immediate claim",
            pod(&["claim-immediate"]),
            &zone_a,
            unresolvable("PersistentVolume had no name"),
        ),
        (
            "missing claim",
            pod(&["ghost"]),
            &zone_a,
            unresolvable("persistentvolumeclaim \"ghost\" not found"),
        ),
        (
            "claim without name",
            pod(&[""]),
            &zone_a,
            unresolvable("PersistentVolumeClaim had no name"),
        ),
        (
            "bound to a PV not found",
            pod(&["claim-gone-pv"]),
            &zone_a,
            unresolvable("persistentvolume \"pv-gone\" not found"),
        ),
        (
            "unbound claim without class",
            pod(&["claim-noclass"]),
            &zone_a,
            unresolvable("PersistentVolumeClaim had no pv name and storageClass name"),
        ),
        (
            "class without binding mode",
            pod(&["claim-nomode"]),
            &zone_a,
            unresolvable("VolumeBindingMode not set for StorageClass \"nomode\""),
        ),
        (
            "class not found",
            pod(&["claim-ghost-class"]),
            &zone_a,
            unresolvable("storageclass.storage.k8s.io \"ghost\" not found"),
        ),
        (
            "PV with malformed node affinity names the PV and field",
            pod(&["claim-bad-pv"]),
            &zone_a,
            unresolvable(
                "PersistentVolume pv-bad: spec.nodeAffinity.required.nodeSelectorTerms[0]\
                 .matchExpressions[0].operator: unsupported operator \"Near\"",
            ),
        ),
    ];
    for (name, pod, node, want) in cases {
        let got = run(&pod, &s, node).map_err(|r| (r.code, r.reason.into_owned()));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn prefilter_keeps_only_pvs_with_zone_labels() {
    let s = state();
    let pvs = pod_zone_pvs(&pod(&["claim-a", "claim-nolabel", "claim-wffc"]), &s).unwrap();
    let names: Vec<&str> = pvs.iter().map(|p| &*p.name).collect();
    assert_eq!(names, ["pv-a"]);
    assert!(
        pod_zone_pvs(&pod(&["claim-nolabel"]), &s)
            .unwrap()
            .is_empty()
    );
    // Ephemeral claims have no PV to read yet: VolumeZone ignores them.
    let eph = PodBuilder::new("p")
        .ephemeral_volume("scratch")
        .build_info();
    assert!(pod_zone_pvs(&eph, &s).unwrap().is_empty());
}
