//! One [`Framework`] per profile, looked up by the pod's
//! `spec.schedulerName` (upstream's `profile.Map` in
//! `pkg/scheduler/profile/profile.go`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use flotilla_shared::PodInfo;
use flotilla_shared::framework::{ClusterEvent, ExtensionPoint};

use super::profile::Profile;
use super::registry::{Registry, RegistryError};
use super::runtime::Framework;
use crate::extender::Extenders;

/// The frameworks of a scheduler, by scheduler name.
#[derive(Debug)]
pub struct ProfileMap {
    frameworks: HashMap<String, Framework>,
}

impl ProfileMap {
    /// Instantiates every profile.
    ///
    /// # Errors
    /// A profile that does not make a framework ([`Framework::new`]), or two
    /// profiles with one scheduler name ([`RegistryError::Profile`]).
    pub fn new(profiles: &[Profile], registry: &Registry) -> Result<Self, RegistryError> {
        Self::with_extenders(profiles, registry, &Arc::new(Extenders::default()))
    }

    /// [`ProfileMap::new`], every framework calling `extenders` (upstream's
    /// extenders are shared by all profiles).
    ///
    /// # Errors
    /// As [`ProfileMap::new`].
    pub fn with_extenders(
        profiles: &[Profile],
        registry: &Registry,
        extenders: &Arc<Extenders>,
    ) -> Result<Self, RegistryError> {
        let mut frameworks = HashMap::with_capacity(profiles.len());
        for p in profiles {
            let fw = Framework::new(p, registry)?.with_extenders(extenders.clone());
            if frameworks.insert(p.scheduler_name.clone(), fw).is_some() {
                return Err(RegistryError::Profile {
                    profile: p.scheduler_name.clone(),
                    message: "duplicate profile".into(),
                });
            }
        }
        Ok(ProfileMap { frameworks })
    }

    /// The framework of the profile named `scheduler_name`.
    #[must_use]
    pub fn get(&self, scheduler_name: &str) -> Option<&Framework> {
        self.frameworks.get(scheduler_name)
    }

    /// The framework for `pod` (by its `spec.schedulerName`); `None` when no
    /// profile has that name.
    #[must_use]
    pub fn for_pod(&self, pod: &PodInfo) -> Option<&Framework> {
        self.get(&pod.scheduler_name)
    }

    /// Whether a profile is named `scheduler_name` (upstream
    /// `HandlesSchedulerName`).
    #[must_use]
    pub fn handles(&self, scheduler_name: &str) -> bool {
        self.frameworks.contains_key(scheduler_name)
    }

    /// Number of profiles.
    #[must_use]
    pub fn len(&self) -> usize {
        self.frameworks.len()
    }

    /// Whether there is no profile.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.frameworks.is_empty()
    }

    /// Whether any profile runs `plugin` at `point` (e.g. whether the
    /// worker's one queue honours scheduling gates).
    #[must_use]
    pub fn any_enables(&self, point: ExtensionPoint, plugin: &str) -> bool {
        self.frameworks
            .values()
            .any(|fw| fw.enabled_at(point).contains(&plugin))
    }

    /// Event → plugins interested, over every profile (the worker's one
    /// queue serves them all).
    #[must_use]
    pub fn event_interest(&self) -> HashMap<ClusterEvent, HashSet<&'static str>> {
        let mut all: HashMap<ClusterEvent, HashSet<&'static str>> = HashMap::new();
        for fw in self.frameworks.values() {
            for (ev, plugins) in fw.event_interest() {
                all.entry(ev).or_default().extend(plugins);
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::names;
    use flotilla_shared::framework::ExtensionPoint;
    use flotilla_shared::testing::PodBuilder;

    fn named(name: &str, plugins: &[(&str, i64)]) -> Profile {
        Profile {
            scheduler_name: name.to_owned(),
            ..Profile::only(plugins)
        }
    }

    #[test]
    fn pods_get_the_framework_of_their_scheduler_name() {
        let map = ProfileMap::new(
            &[
                named("a", &[(names::NODE_NAME, 0)]),
                named("b", &[(names::TAINT_TOLERATION, 0)]),
            ],
            &Registry::in_tree(),
        )
        .expect("valid profiles");
        assert_eq!(map.len(), 2);
        let mut pod = PodBuilder::new("p").build();
        pod.spec.as_mut().expect("spec").scheduler_name = Some("b".into());
        let pod = PodInfo::from_pod(std::sync::Arc::new(pod)).expect("pod");
        let fw = map.for_pod(&pod).expect("profile b");
        assert_eq!(fw.profile_name(), "b");
        assert_eq!(
            fw.enabled_at(ExtensionPoint::Filter),
            [names::TAINT_TOLERATION]
        );
        assert!(map.handles("a"));
        assert!(!map.handles("default-scheduler"));
        // Interest is the union: NodeName (a) and TaintToleration (b) both
        // wait for NodeAdded.
        let added = &map.event_interest()[&ClusterEvent::NodeAdded];
        assert!(added.contains(names::NODE_NAME) && added.contains(names::TAINT_TOLERATION));
    }

    #[test]
    fn two_profiles_with_one_name_are_refused() {
        let err = ProfileMap::new(&[named("a", &[]), named("a", &[])], &Registry::in_tree())
            .expect_err("duplicate");
        assert!(matches!(err, RegistryError::Profile { ref profile, .. } if profile == "a"));
    }
}
