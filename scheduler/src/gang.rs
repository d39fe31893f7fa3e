//! The worker's side of gang scheduling: what it knows of PodGroups and their
//! members, and the members held at Permit.
//!
//! The coordinator routes every pending member of a PodGroup to one worker
//! (see the coordinator's `state::gang`), so this book sees the whole group:
//! its pending members (assigned to this worker), its bound members (bound
//! pods are broadcast to every worker) and its members waiting at Permit.
//!
//! # Permit, the Flotilla way
//! Upstream's Coscheduling Permit answers `Wait` until `minMember` members
//! are assumed or bound, then allows every waiting sibling; each is then
//! bound on its own. Here a member that must wait stays assumed in the
//! worker's cache and joins its group's [`WaitingGang`]; once the group
//! reaches `minMember` (waiting + bound + this one) every waiting member goes
//! to the coordinator in one `ProposeGang`, granted all or none.
//! Members are released (forgotten in the cache, re-queued with backoff)
//! when the proposal is refused, when a sibling fails and the group cannot
//! reach `minMember` any more (upstream's PostFilter), or when the oldest
//! waited longer than the group's `scheduleTimeoutSeconds` (else the
//! plugin's `permitWaitingTimeSeconds`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use flotilla_shared::PodInfo;
use flotilla_shared::gang::{self, Gang, GangApi, GangObject};
use flotilla_shared::pod_group::PodGroup;

/// Upstream default of `CoschedulingArgs.permitWaitingTimeSeconds`.
pub const DEFAULT_PERMIT_WAITING_TIME: Duration = Duration::from_secs(60);

/// A member held at Permit: the pod and the node it is assumed on.
pub type Placement = (Arc<PodInfo>, Arc<str>);

/// Members of one group waiting at Permit.
#[derive(Debug, Clone)]
pub struct WaitingGang {
    /// When the first of them started waiting.
    pub since: Instant,
    /// How long they may wait (the group's timeout).
    pub timeout: Duration,
    /// The members, in the order they were placed.
    pub members: Vec<Placement>,
}

/// What Permit decided for an assumed pod.
#[derive(Debug, Clone)]
pub enum PermitOutcome {
    /// Not a gang member (no PodGroup label): bind it alone.
    NotGang,
    /// Hold it: the group has fewer than `minMember` placed members.
    Wait,
    /// `minMember` reached: propose these members (every waiting one and
    /// this pod) together.
    Ready(String, Vec<Placement>),
    /// Rejected (Unschedulable) with upstream's message, e.g. `PodGroup not
    /// found`.
    Reject(String),
}

impl Book {
    /// Members of `g` bound, or allowed and being proposed.
    fn placed(&self, g: &str) -> usize {
        self.bound.get(g).map_or(0, HashSet::len) + self.proposed.get(g).map_or(0, HashSet::len)
    }

    /// `members` of `g` go to the coordinator: they count as placed.
    fn proposing(&mut self, g: &str, members: &[Placement]) {
        let set = self.proposed.entry(g.to_owned()).or_default();
        for (p, _) in members {
            set.insert(p.uid.clone());
        }
    }

    /// `uid` is no longer being proposed (bound, released or gone).
    fn not_proposing(&mut self, g: &str, uid: &str) {
        if let Some(set) = self.proposed.get_mut(g) {
            set.remove(uid);
            if set.is_empty() {
                self.proposed.remove(g);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Book {
    groups: HashMap<String, Arc<Gang>>,
    /// Group → uids of its non-terminal pods this worker knows (pending
    /// here, or bound anywhere).
    members: HashMap<String, HashSet<Arc<str>>>,
    /// Group → uids of its bound members.
    bound: HashMap<String, HashSet<Arc<str>>>,
    /// Member uid → group.
    group_of: HashMap<Arc<str>, String>,
    waiting: HashMap<String, WaitingGang>,
    /// Group → members allowed at Permit whose gang proposal is in flight
    /// (granted or not yet): they count as placed, as upstream's Permit
    /// counts assumed pods, until confirmed bound or released.
    proposed: HashMap<String, HashSet<Arc<str>>>,
    /// Groups PreFilter rejects until the instant (`podGroupBackoffSeconds`).
    backed_off: HashMap<String, Instant>,
    permit_waiting_time: Option<Duration>,
    pod_group_backoff: Option<Duration>,
}

/// The worker's PodGroup book, shared by the Coscheduling plugin (reads) and
/// the worker's watch task, scheduling thread and housekeeping (writes).
#[derive(Debug, Default)]
pub struct GangBook {
    inner: Mutex<Book>,
}

impl GangBook {
    /// An empty book.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the plugin arguments: default wait (`permitWaitingTimeSeconds`)
    /// and the group backoff after a PostFilter rejection
    /// (`podGroupBackoffSeconds`; `None` = no backoff, upstream's default).
    pub fn configure(&self, permit_waiting_time: Duration, pod_group_backoff: Option<Duration>) {
        let mut b = self.inner.lock();
        b.permit_waiting_time = Some(permit_waiting_time);
        b.pod_group_backoff = pod_group_backoff;
    }

    /// A PodGroup of either API was added or changed.
    pub fn apply(&self, g: &GangObject) {
        let gang = g.gang();
        self.inner
            .lock()
            .groups
            .insert(gang.key.clone(), Arc::new(gang));
    }

    /// A scheduler-plugins PodGroup was added or changed.
    pub fn apply_group(&self, g: &PodGroup) {
        let gang = Gang::from_pod_group(g);
        self.inner
            .lock()
            .groups
            .insert(gang.key.clone(), Arc::new(gang));
    }

    /// A PodGroup was deleted (its gang key, see [`gang::gang_of`]).
    pub fn delete_group(&self, key: &str) {
        self.inner.lock().groups.remove(key);
    }

    /// The gang `key`, if its PodGroup is known.
    #[must_use]
    pub fn group(&self, key: &str) -> Option<Arc<Gang>> {
        self.inner.lock().groups.get(key).cloned()
    }

    /// Upstream GangScheduling's PreEnqueue for a member of a
    /// `scheduling.k8s.io` group (other pods pass): `Err` with upstream's
    /// message while its PodGroup is unknown, is invalid, or has fewer pods
    /// than `gang.minCount` (a `basic` group passes).
    ///
    /// # Errors
    /// `waiting for pods's pod group "<name>" to appear in scheduling
    /// queue`; the PodGroup's field error; `waiting for minCount pods from a
    /// gang to appear in scheduling queue`.
    pub fn pre_enqueue(&self, pod: &PodInfo) -> Result<(), String> {
        let Some(g) = group_of(pod).filter(|g| gang::is_workload_key(g)) else {
            return Ok(());
        };
        let b = self.inner.lock();
        let name = pod.pod_group_name.as_deref().unwrap_or_default();
        // The scheduler names were checked by the coordinator, which sees
        // every pod of the group.
        gang::admission(name, b.groups.get(&g).map(|g| &**g), [])?;
        let Some(group) = b.groups.get(&g).filter(|g| g.min_count.is_some()) else {
            return Ok(());
        };
        let n = b.members.get(&g).map_or(0, HashSet::len);
        if n < group.min_members() {
            return Err(gang::WAITING_FOR_MIN_COUNT.to_owned());
        }
        Ok(())
    }

    /// The plugin that holds `pod` at Permit, if it is a member of a gang
    /// (`Coscheduling` or `GangScheduling`, by the API of its group).
    #[must_use]
    pub fn permit_plugin(pod: &PodInfo) -> Option<GangApi> {
        group_of(pod).map(|g| {
            if gang::is_workload_key(&g) {
                GangApi::GangScheduling
            } else {
                GangApi::Coscheduling
            }
        })
    }

    /// A pending pod was assigned to this worker. Returns whether it is a
    /// gang member.
    pub fn pod_pending(&self, pod: &PodInfo) -> bool {
        let Some(g) = group_of(pod) else {
            return false;
        };
        let mut b = self.inner.lock();
        b.members
            .entry(g.clone())
            .or_default()
            .insert(pod.uid.clone());
        b.group_of.insert(pod.uid.clone(), g);
        true
    }

    /// A pod is bound (by anyone).
    pub fn pod_bound(&self, pod: &PodInfo) {
        let Some(g) = group_of(pod) else {
            return;
        };
        let mut b = self.inner.lock();
        b.not_proposing(&g, &pod.uid);
        b.members
            .entry(g.clone())
            .or_default()
            .insert(pod.uid.clone());
        b.bound
            .entry(g.clone())
            .or_default()
            .insert(pod.uid.clone());
        b.group_of.insert(pod.uid.clone(), g);
    }

    /// A pod left (deleted, or no longer assigned here and not bound): it
    /// no longer counts, and stops waiting. Returns whether it was waiting
    /// at Permit (the caller forgets it in the cache: its room is free).
    pub fn pod_gone(&self, uid: &str) -> bool {
        let mut b = self.inner.lock();
        let Some(g) = b.group_of.remove(uid) else {
            return false;
        };
        let was_waiting = b
            .waiting
            .get(&g)
            .is_some_and(|w| w.members.iter().any(|(p, _)| &*p.uid == uid));
        if let Some(m) = b.members.get_mut(&g) {
            m.remove(uid);
        }
        if let Some(m) = b.bound.get_mut(&g) {
            m.remove(uid);
        }
        b.not_proposing(&g, uid);
        if let Some(w) = b.waiting.get_mut(&g) {
            w.members.retain(|(p, _)| &*p.uid != uid);
            if w.members.is_empty() {
                b.waiting.remove(&g);
            }
        }
        was_waiting
    }

    /// Whether `uid` is bound according to the book.
    #[must_use]
    pub fn is_bound(&self, uid: &str) -> bool {
        let b = self.inner.lock();
        b.group_of
            .get(uid)
            .and_then(|g| b.bound.get(g))
            .is_some_and(|s| s.contains(uid))
    }

    /// Upstream Coscheduling PreFilter: `Err(message)` (the caller makes it
    /// `UnschedulableAndUnresolvable`) when the group is backed off after a
    /// recent failure, or has fewer than `minMember` pods. A pod without a
    /// group, or whose PodGroup does not exist, passes (Permit rejects the
    /// latter).
    ///
    /// # Errors
    /// Upstream's messages: `podGroup <ns/name> failed recently`;
    /// `pre-filter pod <name> cannot find enough sibling pods, current pods
    /// number: <n>, minMember of group: <m>`.
    pub fn pre_filter(&self, pod: &PodInfo, now: Instant) -> Result<(), String> {
        let Some(g) = group_of(pod).filter(|g| !gang::is_workload_key(g)) else {
            return Ok(());
        };
        let mut b = self.inner.lock();
        let Some(group) = b.groups.get(&g).cloned() else {
            return Ok(());
        };
        match b.backed_off.get(&g) {
            Some(until) if *until > now => return Err(format!("podGroup {g} failed recently")),
            Some(_) => {
                b.backed_off.remove(&g);
            }
            None => {}
        }
        let n = b.members.get(&g).map_or(0, HashSet::len);
        if n < group.min_members() {
            return Err(format!(
                "pre-filter pod {} cannot find enough sibling pods, current pods number: {n}, minMember of group: {}",
                pod.key.name,
                group.min_count.unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// Upstream Coscheduling Permit for `pod`, just assumed on `node`:
    /// placed members (bound + waiting) + 1 ≥ `minMember` → [`PermitOutcome::Ready`]
    /// with every waiting member and this one; else it waits.
    pub fn permit(&self, pod: &Arc<PodInfo>, node: &Arc<str>, now: Instant) -> PermitOutcome {
        let Some(g) = group_of(pod) else {
            return PermitOutcome::NotGang;
        };
        let mut b = self.inner.lock();
        let Some(group) = b.groups.get(&g).cloned() else {
            return PermitOutcome::Reject(if gang::is_workload_key(&g) {
                // Upstream GangScheduling's Permit error.
                format!(
                    "failed to get podGroup {}/{}: podgroup.scheduling.k8s.io {:?} not found",
                    pod.key.namespace,
                    pod.pod_group_name.as_deref().unwrap_or_default(),
                    pod.pod_group_name.as_deref().unwrap_or_default()
                )
            } else {
                "PodGroup not found".to_owned()
            });
        };
        if group.api == GangApi::GangScheduling && group.min_count.is_none() {
            // `basic`: every member on its own.
            return PermitOutcome::NotGang;
        }
        let placed = b.placed(&g);
        let waiting = b.waiting.get(&g).map_or(0, |w| w.members.len());
        let min = group.min_members();
        if placed + waiting + 1 >= min {
            let mut members = b.waiting.remove(&g).map(|w| w.members).unwrap_or_default();
            members.push((pod.clone(), node.clone()));
            b.proposing(&g, &members);
            return PermitOutcome::Ready(g, members);
        }
        let timeout = group.wait_time(b.permit_waiting_time.unwrap_or(DEFAULT_PERMIT_WAITING_TIME));
        b.waiting
            .entry(g)
            .or_insert_with(|| WaitingGang {
                since: now,
                timeout,
                members: Vec::new(),
            })
            .members
            .push((pod.clone(), node.clone()));
        PermitOutcome::Wait
    }

    /// Upstream Coscheduling PostFilter for a member that fits nowhere:
    /// unless the group already has `minMember` placed members or misses at
    /// most 10 % of them, its waiting members are rejected (returned, to be
    /// released) and, with `podGroupBackoffSeconds`, the group is backed off
    /// when it has `minMember` pods. Returns the released members and the
    /// PostFilter message (`None` when nothing was rejected).
    pub fn post_filter(&self, pod: &PodInfo, now: Instant) -> (Vec<Placement>, Option<String>) {
        let Some(g) = group_of(pod).filter(|g| !gang::is_workload_key(g)) else {
            return (Vec::new(), None);
        };
        let mut b = self.inner.lock();
        let Some(group) = b.groups.get(&g).cloned() else {
            return (Vec::new(), None);
        };
        let min = group.min_count.unwrap_or_default().max(0);
        let placed = b.placed(&g);
        let waiting = b.waiting.get(&g).map_or(0, |w| w.members.len());
        let assigned = i32::try_from(placed + waiting).unwrap_or(i32::MAX);
        if assigned >= min {
            return (Vec::new(), None);
        }
        #[allow(clippy::cast_precision_loss)]
        let not_assigned = (min - assigned) as f32 / min as f32;
        if not_assigned <= 0.1 {
            return (Vec::new(), None);
        }
        let released = b.waiting.remove(&g).map(|w| w.members).unwrap_or_default();
        if let Some(backoff) = b.pod_group_backoff {
            let pods = b.members.get(&g).map_or(0, HashSet::len);
            if i32::try_from(pods).unwrap_or(i32::MAX) >= min {
                b.backed_off.insert(g.clone(), now + backoff);
            }
        }
        let msg = format!(
            "PodGroup {g} gets rejected due to Pod {} is unschedulable even after PostFilter",
            pod.key.name
        );
        (released, Some(msg))
    }

    /// A member of a `scheduling.k8s.io` gang fits nowhere: the group is
    /// rejected as a unit (upstream 1.37's pod group cycle: all or nothing on
    /// one snapshot), so its members waiting at Permit are released at once
    /// rather than at the timeout. Returns them (empty for other pods).
    /// `None` when the rule does not apply: not a member of a
    /// `scheduling.k8s.io` gang, a `basic` group, or a gang that already
    /// has `minCount` members bound (the others go pod by pod, as
    /// upstream's Permit then allows each).
    pub fn reject_workload_gang(&self, pod: &PodInfo) -> Option<Vec<Placement>> {
        let g = group_of(pod).filter(|g| gang::is_workload_key(g))?;
        let mut b = self.inner.lock();
        let group = b.groups.get(&g)?.clone();
        group.min_count?;
        if b.placed(&g) >= group.min_members() {
            return None;
        }
        Some(b.waiting.remove(&g).map(|w| w.members).unwrap_or_default())
    }

    /// A member of `pod`'s group was bound: when the members waiting at
    /// Permit, with the bound ones, now reach the group's minimum, they are
    /// allowed and returned, to be proposed together. (Upstream's Permit
    /// counts assumed pods too; here a member whose Permit ran while its
    /// siblings' gang Binding was in flight waits for their confirmation.)
    pub fn allow_waiting(&self, pod: &PodInfo) -> Option<(String, Vec<Placement>)> {
        self.allow_waiting_group(&group_of(pod)?)
    }

    /// [`GangBook::allow_waiting`] for group `g`: also after its PodGroup
    /// changed (`minCount` lowered, or turned `basic`: every waiting member
    /// goes on).
    pub fn allow_waiting_group(&self, g: &str) -> Option<(String, Vec<Placement>)> {
        let g = g.to_owned();
        let mut b = self.inner.lock();
        let group = b.groups.get(&g)?.clone();
        let waiting = b.waiting.get(&g)?.members.len();
        if b.placed(&g) + waiting < group.min_members() {
            return None;
        }
        let members = b.waiting.remove(&g)?.members;
        b.proposing(&g, &members);
        Some((g, members))
    }

    /// `members` of `group` were proposed and are not bound (the gang was
    /// refused, or their Bindings failed): they no longer count as placed.
    pub fn proposal_failed(&self, group: &str, members: &[Placement]) {
        let mut b = self.inner.lock();
        for (p, _) in members {
            b.not_proposing(group, &p.uid);
        }
    }

    /// Takes every waiting member of `group` (upstream Unreserve rejecting
    /// the waiting siblings).
    pub fn reject_waiting(&self, group: &str) -> Vec<Placement> {
        self.inner
            .lock()
            .waiting
            .remove(group)
            .map(|w| w.members)
            .unwrap_or_default()
    }

    /// Takes the groups whose oldest waiting member waited its timeout by
    /// `now`: (group, timeout, members).
    pub fn take_expired(&self, now: Instant) -> Vec<(String, Duration, Vec<Placement>)> {
        let mut b = self.inner.lock();
        let due: Vec<String> = b
            .waiting
            .iter()
            .filter(|(_, w)| now.saturating_duration_since(w.since) >= w.timeout)
            .map(|(g, _)| g.clone())
            .collect();
        due.into_iter()
            .filter_map(|g| b.waiting.remove(&g).map(|w| (g, w.timeout, w.members)))
            .collect()
    }

    /// Members waiting at Permit, all groups.
    #[must_use]
    pub fn waiting_len(&self) -> usize {
        self.inner
            .lock()
            .waiting
            .values()
            .map(|w| w.members.len())
            .sum()
    }
}

/// The key of the pod's gang, if it has one ([`gang::gang_of`]).
#[must_use]
pub fn group_of(pod: &PodInfo) -> Option<String> {
    gang::gang_of(pod)
}

/// A whole-second duration the way Go prints it (`5s`, `1m0s`, `1h0m0s`),
/// for upstream's messages.
#[must_use]
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    let millis = d.subsec_millis();
    if s < 60 {
        if millis == 0 {
            format!("{s}s")
        } else {
            format!("{}s", d.as_secs_f64())
        }
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m{}s", s / 3600, (s % 3600) / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::pod_group;
    use flotilla_shared::testing::PodBuilder;

    fn group(name: &str, min: i32, timeout: Option<i32>) -> Arc<PodGroup> {
        let mut g = PodGroup::default();
        g.metadata.name = Some(name.into());
        g.metadata.namespace = Some("default".into());
        g.spec.min_member = min;
        g.spec.schedule_timeout_seconds = timeout;
        Arc::new(g)
    }

    fn member(name: &str, g: &str) -> Arc<PodInfo> {
        Arc::new(
            PodBuilder::new(name)
                .label(pod_group::LABEL_POD_GROUP, g)
                .build_info(),
        )
    }

    #[test]
    fn pre_filter_counts_siblings_like_upstream() {
        let book = GangBook::new();
        let now = Instant::now();
        let p1 = member("p1", "pg");
        // No PodGroup object: PreFilter passes (upstream returns nil).
        assert_eq!(book.pre_filter(&p1, now), Ok(()));
        book.apply_group(&group("pg", 3, None));
        book.pod_pending(&p1);
        book.pod_pending(&member("p2", "pg"));
        assert_eq!(
            book.pre_filter(&p1, now),
            Err("pre-filter pod p1 cannot find enough sibling pods, current pods number: 2, minMember of group: 3".into())
        );
        book.pod_pending(&member("p3", "pg"));
        assert_eq!(book.pre_filter(&p1, now), Ok(()));
        let plain = PodBuilder::new("solo").build_info();
        assert_eq!(book.pre_filter(&plain, now), Ok(()));
    }

    #[test]
    fn permit_waits_until_min_member_then_releases_all() {
        let book = GangBook::new();
        let now = Instant::now();
        book.apply_group(&group("pg", 3, None));
        let n: Arc<str> = Arc::from("n1");
        let pods: Vec<_> = (1..=3).map(|i| member(&format!("p{i}"), "pg")).collect();
        assert!(matches!(
            book.permit(&pods[0], &n, now),
            PermitOutcome::Wait
        ));
        assert!(matches!(
            book.permit(&pods[1], &n, now),
            PermitOutcome::Wait
        ));
        assert_eq!(book.waiting_len(), 2);
        match book.permit(&pods[2], &n, now) {
            PermitOutcome::Ready(g, members) => {
                assert_eq!(g, "default/pg");
                let names: Vec<&str> = members.iter().map(|(p, _)| &*p.key.name).collect();
                assert_eq!(names, ["p1", "p2", "p3"]);
            }
            other => panic!("expected Ready, got {other:?}"),
        }
        assert_eq!(book.waiting_len(), 0);
    }

    #[test]
    fn permit_counts_bound_members_and_rejects_a_missing_group() {
        let book = GangBook::new();
        let now = Instant::now();
        let n: Arc<str> = Arc::from("n1");
        let p = member("p1", "pg");
        match book.permit(&p, &n, now) {
            PermitOutcome::Reject(m) => assert_eq!(m, "PodGroup not found"),
            other => panic!("expected Reject, got {other:?}"),
        }
        book.apply_group(&group("pg", 2, None));
        book.pod_bound(&member("p0", "pg"));
        assert!(matches!(book.permit(&p, &n, now), PermitOutcome::Ready(_, m) if m.len() == 1));
        let solo = Arc::new(PodBuilder::new("solo").build_info());
        assert!(matches!(
            book.permit(&solo, &n, now),
            PermitOutcome::NotGang
        ));
    }

    #[test]
    fn waiting_members_expire_after_the_group_timeout() {
        let book = GangBook::new();
        book.configure(Duration::from_secs(60), None);
        book.apply_group(&group("short", 3, Some(5)));
        book.apply_group(&group("long", 3, None));
        let t0 = Instant::now();
        let n: Arc<str> = Arc::from("n1");
        book.permit(&member("a", "short"), &n, t0);
        book.permit(&member("b", "long"), &n, t0);
        assert!(book.take_expired(t0 + Duration::from_secs(4)).is_empty());
        let due = book.take_expired(t0 + Duration::from_secs(5));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, "default/short");
        assert_eq!(due[0].1, Duration::from_secs(5));
        assert!(book.take_expired(t0 + Duration::from_secs(59)).is_empty());
        let due = book.take_expired(t0 + Duration::from_secs(60));
        assert_eq!(due[0].0, "default/long", "the plugin default applies");
    }

    #[test]
    fn post_filter_rejects_waiting_siblings_unless_the_gap_is_small() {
        let now = Instant::now();
        let n: Arc<str> = Arc::from("n1");
        // minMember 4, 2 waiting: gap 50 % → siblings rejected.
        let book = GangBook::new();
        book.apply_group(&group("pg", 4, None));
        book.permit(&member("p1", "pg"), &n, now);
        book.permit(&member("p2", "pg"), &n, now);
        let (released, msg) = book.post_filter(&member("p3", "pg"), now);
        assert_eq!(released.len(), 2);
        assert_eq!(
            msg.as_deref(),
            Some(
                "PodGroup default/pg gets rejected due to Pod p3 is unschedulable even after PostFilter"
            )
        );
        // minMember 10, 9 placed: gap 10 % → keep waiting.
        let book = GangBook::new();
        book.apply_group(&group("big", 10, None));
        for i in 0..9 {
            book.permit(&member(&format!("b{i}"), "big"), &n, now);
        }
        let (released, msg) = book.post_filter(&member("b9", "big"), now);
        assert!(released.is_empty());
        assert_eq!(msg, None);
        assert_eq!(book.waiting_len(), 9);
    }

    #[test]
    fn group_backoff_rejects_members_for_a_while() {
        let now = Instant::now();
        let n: Arc<str> = Arc::from("n1");
        let book = GangBook::new();
        book.configure(DEFAULT_PERMIT_WAITING_TIME, Some(Duration::from_secs(10)));
        book.apply_group(&group("pg", 2, None));
        let p1 = member("p1", "pg");
        let p2 = member("p2", "pg");
        book.pod_pending(&p1);
        book.pod_pending(&p2);
        book.permit(&p1, &n, now);
        let _ = book.post_filter(&p2, now);
        assert_eq!(
            book.pre_filter(&p1, now + Duration::from_secs(9)),
            Err("podGroup default/pg failed recently".into())
        );
        assert_eq!(book.pre_filter(&p1, now + Duration::from_secs(10)), Ok(()));
    }

    fn workload(name: &str, policy: serde_json::Value) -> GangObject {
        GangObject::Workload(Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": gang::V1BETA1, "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"schedulingPolicy": policy},
            }))
            .unwrap(),
        ))
    }

    fn grouped(name: &str, g: &str) -> Arc<PodInfo> {
        Arc::new(PodBuilder::new(name).pod_group_name(g).build_info())
    }

    #[test]
    fn upstream_pre_enqueue_waits_for_the_group_and_min_count() {
        let book = GangBook::new();
        let p1 = grouped("p1", "pg");
        assert_eq!(
            book.pre_enqueue(&p1),
            Err("waiting for pods's pod group \"pg\" to appear in scheduling queue".into())
        );
        book.apply(&workload(
            "pg",
            serde_json::json!({"gang": {"minCount": 2}}),
        ));
        book.pod_pending(&p1);
        assert_eq!(
            book.pre_enqueue(&p1),
            Err("waiting for minCount pods from a gang to appear in scheduling queue".into())
        );
        book.pod_pending(&grouped("p2", "pg"));
        assert_eq!(book.pre_enqueue(&p1), Ok(()));
        // The scheduler-plugins check does not apply to it, nor this one to
        // a labelled pod.
        assert_eq!(book.pre_filter(&p1, Instant::now()), Ok(()));
        assert_eq!(book.pre_enqueue(&member("c", "pg")), Ok(()));
        // Basic: nothing to wait for; invalid: the field error.
        book.apply(&workload("web", serde_json::json!({"basic": {}})));
        assert_eq!(book.pre_enqueue(&grouped("w", "web")), Ok(()));
        book.apply(&workload(
            "bad",
            serde_json::json!({"gang": {"minCount": -1}}),
        ));
        assert_eq!(
            book.pre_enqueue(&grouped("b", "bad")),
            Err("PodGroup default/bad: spec.schedulingPolicy.gang.minCount: Invalid value: -1: must be greater than zero".into())
        );
    }

    #[test]
    fn upstream_permit_waits_for_min_count_and_times_out_after_five_minutes() {
        let book = GangBook::new();
        let now = Instant::now();
        let n: Arc<str> = Arc::from("n1");
        book.apply(&workload(
            "pg",
            serde_json::json!({"gang": {"minCount": 3}}),
        ));
        let (p1, p2, p3) = (
            grouped("p1", "pg"),
            grouped("p2", "pg"),
            grouped("p3", "pg"),
        );
        for p in [&p1, &p2, &p3] {
            book.pod_pending(p);
        }
        assert!(matches!(book.permit(&p1, &n, now), PermitOutcome::Wait));
        assert!(matches!(book.permit(&p2, &n, now), PermitOutcome::Wait));
        match book.permit(&p3, &n, now) {
            PermitOutcome::Ready(g, members) => {
                assert_eq!(g, "podgroups.scheduling.k8s.io/default/pg");
                assert_eq!(members.len(), 3);
            }
            o => panic!("{o:?}"),
        }
        // The three count as placed while their proposal is in flight: a
        // fourth member goes on alone (upstream counts assumed pods).
        let p4 = grouped("p4", "pg");
        book.pod_pending(&p4);
        assert!(matches!(book.permit(&p4, &n, now), PermitOutcome::Ready(_, m) if m.len() == 1));
        // Waiting members of a gang short of minCount are released after
        // upstream's fixed 5 minutes.
        book.apply(&workload("t", serde_json::json!({"gang": {"minCount": 2}})));
        let t1 = grouped("t1", "t");
        book.pod_pending(&t1);
        assert!(matches!(book.permit(&t1, &n, now), PermitOutcome::Wait));
        let early = now + gang::WORKLOAD_PERMIT_TIMEOUT - Duration::from_secs(1);
        assert!(book.take_expired(early).is_empty());
        let expired = book.take_expired(now + gang::WORKLOAD_PERMIT_TIMEOUT);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].1, Duration::from_secs(300));
        assert_eq!(go_duration(expired[0].1), "5m0s");
    }

    #[test]
    fn an_upstream_gang_is_rejected_as_a_unit_and_basic_members_go_alone() {
        let book = GangBook::new();
        let now = Instant::now();
        let n: Arc<str> = Arc::from("n1");
        book.apply(&workload(
            "pg",
            serde_json::json!({"gang": {"minCount": 3}}),
        ));
        let (p1, p2, p3) = (
            grouped("p1", "pg"),
            grouped("p2", "pg"),
            grouped("p3", "pg"),
        );
        for p in [&p1, &p2, &p3] {
            book.pod_pending(p);
        }
        book.permit(&p1, &n, now);
        book.permit(&p2, &n, now);
        // p3 fits nowhere: the scheduler-plugins PostFilter does not apply
        // (no 10 % rule), the group is rejected whole.
        assert!(book.post_filter(&p3, now).0.is_empty());
        let released = book
            .reject_workload_gang(&p3)
            .expect("a gang short of minCount");
        assert_eq!(released.len(), 2);
        assert_eq!(book.waiting_len(), 0);
        book.apply(&workload("web", serde_json::json!({"basic": {}})));
        assert!(matches!(
            book.permit(&grouped("w", "web"), &n, now),
            PermitOutcome::NotGang
        ));
        // A PodGroup gone since dispatch: upstream Permit's error.
        match book.permit(&grouped("x", "gone"), &n, now) {
            PermitOutcome::Reject(m) => {
                assert_eq!(
                    m,
                    "failed to get podGroup default/gone: podgroup.scheduling.k8s.io \"gone\" not found"
                );
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(5)), "5s");
        assert_eq!(go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
    }
}
