//! VolumeBinding's Filter side: which of a pod's claims are bound, which
//! wait for the scheduler's choice of node, and whether a node can take
//! them all (upstream `volumebinding/volume_binding.go` PreFilter and
//! Filter, `volumebinding/binder.go` `GetPodVolumeClaims` and
//! `FindPodVolumes`, and component-helpers' `FindMatchingVolume`).
//!
//! - [`pod_claims`] (PreFilter): sorts the pod's claims (PVC volumes and
//!   generic ephemeral volumes) into bound ones, each with its PV, and
//!   unbound `WaitForFirstConsumer` ones ("delay binding"), each with its
//!   StorageClass, and gathers the candidate PVs of each delay-binding
//!   class. An unbound claim of any other kind (an `Immediate` class, no
//!   class, a class not found, or pre-bound by `spec.volumeName` but not
//!   yet bind-completed) makes the pod wait for the PV controller.
//! - [`find_pod_volumes`] (Filter, per node): the bound claims' PVs must
//!   reach the node; each delay-binding claim needs an available PV the
//!   node can reach ([`find_matching_volume`], no PV taken twice) or a
//!   class that can provision there; the answer is the
//!   [`VolumeDecisions`] that Reserve and PreBind act on, or the
//!   [`BindingConflicts`] in upstream's order.
//!
//! - [`plan`] (Reserve): the same two for the granted node, as a
//!   [`VolumePlan`] the coordinator assumes ([`VolumePlan::assume`], so no
//!   other grant takes the PVs) and its PreBind writes, then waits on
//!   ([`check_bindings`]); the arbiter's bind check and `simulate` take
//!   their plans there, so the decisions are made in one place.
//!
//! # Not mirrored
//! - Storage capacity (CSIStorageCapacity): not tracked, so storage is
//!   always sufficient and [`BindingConflict::NotEnoughSpace`] is never
//!   produced (upstream checks it only for CSI drivers with
//!   `storageCapacity: true`).
//! - In-tree PVs migrated to CSI (upstream translates a bound PV's node
//!   affinity through the CSINode's migration annotation): the PV's own
//!   `nodeAffinity` is read.
//! - PreFilter's node narrowing (`GetEligibleNodes`, from bound local PVs'
//!   hostname affinity): an optimisation only; Filter rejects the same
//!   nodes.
//! - An empty `volume.kubernetes.io/selected-node` value: upstream treats
//!   the key's presence as a selected node (`""`, matching no node); the
//!   compiled claim keeps only non-empty values, so such a claim is
//!   matched like one without the annotation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::model::{Pv, PvPhase, Pvc, StorageClass, VolumeBindingMode};
use super::state::{Lookup, VolumeState};
use super::{VolumeRejection, claim_not_found, ephemeral_not_owned};
use crate::framework::{Code, Status};
use crate::pod_info::PodInfo;

/// Upstream `ErrReasonNodeConflict`: a bound PV's node affinity does not
/// match the node.
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// Upstream `ErrReasonBindConflict`: an unbound claim finds neither a PV
/// nor a way to provision one on the node.
pub const REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// Upstream `ErrReasonNotEnoughSpace` (storage capacity; never produced
/// here, see the module docs).
pub const REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// Upstream `ErrReasonPVNotExist`: a bound claim's PV is not found.
pub const REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// PreFilter's reason for a claim that should already be bound
/// (`UnschedulableAndUnresolvable`).
pub const REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// The provisioner of classes that cannot provision (upstream
/// `NotSupportedProvisioner`): local static PVs only.
pub const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// A bound claim (`spec.volumeName` and bind-completed) and its PV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundClaim {
    /// The claim.
    pub claim: Arc<Pvc>,
    /// Its PV; `None` when not found (Filter's [`REASON_PV_NOT_EXIST`]).
    pub pv: Option<Arc<Pv>>,
}

/// An unbound claim of a `WaitForFirstConsumer` class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayClaim {
    /// The claim.
    pub claim: Arc<Pvc>,
    /// Its class (provisioner, `allowedTopologies`).
    pub class: Arc<StorageClass>,
}

/// PreFilter's result (upstream `PodVolumeClaims`): the pod's claims
/// sorted by binding state, in `spec.volumes` order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodClaims {
    /// Bound claims.
    pub bound: Vec<BoundClaim>,
    /// Unbound `WaitForFirstConsumer` claims.
    pub delay_binding: Vec<DelayClaim>,
    /// Class name → the PVs of that class a delay-binding claim may take:
    /// `Available` and without `claimRef`, or pre-bound (`claimRef`) to one
    /// of the pod's delay-binding claims; sorted by name, so ties between
    /// equally small PVs always go the same way.
    pub candidate_pvs: BTreeMap<Arc<str>, Vec<Arc<Pv>>>,
}

/// A decision to bind a claim to an existing PV (upstream `BindingInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StaticBinding {
    /// The claim's name (in the pod's namespace).
    pub claim: Arc<str>,
    /// The PV's name.
    pub pv: Arc<str>,
}

/// What VolumeBinding decided for one pod on one node (upstream
/// `PodVolumes`): plain data for Reserve and PreBind, which write the
/// PV's `claimRef` for each static binding and the claim's
/// `volume.kubernetes.io/selected-node` for each provision. Both empty:
/// every claim is bound already.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct VolumeDecisions {
    /// Claims matched to existing PVs, claims in increasing order of
    /// requested size (the order they were matched in).
    pub static_bindings: Vec<StaticBinding>,
    /// Names of the claims (in the pod's namespace) to provision on the
    /// node.
    pub dynamic_provisions: Vec<Arc<str>>,
}

impl VolumeDecisions {
    /// Nothing to bind or provision.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.static_bindings.is_empty() && self.dynamic_provisions.is_empty()
    }
}

/// One reason a node cannot take a pod's volumes, in upstream's order
/// (the derived `Ord` is that order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BindingConflict {
    /// [`REASON_NODE_CONFLICT`].
    NodeAffinity,
    /// [`REASON_BIND_CONFLICT`].
    NoVolumeToBind,
    /// [`REASON_NOT_ENOUGH_SPACE`] (never produced; see the module docs).
    NotEnoughSpace,
    /// [`REASON_PV_NOT_EXIST`].
    PvNotExist,
}

impl BindingConflict {
    /// Upstream's reason text.
    #[must_use]
    pub const fn reason(self) -> &'static str {
        match self {
            BindingConflict::NodeAffinity => REASON_NODE_CONFLICT,
            BindingConflict::NoVolumeToBind => REASON_BIND_CONFLICT,
            BindingConflict::NotEnoughSpace => REASON_NOT_ENOUGH_SPACE,
            BindingConflict::PvNotExist => REASON_PV_NOT_EXIST,
        }
    }
}

/// Why a node cannot take a pod's volumes: one or more
/// [`BindingConflict`]s, in upstream's order, each once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BindingConflicts(pub Vec<BindingConflict>);

impl BindingConflicts {
    /// The reason texts, in order.
    pub fn reasons(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.0.iter().map(|c| c.reason())
    }

    /// Upstream's Filter status: `UnschedulableAndUnresolvable` with every
    /// reason, for `plugin`.
    #[must_use]
    pub fn into_status(self, plugin: &'static str) -> Status {
        Status {
            code: Code::UnschedulableAndUnresolvable,
            reasons: self.reasons().map(Into::into).collect(),
            plugin,
        }
    }
}

/// The claim a pod volume names, or why the pod must wait: the first
/// pass of [`pod_claims`] (upstream `podHasPVCs`).
fn checked_claim<'a>(
    pod: &PodInfo,
    state: &'a VolumeState,
    name: &str,
    ephemeral: bool,
) -> Result<&'a Arc<Pvc>, VolumeRejection> {
    let claim = match state.claim(&pod.key.namespace, name) {
        Lookup::Found(c) => c,
        Lookup::Invalid(e) => return Err(VolumeRejection::invalid(e)),
        Lookup::Missing if ephemeral => {
            return Err(VolumeRejection::unresolvable(format!(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \
                 \"{name}\""
            )));
        }
        Lookup::Missing => return Err(VolumeRejection::unresolvable(claim_not_found(name))),
    };
    if claim.lost {
        return Err(VolumeRejection::unresolvable(format!(
            "persistentvolumeclaim \"{name}\" bound to non-existent persistentvolume \"{}\"",
            claim.volume_name.as_deref().unwrap_or("")
        )));
    }
    if claim.deleting {
        return Err(VolumeRejection::unresolvable(format!(
            "persistentvolumeclaim \"{name}\" is being deleted"
        )));
    }
    if ephemeral && claim.controller_uid.as_deref() != Some(&*pod.uid) {
        return Err(VolumeRejection::unresolvable(ephemeral_not_owned(
            &pod.key.namespace,
            name,
            pod,
        )));
    }
    Ok(claim)
}

/// The class of an unbound claim when it is `WaitForFirstConsumer`
/// (upstream `IsDelayBindingMode`): `None` for no class, a class not
/// found, or an `Immediate` class.
fn delay_binding_class(
    claim: &Pvc,
    state: &VolumeState,
) -> Result<Option<Arc<StorageClass>>, VolumeRejection> {
    let Some(name) = claim.storage_class_name.as_deref() else {
        return Ok(None);
    };
    let class = match state.storage_class(name) {
        Lookup::Found(c) => c,
        Lookup::Invalid(e) => return Err(VolumeRejection::invalid(e)),
        Lookup::Missing => return Ok(None),
    };
    match class.binding_mode {
        Some(VolumeBindingMode::WaitForFirstConsumer) => Ok(Some(Arc::clone(class))),
        Some(VolumeBindingMode::Immediate) => Ok(None),
        None => Err(VolumeRejection::error(format!(
            "VolumeBindingMode not set for StorageClass \"{name}\""
        ))),
    }
}

/// Whether `pv` is pre-bound or bound to `claim` (upstream
/// `IsVolumeBoundToClaim`): its `claimRef` names the claim's namespace and
/// name, and the claim's uid when the reference has one.
#[must_use]
pub fn is_volume_bound_to_claim(pv: &Pv, claim: &Pvc) -> bool {
    pv.claim_ref.as_ref().is_some_and(|r| {
        r.name == claim.name
            && r.namespace == claim.namespace
            && r.uid.as_ref().is_none_or(|u| *u == claim.uid)
    })
}

/// Whether a node with `labels` satisfies `pv`'s required node affinity
/// (upstream `CheckNodeAffinity`, which matches a node made of the labels
/// alone, so a `matchFields` term on `metadata.name` never matches). A PV
/// without node affinity is reachable from every node.
#[must_use]
pub fn pv_reaches_node(pv: &Pv, labels: &BTreeMap<String, String>) -> bool {
    pv.node_affinity
        .as_ref()
        .is_none_or(|sel| sel.matches("", labels))
}

/// PreFilter: the pod's claims by binding state (upstream `podHasPVCs`
/// then `GetPodVolumeClaims`). `Ok(None)`: the pod uses no claim, the
/// plugin skips it.
///
/// # Errors
/// First, over the pod's volumes in order, `UnschedulableAndUnresolvable`
/// with upstream's text for:
/// - a claim not found: `persistentvolumeclaim "<name>" not found`, or for
///   an ephemeral volume `waiting for ephemeral volume controller to
///   create the persistentvolumeclaim "<name>"`;
/// - a claim whose `status.phase` is `Lost`: `persistentvolumeclaim
///   "<name>" bound to non-existent persistentvolume "<pv>"` (a bound
///   claim whose PV is simply not found passes here: Filter reports
///   [`REASON_PV_NOT_EXIST`] on every node, as upstream);
/// - a claim being deleted: `persistentvolumeclaim "<name>" is being deleted`;
/// - an ephemeral volume's claim the pod does not own: `PVC <ns>/<claim>
///   was not created for pod <ns>/<pod> (pod is not owner)`;
/// - a claim that cannot be read (its [`super::VolumeError`]).
///
/// Then, over the unbound claims: `Error` `VolumeBindingMode not set for
/// StorageClass "<name>"` (upstream `AsStatus`), or an unreadable class's
/// error (`UnschedulableAndUnresolvable`); then
/// [`REASON_UNBOUND_IMMEDIATE`] (`UnschedulableAndUnresolvable`) when an
/// unbound claim is not `WaitForFirstConsumer` or is pre-bound by
/// `spec.volumeName`. A bound claim whose PV cannot be read is rejected
/// with the PV's error.
pub fn pod_claims(
    pod: &PodInfo,
    state: &VolumeState,
) -> Result<Option<PodClaims>, VolumeRejection> {
    let Some(volumes) = pod.volumes.as_deref().filter(|v| !v.claims.is_empty()) else {
        return Ok(None);
    };
    let mut claims = Vec::with_capacity(volumes.claims.len());
    for c in &volumes.claims {
        claims.push(checked_claim(pod, state, &c.claim, c.ephemeral)?);
    }
    let mut out = PodClaims::default();
    let mut unbound_immediate = false;
    for claim in claims {
        if claim.is_bound() {
            let pv = match claim.volume_name.as_deref().map(|n| state.pv(n)) {
                Some(Lookup::Found(pv)) => Some(Arc::clone(pv)),
                Some(Lookup::Invalid(e)) => return Err(VolumeRejection::invalid(e)),
                Some(Lookup::Missing) | None => None,
            };
            out.bound.push(BoundClaim {
                claim: Arc::clone(claim),
                pv,
            });
            continue;
        }
        match delay_binding_class(claim, state)? {
            Some(class) if claim.volume_name.is_none() => out.delay_binding.push(DelayClaim {
                claim: Arc::clone(claim),
                class,
            }),
            _ => unbound_immediate = true,
        }
    }
    if unbound_immediate {
        return Err(VolumeRejection::unresolvable(REASON_UNBOUND_IMMEDIATE));
    }
    for d in &out.delay_binding {
        if !out.candidate_pvs.contains_key(&d.class.name) {
            let pvs = candidate_pvs(&d.class.name, &out.delay_binding, state);
            out.candidate_pvs.insert(d.class.name.clone(), pvs);
        }
    }
    Ok(Some(out))
}

/// The PVs of class `class` that one of `delay` may take, sorted by name.
/// O(PVs in the state).
fn candidate_pvs(class: &str, delay: &[DelayClaim], state: &VolumeState) -> Vec<Arc<Pv>> {
    let mut pvs: Vec<Arc<Pv>> = state
        .pvs()
        .filter(|pv| pv.storage_class_name.as_deref() == Some(class))
        .filter(|pv| match pv.claim_ref {
            None => pv.phase == Some(PvPhase::Available),
            Some(_) => delay.iter().any(|d| is_volume_bound_to_claim(pv, &d.claim)),
        })
        .cloned()
        .collect();
    pvs.sort_by(|a, b| a.name.cmp(&b.name));
    pvs
}

/// The PV `claim` takes on a node with `labels` among `pvs` (upstream
/// `FindMatchingVolume`, scheduler path), skipping those `taken` says
/// another claim of the pod took.
///
/// A PV is skipped when taken, bound or pre-bound to another claim,
/// smaller than the request, of another `volumeMode` or
/// `volumeAttributesClassName`, or being deleted. A PV pre-bound to the
/// claim (`claimRef`) wins outright: it is the answer if the node can
/// reach it and there is no answer otherwise. Any other PV must be
/// `Available`, match the claim's selector, class and node affinity and
/// have every access mode the claim asks; the smallest such PV is the
/// answer (the first in `pvs` order among equals).
pub fn find_matching_volume<'a>(
    claim: &Pvc,
    pvs: &'a [Arc<Pv>],
    labels: &BTreeMap<String, String>,
    taken: impl Fn(&str) -> bool,
) -> Option<&'a Arc<Pv>> {
    let mut smallest: Option<&'a Arc<Pv>> = None;
    for pv in pvs {
        if taken(&pv.name)
            || (pv.claim_ref.is_some() && !is_volume_bound_to_claim(pv, claim))
            || pv.capacity_bytes < claim.requested_bytes
            || pv.volume_mode != claim.volume_mode
            || pv.volume_attributes_class != claim.volume_attributes_class
            || pv.deleting
        {
            continue;
        }
        let reaches = pv_reaches_node(pv, labels);
        if is_volume_bound_to_claim(pv, claim) {
            return reaches.then_some(pv);
        }
        let fits = pv.phase == Some(PvPhase::Available)
            && claim
                .selector
                .as_ref()
                .is_none_or(|s| s.matches(&pv.labels))
            && pv.storage_class_name == claim.storage_class_name
            && reaches
            && pv.access_modes.contains_all(claim.access_modes);
        if fits && smallest.is_none_or(|s| s.capacity_bytes > pv.capacity_bytes) {
            smallest = Some(pv);
        }
    }
    smallest
}

/// Whether `class` can provision a volume for a node with `labels`
/// (upstream `checkVolumeProvisions`, without the storage capacity check):
/// it names a provisioner other than [`NOT_SUPPORTED_PROVISIONER`] and its
/// `allowedTopologies` admit the node.
#[must_use]
pub fn can_provision(class: &StorageClass, labels: &BTreeMap<String, String>) -> bool {
    !class.provisioner.is_empty()
        && &*class.provisioner != NOT_SUPPORTED_PROVISIONER
        && class.allows(labels)
}

/// How the bound claims fare on a node (upstream `checkBoundClaims`): the
/// first claim whose PV is missing, or whose PV the node cannot reach,
/// decides; later claims are not looked at.
fn check_bound_claims(
    bound: &[BoundClaim],
    labels: &BTreeMap<String, String>,
) -> Option<BindingConflict> {
    bound.iter().find_map(|b| match &b.pv {
        None => Some(BindingConflict::PvNotExist),
        Some(pv) if !pv_reaches_node(pv, labels) => Some(BindingConflict::NodeAffinity),
        Some(_) => None,
    })
}

/// The delay-binding claims' decisions on a node, or `None` when one of
/// them can neither find a PV nor be provisioned there (upstream
/// `FindPodVolumes` after the bound claims).
fn decide_delay_claims(
    claims: &PodClaims,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> Option<VolumeDecisions> {
    let mut to_match: Vec<&DelayClaim> = Vec::new();
    let mut to_provision: Vec<&DelayClaim> = Vec::new();
    for d in &claims.delay_binding {
        match d.claim.selected_node.as_deref() {
            // Provisioning already started for another node.
            Some(n) if n != node_name => return None,
            Some(_) => to_provision.push(d),
            None => to_match.push(d),
        }
    }
    // Smallest requests first, so each takes the smallest PV that fits.
    to_match.sort_by_key(|d| d.claim.requested_bytes);
    let mut decisions = VolumeDecisions::default();
    for d in to_match {
        let pvs = claims
            .candidate_pvs
            .get(&d.class.name)
            .map_or(&[][..], Vec::as_slice);
        let taken = |name: &str| decisions.static_bindings.iter().any(|b| &*b.pv == name);
        match find_matching_volume(&d.claim, pvs, labels, taken) {
            Some(pv) => decisions.static_bindings.push(StaticBinding {
                claim: d.claim.name.clone(),
                pv: pv.name.clone(),
            }),
            None => to_provision.push(d),
        }
    }
    for d in to_provision {
        if !can_provision(&d.class, labels) {
            return None;
        }
        decisions.dynamic_provisions.push(d.claim.name.clone());
    }
    Some(decisions)
}

/// Filter: whether the node `node_name` with `labels` can take the pod's
/// volumes ([`PodClaims`] from [`pod_claims`]), and what Reserve and
/// PreBind are to do there (upstream `FindPodVolumes`).
///
/// Bound claims: each PV's node affinity must match the node. Unbound
/// `WaitForFirstConsumer` claims: one whose `selected-node` names another
/// node rejects the node at once; one whose `selected-node` is this node
/// is to be provisioned; the others, smallest request first, each take the
/// PV [`find_matching_volume`] finds (no PV twice), or else are to be
/// provisioned, which [`can_provision`] must allow. Storage capacity is
/// not checked (always sufficient).
///
/// # Errors
/// [`BindingConflicts`]: [`BindingConflict::NodeAffinity`],
/// [`BindingConflict::NoVolumeToBind`], [`BindingConflict::PvNotExist`],
/// in that order, as many as apply (upstream's Filter status,
/// `UnschedulableAndUnresolvable`).
pub fn find_pod_volumes(
    claims: &PodClaims,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<VolumeDecisions, BindingConflicts> {
    let mut conflicts: Vec<BindingConflict> = check_bound_claims(&claims.bound, labels)
        .into_iter()
        .collect();
    let decisions = if claims.delay_binding.is_empty() {
        Some(VolumeDecisions::default())
    } else {
        decide_delay_claims(claims, node_name, labels)
    };
    if decisions.is_none() {
        conflicts.push(BindingConflict::NoVolumeToBind);
    }
    conflicts.sort_unstable();
    match decisions {
        Some(d) if conflicts.is_empty() => Ok(d),
        _ => Err(BindingConflicts(conflicts)),
    }
}

/// Upstream's plugin name: the arbiter's bind check and the coordinator's
/// Reserve and PreBind run under it.
pub const PLUGIN_NAME: &str = "VolumeBinding";

/// What Reserve decided for one granted pod on its node, and what PreBind
/// writes and then waits for: the [`VolumeDecisions`] of
/// [`find_pod_volumes`] for that node, with the pod's namespace and how
/// long PreBind may wait (`VolumeBindingArgs.bindTimeoutSeconds`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumePlan {
    /// The pod's (and its claims') namespace.
    pub namespace: Arc<str>,
    /// The node granted.
    pub node: Arc<str>,
    /// The PVs to bind and the claims to provision.
    pub decisions: VolumeDecisions,
    /// How long PreBind waits for the claims to be bound.
    pub bind_timeout: Duration,
}

impl VolumePlan {
    /// Reserve: shows the decisions in `state` as if written (each static
    /// PV's `claimRef` names its claim, each provisioned claim names the
    /// node), so no other pod's decision takes the same PV; pods sharing a
    /// claim hold the same assumption. Undone by [`VolumePlan::forget`].
    pub fn assume(&self, state: &mut VolumeState) {
        for b in &self.decisions.static_bindings {
            state.assume_pv_claim(&b.pv, &self.namespace, &b.claim);
        }
        for c in &self.decisions.dynamic_provisions {
            state.assume_selected_node(&self.namespace, c, &self.node);
        }
    }

    /// Unreserve (or done): drops this plan's holds on the assumptions of
    /// [`VolumePlan::assume`].
    pub fn forget(&self, state: &mut VolumeState) {
        for b in &self.decisions.static_bindings {
            state.forget_pv_claim(&b.pv);
        }
        for c in &self.decisions.dynamic_provisions {
            state.forget_selected_node(&self.namespace, c);
        }
    }
}

/// Reserve's decision for `pod` on the node `node` with `labels`: what
/// [`pod_claims`] and [`find_pod_volumes`] decide on `state`, as a
/// [`VolumePlan`] waiting up to `bind_timeout`; `Ok(None)` when the pod
/// has no claim to bind or provision (none, or all bound). The bind
/// arbiter's check and `simulate` take their plans here.
///
/// # Errors
/// Why the node cannot take the pod's volumes: PreFilter's reason, or
/// Filter's reasons joined by `", "`.
pub fn plan(
    pod: &PodInfo,
    node: &Arc<str>,
    labels: &BTreeMap<String, String>,
    state: &VolumeState,
    bind_timeout: Duration,
) -> Result<Option<VolumePlan>, std::borrow::Cow<'static, str>> {
    let claims = match pod_claims(pod, state) {
        Ok(None) => return Ok(None),
        Ok(Some(c)) => c,
        Err(r) => return Err(r.reason),
    };
    let decisions = find_pod_volumes(&claims, node, labels)
        .map_err(|c| c.reasons().collect::<Vec<_>>().join(", "))?;
    Ok((!decisions.is_empty()).then(|| VolumePlan {
        namespace: pod.key.namespace.clone(),
        node: node.clone(),
        decisions,
        bind_timeout,
    }))
}

/// PreBind's wait condition (upstream `checkBindings`): whether every
/// claim of `plan` is bound, in `state` as the watch shows it, to a PV
/// that a node with `labels` can reach. `Ok(false)`: not yet.
///
/// # Errors
/// The binding cannot complete as decided, so PreBind fails at once:
/// - a claim or its PV deleted: `persistentvolumeclaim "<c>" not found`,
///   `persistentvolume "<pv>" not found`;
/// - a static binding's PV now bound or pre-bound to another claim:
///   `persistentvolume "<pv>" was bound to another claim`;
/// - a provisioned claim whose `volume.kubernetes.io/selected-node` was
///   removed (the provisioner gave up) or names another node:
///   `selectedNode annotation reset for PVC "<c>"`;
/// - a claim bound to a PV the node cannot reach: `pv "<pv>" node affinity
///   doesn't match node "<node>"`.
pub fn check_bindings(
    plan: &VolumePlan,
    state: &VolumeState,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let claim_of = |name: &str| match state.claim(&plan.namespace, name) {
        Lookup::Found(c) => Ok(c),
        Lookup::Invalid(e) => Err(e.to_string()),
        Lookup::Missing => Err(claim_not_found(name)),
    };
    // A bound claim's PV must reach the node; `Ok(false)` while the PV is
    // not seen yet.
    let bound_pv_reaches = |claim: &Pvc| -> Result<bool, String> {
        let pv_name = claim.volume_name.as_deref().unwrap_or("");
        match state.pv(pv_name) {
            Lookup::Found(pv) if pv_reaches_node(pv, labels) => Ok(true),
            Lookup::Found(_) => Err(format!(
                "pv \"{pv_name}\" node affinity doesn't match node \"{}\"",
                plan.node
            )),
            Lookup::Invalid(e) => Err(e.to_string()),
            Lookup::Missing => Ok(false),
        }
    };
    let mut all = true;
    for b in &plan.decisions.static_bindings {
        let claim = claim_of(&b.claim)?;
        match state.pv(&b.pv) {
            Lookup::Found(pv) if pv.claim_ref.is_some() && !is_volume_bound_to_claim(pv, claim) => {
                return Err(format!(
                    "persistentvolume \"{}\" was bound to another claim",
                    b.pv
                ));
            }
            Lookup::Found(_) => {}
            Lookup::Invalid(e) => return Err(e.to_string()),
            Lookup::Missing => return Err(super::not_found("persistentvolume", &b.pv)),
        }
        all &= claim.is_bound() && bound_pv_reaches(claim)?;
    }
    for name in &plan.decisions.dynamic_provisions {
        let claim = claim_of(name)?;
        if claim.is_bound() {
            all &= bound_pv_reaches(claim)?;
            continue;
        }
        if claim.selected_node.as_deref() != Some(&*plan.node) {
            return Err(format!("selectedNode annotation reset for PVC \"{name}\""));
        }
        all = false;
    }
    Ok(all)
}

#[cfg(test)]
mod tests;
