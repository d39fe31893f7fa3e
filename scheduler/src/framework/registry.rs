//! The plugin registry: plugin name → factory. Profiles enable plugins by
//! name; out-of-tree plugins register here the same way in-tree ones do.

use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_shared::framework::{
    BindCheck, ExtensionPoint, FilterPlugin, Plugin, PreFilterPlugin, PreScorePlugin, ScorePlugin,
};

use crate::plugins::{
    coscheduling::{self, Coscheduling},
    default_binder::{self, DefaultBinder},
    default_preemption::{self, DefaultPreemption},
    gang_scheduling::{self, GangScheduling},
    gpu_share::{self, GpuShare},
    image_locality::ImageLocality,
    inter_pod_affinity::{InterPodAffinity, InterPodAffinityArgs},
    max_instances_per_node::MaxInstancesPerNode,
    names,
    node_affinity::NodeAffinity,
    node_name::NodeName,
    node_ports::{self, NodePorts},
    node_resources_balanced_allocation::{self, NodeResourcesBalancedAllocation},
    node_resources_fit::{self, NodeResourcesFit},
    node_unschedulable::NodeUnschedulable,
    node_volume_limits::NodeVolumeLimits,
    pod_topology_spread::PodTopologySpread,
    priority_sort::{self, PrioritySort},
    scheduling_gates::{self, SchedulingGates},
    taint_toleration::{self, TaintToleration},
    volume_binding::{self, VolumeBinding},
    volume_restrictions::VolumeRestrictions,
    volume_zone::VolumeZone,
};
use crate::preemption::DefaultPreemptionArgs;

/// One plugin instance, seen through each extension point it implements.
#[derive(Clone)]
pub struct PluginHandle {
    /// The plugin (name, events).
    pub plugin: Arc<dyn Plugin>,
    /// Its PreFilter side, if any.
    pub pre_filter: Option<Arc<dyn PreFilterPlugin>>,
    /// Its Filter side, if any.
    pub filter: Option<Arc<dyn FilterPlugin>>,
    /// Its Filter's bind-time re-check, which the coordinator's bind
    /// arbiter runs for the profiles that enable the plugin at `filter`
    /// (`None`: the Filter is not re-checked at bind time; see
    /// [`BindCheck`]).
    pub bind_check: Option<Arc<dyn BindCheck>>,
    /// Its PreScore side, if any.
    pub pre_score: Option<Arc<dyn PreScorePlugin>>,
    /// Its Score side, if any.
    pub score: Option<Arc<dyn ScorePlugin>>,
    /// What its Score needs computed once per cycle, when that is not (or
    /// not only) its PreScore side: run before Score whenever the plugin is
    /// enabled at Score and its PreScore is not enabled (ImageLocality,
    /// which upstream gives no PreScore point, computes its state here).
    /// `None`: the PreScore side, if any, serves.
    pub score_state: Option<Arc<dyn PreScorePlugin>>,
    /// Extension points the plugin stands for beyond its PreFilter, Filter,
    /// PreScore and Score sides: those served outside the cycle runner
    /// (`QueueSort` by the queue, `Bind` by the coordinator, `PostFilter`,
    /// `PreEnqueue`, ...), and those upstream's plugin implements where this
    /// one does the work at another point (NodePorts' PreFilter), with
    /// nothing to run. Listed so configurations naming the plugin at those
    /// points are accepted, as upstream accepts them.
    pub other_points: &'static [ExtensionPoint],
    /// DefaultPreemption's validated args, when this is that plugin (the
    /// framework hands them to the PostFilter caller).
    pub preemption_args: Option<DefaultPreemptionArgs>,
    /// GpuShare, when this is that plugin: its Reserve (the devices a pod
    /// takes on its node) runs in the cycle once the node is chosen.
    pub gpu_share: Option<Arc<GpuShare>>,
}

impl std::fmt::Debug for PluginHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHandle")
            .field("name", &self.plugin.name())
            .field("pre_filter", &self.pre_filter.is_some())
            .field("filter", &self.filter.is_some())
            .field("bind_check", &self.bind_check.is_some())
            .field("pre_score", &self.pre_score.is_some())
            .field("score", &self.score.is_some())
            .field("score_state", &self.score_state.is_some())
            .field("other_points", &self.other_points)
            .finish()
    }
}

impl PluginHandle {
    /// A handle with only the common side; add extension points with the
    /// builder methods.
    #[must_use]
    pub fn new<P: Plugin + 'static>(p: Arc<P>) -> Self {
        PluginHandle {
            plugin: p,
            pre_filter: None,
            filter: None,
            bind_check: None,
            pre_score: None,
            score: None,
            score_state: None,
            other_points: &[],
            preemption_args: None,
            gpu_share: None,
        }
    }

    /// Whether the plugin implements `point` (may be enabled there).
    #[must_use]
    pub fn implements(&self, point: ExtensionPoint) -> bool {
        let side = match point {
            ExtensionPoint::PreFilter => self.pre_filter.is_some(),
            ExtensionPoint::Filter => self.filter.is_some(),
            ExtensionPoint::PreScore => self.pre_score.is_some(),
            ExtensionPoint::Score => self.score.is_some(),
            _ => false,
        };
        side || self.other_points.contains(&point)
    }

    /// What runs before its Score when its PreScore is not enabled:
    /// [`PluginHandle::score_state`], else the PreScore side.
    #[must_use]
    pub fn score_preparation(&self) -> Option<&Arc<dyn PreScorePlugin>> {
        self.score_state.as_ref().or(self.pre_score.as_ref())
    }

    /// Sets what its Score needs computed per cycle when that is not a
    /// PreScore point of its own ([`PluginHandle::score_state`]).
    #[must_use]
    pub fn score_state(mut self, p: Arc<dyn PreScorePlugin>) -> Self {
        self.score_state = Some(p);
        self
    }

    /// Sets the GpuShare whose Reserve the cycle runs
    /// ([`PluginHandle::gpu_share`]).
    #[must_use]
    pub fn gpu_share(mut self, p: Arc<GpuShare>) -> Self {
        self.gpu_share = Some(p);
        self
    }

    /// Declares extension points served outside the cycle runner.
    #[must_use]
    pub fn other_points(mut self, points: &'static [ExtensionPoint]) -> Self {
        self.other_points = points;
        self
    }

    /// Adds the PreScore side.
    #[must_use]
    pub fn pre_score(mut self, p: Arc<dyn PreScorePlugin>) -> Self {
        self.pre_score = Some(p);
        self
    }

    /// Adds the PreFilter side.
    #[must_use]
    pub fn pre_filter(mut self, p: Arc<dyn PreFilterPlugin>) -> Self {
        self.pre_filter = Some(p);
        self
    }

    /// Adds the Filter side.
    #[must_use]
    pub fn filter(mut self, p: Arc<dyn FilterPlugin>) -> Self {
        self.filter = Some(p);
        self
    }

    /// Adds the Filter side's bind-time re-check (see [`BindCheck`]: it must
    /// agree with the Filter).
    #[must_use]
    pub fn bind_check(mut self, p: Arc<dyn BindCheck>) -> Self {
        self.bind_check = Some(p);
        self
    }

    /// Adds the Score side.
    #[must_use]
    pub fn score(mut self, p: Arc<dyn ScorePlugin>) -> Self {
        self.score = Some(p);
        self
    }

    /// Marks the handle as DefaultPreemption with these args.
    #[must_use]
    pub fn preemption_args(mut self, args: DefaultPreemptionArgs) -> Self {
        self.preemption_args = Some(args);
        self
    }
}

/// Builds a plugin from its `pluginConfig` args (JSON, `None` when absent).
///
/// # Errors
/// A message naming the bad argument.
pub type PluginFactory =
    Arc<dyn Fn(Option<&serde_json::Value>) -> Result<PluginHandle, String> + Send + Sync>;

/// The factory of a plugin without args at PreFilter and Filter, with its
/// bind check (the volume plugins): `args` are ignored, as upstream's
/// have none.
fn checked_filter<P>(new: fn() -> P) -> PluginFactory
where
    P: PreFilterPlugin + FilterPlugin + BindCheck + 'static,
{
    Arc::new(move |_| {
        let p = Arc::new(new());
        Ok(PluginHandle::new(p.clone())
            .pre_filter(p.clone())
            .filter(p.clone())
            .bind_check(p))
    })
}

/// Plugin name → factory.
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<&'static str, PluginFactory>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.factories.keys()).finish()
    }
}

/// Registry errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two factories under one name.
    #[error("a plugin named {0:?} is already registered")]
    Duplicate(&'static str),
    /// A profile names a plugin nobody registered.
    #[error("plugin {0:?} is not registered")]
    Unknown(String),
    /// The factory rejected its args.
    #[error("plugin {name:?}: {message}")]
    Args {
        /// Plugin name.
        name: String,
        /// What is wrong with the args.
        message: String,
    },
    /// The profile's plugin sets do not make a valid framework (a plugin at
    /// a point it does not implement, a duplicate, no QueueSort or Bind).
    #[error("profile {profile:?}: {message}")]
    Profile {
        /// `schedulerName`.
        profile: String,
        /// Upstream-style message.
        message: String,
    },
}

impl Registry {
    /// The in-tree plugins.
    #[must_use]
    pub fn in_tree() -> Self {
        let mut r = Registry::default();
        let add = |r: &mut Registry, name, f: PluginFactory| {
            r.register(name, f).expect("in-tree names are unique");
        };
        add(
            &mut r,
            names::PRIORITY_SORT,
            Arc::new(|_| {
                Ok(PluginHandle::new(Arc::new(PrioritySort)).other_points(priority_sort::POINTS))
            }),
        );
        add(
            &mut r,
            names::DEFAULT_BINDER,
            Arc::new(|_| {
                Ok(PluginHandle::new(Arc::new(DefaultBinder)).other_points(default_binder::POINTS))
            }),
        );
        add(
            &mut r,
            names::NODE_UNSCHEDULABLE,
            Arc::new(|_| {
                let p = Arc::new(NodeUnschedulable);
                Ok(PluginHandle::new(p.clone()).filter(p.clone()).bind_check(p))
            }),
        );
        add(
            &mut r,
            names::NODE_NAME,
            Arc::new(|_| {
                let p = Arc::new(NodeName);
                Ok(PluginHandle::new(p.clone()).filter(p.clone()).bind_check(p))
            }),
        );
        add(
            &mut r,
            names::TAINT_TOLERATION,
            Arc::new(|_| {
                let p = Arc::new(TaintToleration);
                Ok(PluginHandle::new(p.clone())
                    .filter(p.clone())
                    .bind_check(p.clone())
                    .score(p)
                    .other_points(taint_toleration::POINTS))
            }),
        );
        add(
            &mut r,
            names::NODE_AFFINITY,
            Arc::new(|args| {
                let p = Arc::new(NodeAffinity::from_config(args)?);
                Ok(PluginHandle::new(p.clone())
                    .pre_filter(p.clone())
                    .filter(p.clone())
                    .bind_check(p.clone())
                    .pre_score(p.clone())
                    .score(p))
            }),
        );
        add(
            &mut r,
            names::NODE_PORTS,
            Arc::new(|_| {
                let p = Arc::new(NodePorts);
                Ok(PluginHandle::new(p.clone())
                    .filter(p.clone())
                    .bind_check(p)
                    .other_points(node_ports::POINTS))
            }),
        );
        add(
            &mut r,
            names::NODE_RESOURCES_FIT,
            Arc::new(|args| {
                let args = super::decode_args(args, node_resources_fit::ARGS_KIND)?;
                let p = Arc::new(NodeResourcesFit::from_args(&args)?);
                Ok(PluginHandle::new(p.clone())
                    .filter(p.clone())
                    .bind_check(p.clone())
                    .score(p)
                    .other_points(node_resources_fit::POINTS))
            }),
        );
        add(
            &mut r,
            names::VOLUME_RESTRICTIONS,
            checked_filter(VolumeRestrictions::new),
        );
        add(
            &mut r,
            names::NODE_VOLUME_LIMITS,
            checked_filter(NodeVolumeLimits::new),
        );
        add(
            &mut r,
            names::VOLUME_BINDING,
            Arc::new(|args| {
                let p = Arc::new(VolumeBinding::from_config(args)?);
                Ok(PluginHandle::new(p.clone())
                    .pre_filter(p.clone())
                    .filter(p.clone())
                    .bind_check(p)
                    .other_points(volume_binding::POINTS))
            }),
        );
        add(&mut r, names::VOLUME_ZONE, checked_filter(VolumeZone::new));
        add(
            &mut r,
            names::INTER_POD_AFFINITY,
            Arc::new(|args| {
                let p = Arc::new(InterPodAffinity::new(InterPodAffinityArgs::decode(args)?)?);
                Ok(PluginHandle::new(p.clone())
                    .pre_filter(p.clone())
                    .filter(p.clone())
                    .bind_check(p.clone())
                    .pre_score(p.clone())
                    .score(p))
            }),
        );
        add(
            &mut r,
            names::NODE_RESOURCES_BALANCED_ALLOCATION,
            Arc::new(|args| {
                let args = super::decode_args(args, node_resources_balanced_allocation::ARGS_KIND)?;
                let p = Arc::new(NodeResourcesBalancedAllocation::from_args(&args)?);
                Ok(PluginHandle::new(p.clone()).pre_score(p.clone()).score(p))
            }),
        );
        add(
            &mut r,
            names::IMAGE_LOCALITY,
            Arc::new(|_| {
                let p = Arc::new(ImageLocality);
                Ok(PluginHandle::new(p.clone()).score_state(p.clone()).score(p))
            }),
        );
        add(
            &mut r,
            names::POD_TOPOLOGY_SPREAD,
            Arc::new(|args| {
                let p = Arc::new(PodTopologySpread::from_args(args)?);
                Ok(PluginHandle::new(p.clone())
                    .pre_filter(p.clone())
                    .filter(p.clone())
                    .bind_check(p.clone())
                    .pre_score(p.clone())
                    .score(p))
            }),
        );
        add(
            &mut r,
            names::MAX_INSTANCES_PER_NODE,
            Arc::new(|args| {
                let p = Arc::new(MaxInstancesPerNode::from_args(args)?);
                Ok(PluginHandle::new(p.clone())
                    .pre_filter(p.clone())
                    .filter(p.clone())
                    .bind_check(p))
            }),
        );
        add(
            &mut r,
            names::GPU_SHARE,
            Arc::new(|args| {
                let p = Arc::new(GpuShare::from_args(args)?);
                Ok(PluginHandle::new(p.clone())
                    .pre_filter(p.clone())
                    .filter(p.clone())
                    .bind_check(p.clone())
                    .pre_score(p.clone())
                    .score(p.clone())
                    .gpu_share(p)
                    .other_points(gpu_share::POINTS))
            }),
        );
        add(
            &mut r,
            names::SCHEDULING_GATES,
            Arc::new(|_| {
                Ok(PluginHandle::new(Arc::new(SchedulingGates))
                    .other_points(scheduling_gates::POINTS))
            }),
        );
        add(
            &mut r,
            names::DEFAULT_PREEMPTION,
            Arc::new(|args| {
                let p = Arc::new(DefaultPreemption::from_config(args)?);
                Ok(PluginHandle::new(p.clone())
                    .other_points(default_preemption::POINTS)
                    .preemption_args(p.args))
            }),
        );
        add(
            &mut r,
            names::GANG_SCHEDULING,
            Arc::new(|_| {
                Ok(PluginHandle::new(Arc::new(GangScheduling))
                    .other_points(gang_scheduling::POINTS))
            }),
        );
        r.replace(
            names::COSCHEDULING,
            coscheduling_factory(Arc::new(crate::gang::GangBook::new())),
        );
        r
    }

    /// Registers `f` under `name`, replacing any factory there (a worker
    /// swaps in a `Coscheduling` bound to its own gang book).
    pub fn replace(&mut self, name: &'static str, f: PluginFactory) {
        self.factories.insert(name, f);
    }

    /// Registers a factory under `name`.
    ///
    /// # Errors
    /// [`RegistryError::Duplicate`] when the name is taken.
    pub fn register(&mut self, name: &'static str, f: PluginFactory) -> Result<(), RegistryError> {
        if self.factories.contains_key(name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.factories.insert(name, f);
        Ok(())
    }

    /// Instantiates plugin `name`.
    ///
    /// # Errors
    /// [`RegistryError::Unknown`] or [`RegistryError::Args`].
    pub fn build(
        &self,
        name: &str,
        args: Option<&serde_json::Value>,
    ) -> Result<PluginHandle, RegistryError> {
        let f = self
            .factories
            .get(name)
            .ok_or_else(|| RegistryError::Unknown(name.to_owned()))?;
        f(args).map_err(|message| RegistryError::Args {
            name: name.to_owned(),
            message,
        })
    }

    /// Registered names, sorted.
    #[must_use]
    pub fn names(&self) -> Vec<&'static str> {
        self.factories.keys().copied().collect()
    }
}

/// The `Coscheduling` factory over `book` (the worker's [`crate::gang::GangBook`];
/// `Registry::in_tree` uses a private, empty one).
#[must_use]
pub fn coscheduling_factory(book: Arc<crate::gang::GangBook>) -> PluginFactory {
    Arc::new(move |args| {
        let args = super::decode_args(args, coscheduling::ARGS_KIND)?;
        let p = Arc::new(Coscheduling::new(book.clone(), &args)?);
        Ok(PluginHandle::new(p.clone())
            .pre_filter(p)
            .other_points(coscheduling::POINTS))
    })
}
