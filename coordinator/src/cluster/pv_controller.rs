//! The writes of VolumeBinding's PreBind as objects, and a stand-in for the
//! cluster's PV controller and an external provisioner, which finish what
//! PreBind starts.
//!
//! PreBind only starts a binding: it sets a static PV's `spec.claimRef`
//! ([`with_claim_ref`], upstream `GetBindVolumeToClaim`), or annotates a
//! claim with `volume.kubernetes.io/selected-node`. On a real cluster
//! kube-controller-manager's PV controller then binds the two (the claim's
//! `spec.volumeName` and `pv.kubernetes.io/bind-completed`, both `Bound`:
//! [`completed`]) and the StorageClass's provisioner creates a PV on the
//! selected node ([`provisioned_pv`]). The embedded cluster has neither,
//! so it runs these at once when PreBind writes; the kube-lab end-to-end
//! test runs them as the controllers would, from its own loop.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    LocalVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
    PersistentVolumeSpec, PersistentVolumeStatus, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::ClaimTarget;
use flotilla_shared::volumes::model::{
    ANNOTATION_BETA_STORAGE_CLASS, ANNOTATION_BIND_COMPLETED, ANNOTATION_SELECTED_NODE,
};

/// The PV controller's annotation on objects it bound (`"yes"`).
pub const ANNOTATION_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Where a provisioned PV's `local` volume lives on its node
/// (`<path>/<claim uid>`).
pub const PROVISIONED_PATH: &str = "/var/lib/flotilla-provisioner";
/// The node label a provisioned PV's node affinity names.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Whether `pv`'s `claimRef` names `claim` (namespace and name, and uid
/// when the reference has one).
#[must_use]
pub fn names_claim(pv: &PersistentVolume, claim: &ClaimTarget<'_>) -> bool {
    pv.spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|r| {
            r.name.as_deref() == Some(claim.name)
                && r.namespace.as_deref().unwrap_or("default") == claim.namespace
                && r.uid
                    .as_deref()
                    .is_none_or(|u| u.is_empty() || u == claim.uid)
        })
}

/// PreBind's static binding: `pv` with `spec.claimRef` naming `claim` and
/// `pv.kubernetes.io/bound-by-controller: "yes"`; `Ok(None)` when it names
/// the claim already.
///
/// # Errors
/// `persistentvolume "<pv>" is already bound to claim <ns>/<name>` when
/// its `claimRef` names another claim.
pub fn with_claim_ref(
    pv: &PersistentVolume,
    claim: &ClaimTarget<'_>,
) -> Result<Option<PersistentVolume>, String> {
    if names_claim(pv, claim) {
        return Ok(None);
    }
    let spec = pv.spec.as_ref();
    if let Some(r) = spec.and_then(|s| s.claim_ref.as_ref()) {
        return Err(format!(
            "persistentvolume \"{}\" is already bound to claim {}/{}",
            pv.metadata.name.as_deref().unwrap_or(""),
            r.namespace.as_deref().unwrap_or("default"),
            r.name.as_deref().unwrap_or("")
        ));
    }
    let mut out = pv.clone();
    out.spec.get_or_insert_with(Default::default).claim_ref = Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some(claim.namespace.into()),
        name: Some(claim.name.into()),
        uid: Some(claim.uid.into()),
        ..ObjectReference::default()
    });
    annotate(&mut out.metadata, ANNOTATION_BOUND_BY_CONTROLLER, "yes");
    Ok(Some(out))
}

/// PreBind's provision: `claim` annotated with the selected node.
#[must_use]
pub fn with_selected_node(claim: &PersistentVolumeClaim, node: &str) -> PersistentVolumeClaim {
    let mut out = claim.clone();
    annotate(&mut out.metadata, ANNOTATION_SELECTED_NODE, node);
    out
}

/// The PV controller's last step for a PV whose `claimRef` names `claim`:
/// the PV `Bound`, the claim bound to it (`spec.volumeName`,
/// `pv.kubernetes.io/bind-completed` and `bound-by-controller`, `Bound`,
/// the PV's capacity and access modes in its status).
#[must_use]
pub fn completed(
    pv: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> (PersistentVolume, PersistentVolumeClaim) {
    let mut pv = pv.clone();
    pv.status = Some(PersistentVolumeStatus {
        phase: Some("Bound".into()),
        ..PersistentVolumeStatus::default()
    });
    let mut claim = claim.clone();
    let spec = claim.spec.get_or_insert_with(Default::default);
    spec.volume_name.clone_from(&pv.metadata.name);
    annotate(&mut claim.metadata, ANNOTATION_BIND_COMPLETED, "yes");
    annotate(&mut claim.metadata, ANNOTATION_BOUND_BY_CONTROLLER, "yes");
    let pv_spec = pv.spec.as_ref();
    claim.status = Some(PersistentVolumeClaimStatus {
        phase: Some("Bound".into()),
        capacity: pv_spec.and_then(|s| s.capacity.clone()),
        access_modes: pv_spec.and_then(|s| s.access_modes.clone()),
        ..PersistentVolumeClaimStatus::default()
    });
    (pv, claim)
}

/// The claim's class: the beta annotation, else `spec.storageClassName`.
#[must_use]
pub fn class_of(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_BETA_STORAGE_CLASS))
        .map(String::as_str)
        .or_else(|| claim.spec.as_ref()?.storage_class_name.as_deref())
        .filter(|c| !c.is_empty())
}

/// What a provisioner creates for `claim` on `node`: a PV named
/// `pvc-<claim uid>` of the claim's class, size, access modes and volume
/// mode, a `local` volume under [`PROVISIONED_PATH`], reachable only from
/// the node (node affinity on
/// `kubernetes.io/hostname`, the node's label or its name), its
/// `claimRef` naming the claim (a provisioned PV is pre-bound).
#[must_use]
pub fn provisioned_pv(claim: &PersistentVolumeClaim, node: &Node) -> PersistentVolume {
    let uid = claim.metadata.uid.as_deref().unwrap_or("");
    let name = claim.metadata.name.as_deref().unwrap_or("");
    let node_name = node.metadata.name.as_deref().unwrap_or("");
    let host = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HOSTNAME_LABEL))
        .map_or(node_name, String::as_str);
    let spec = claim.spec.as_ref();
    let mut capacity = BTreeMap::new();
    if let Some(size) = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
    {
        capacity.insert("storage".to_owned(), size.clone());
    }
    let target = ClaimTarget {
        namespace: claim.metadata.namespace.as_deref().unwrap_or("default"),
        name,
        uid,
    };
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(format!("pvc-{uid}")),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(capacity),
            access_modes: spec.and_then(|s| s.access_modes.clone()),
            storage_class_name: class_of(claim).map(str::to_owned),
            volume_mode: spec.and_then(|s| s.volume_mode.clone()),
            // The API requires a volume source; a node-local one fits the
            // hostname affinity.
            local: Some(LocalVolumeSource {
                path: format!("{PROVISIONED_PATH}/{uid}"),
                fs_type: None,
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: HOSTNAME_LABEL.into(),
                            operator: "In".into(),
                            values: Some(vec![host.into()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    };
    with_claim_ref(&pv, &target).ok().flatten().unwrap_or(pv)
}

fn annotate(meta: &mut ObjectMeta, key: &str, value: &str) {
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::testing::volumes::{PvBuilder, PvcBuilder};
    use flotilla_shared::volumes::{Pv, Pvc};

    const CLAIM: ClaimTarget<'static> = ClaimTarget {
        namespace: "default",
        name: "data",
        uid: "uid-data",
    };

    #[test]
    fn a_static_binding_is_the_claim_ref_and_refuses_another_claim() {
        let pv = PvBuilder::new("pv-1").class("local").available().build();
        let bound = with_claim_ref(&pv, &CLAIM).unwrap().expect("changed");
        assert!(names_claim(&bound, &CLAIM));
        assert_eq!(with_claim_ref(&bound, &CLAIM), Ok(None), "already");
        let other = ClaimTarget {
            name: "other",
            uid: "uid-other",
            ..CLAIM
        };
        assert_eq!(
            with_claim_ref(&bound, &other).unwrap_err(),
            "persistentvolume \"pv-1\" is already bound to claim default/data"
        );
    }

    #[test]
    fn completion_and_provisioning_give_objects_the_volume_model_reads_as_bound() {
        let claim = PvcBuilder::new("data")
            .class("fast")
            .storage("5Gi")
            .access_mode("ReadWriteOnce")
            .build();
        let node = flotilla_shared::testing::NodeBuilder::new("n1")
            .label(HOSTNAME_LABEL, "host-1")
            .build();
        let pv = provisioned_pv(&claim, &node);
        let model = Pv::try_from(&pv).unwrap();
        assert_eq!(model.capacity_bytes, 5 << 30);
        assert_eq!(model.storage_class_name.as_deref(), Some("fast"));
        assert!(model.claim_ref.is_some());
        let host = |h: &str| BTreeMap::from([(HOSTNAME_LABEL.to_owned(), h.to_owned())]);
        assert!(flotilla_shared::volumes::binding::pv_reaches_node(
            &model,
            &host("host-1")
        ));
        assert!(!flotilla_shared::volumes::binding::pv_reaches_node(
            &model,
            &host("host-2")
        ));
        let (pv, claim) = completed(&pv, &claim);
        let c = Pvc::try_from(&claim).unwrap();
        assert!(c.is_bound());
        assert_eq!(c.volume_name, Pv::try_from(&pv).unwrap().name.into());
    }
}
