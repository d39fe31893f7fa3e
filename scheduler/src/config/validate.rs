//! Decoding, defaulting and validation of a `KubeSchedulerConfiguration`,
//! in upstream's order (`pkg/scheduler/apis/config/v1/defaults.go`,
//! `pkg/scheduler/apis/config/validation/validation.go`, and the checks of
//! the framework runtime's `NewFramework`). The first problem found is
//! returned as a [`FieldError`] naming the field path.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use flotilla_shared::WorkloadClass;
use flotilla_shared::framework::ExtensionPoint;
use flotilla_shared::pod_info::DEFAULT_SCHEDULER_NAME;

use super::duration::parse_go_duration;
use super::error::FieldError;
use super::extenders::{build_extenders, build_webhook, ignored_by_scheduler};
use super::merge::merge_plugins;
use super::types::{self, KubeSchedulerConfiguration, KubeSchedulerProfile};
use super::{
    API_VERSION, ClientConnection, DEFAULT_BURST, DEFAULT_CONTENT_TYPE, DEFAULT_LEASE_DURATION,
    DEFAULT_PARALLELISM, DEFAULT_QPS, DEFAULT_RENEW_DEADLINE, DEFAULT_RESOURCE_LOCK,
    DEFAULT_RESOURCE_NAME, DEFAULT_RESOURCE_NAMESPACE, DEFAULT_RETRY_PERIOD, KIND, LeaderElection,
    SchedulerConfig,
};
use crate::framework::profile::{DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE, TieBreak};
use crate::framework::{
    Framework, PluginHandle, PluginRef, PluginSet, Plugins, Profile, Registry, RegistryError,
};
use crate::plugins::names;

/// Plugin names upstream removed from `kubescheduler.config.k8s.io/v1`
/// (`invalidPluginsByVersion` in upstream's validation).
const REMOVED_UPSTREAM: &[&str] = &[
    "AzureDiskLimits",
    "CinderLimits",
    "EBSLimits",
    "GCEPDLimits",
];

/// Upstream's in-tree plugin names (`getDefaultPlugins` and the
/// feature-gated ones). Disabling one is always accepted, registered in
/// Flotilla or not: it cannot be running.
const UPSTREAM_PLUGINS: &[&str] = &[
    "SchedulingGates",
    "PrioritySort",
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
    "DefaultPreemption",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
    "DefaultBinder",
    "DynamicResources",
    "NodeDeclaredFeatures",
    "GangScheduling",
];

/// The error for a name the registry does not know.
fn unknown_plugin(path: String, name: &str) -> FieldError {
    let message = if UPSTREAM_PLUGINS.contains(&name) {
        format!("unknown plugin {name:?} (an upstream plugin Flotilla does not have yet)")
    } else {
        format!("unknown plugin {name:?}")
    };
    FieldError::new(path, message)
}

/// Earlier `kubescheduler.config.k8s.io` versions and the Kubernetes
/// release that stopped serving them (KEP-785 and release notes).
const REMOVED_VERSIONS: &[(&str, &str)] = &[
    ("kubescheduler.config.k8s.io/v1alpha1", "1.19"),
    ("kubescheduler.config.k8s.io/v1alpha2", "1.20"),
    ("kubescheduler.config.k8s.io/v1beta1", "1.23"),
    ("kubescheduler.config.k8s.io/v1beta2", "1.28"),
    ("kubescheduler.config.k8s.io/v1beta3", "1.29"),
];

/// Extension points served only by pod-group (workload) scheduling, which
/// Flotilla does not have: no plugin can be enabled there.
const POD_GROUP_POINTS: [&str; 4] = [
    "placementGenerate",
    "placementScore",
    "placementFeasible",
    "podGroupPostFilter",
];

/// What enabling a not-implemented plugin means in Flotilla.
fn not_implemented_effect(name: &str) -> &'static str {
    match name {
        names::DEFAULT_PREEMPTION => {
            "no preemption: a pod that fits nowhere stays pending instead of evicting lower-priority pods"
        }
        "DynamicResources" => "ResourceClaims are not allocated or checked",
        "NodeDeclaredFeatures" => "node-declared features are not checked",
        _ => "it is left out",
    }
}

fn is_not_implemented(registry: &Registry, name: &str) -> bool {
    names::NOT_IMPLEMENTED.contains(&name) && !registry.names().contains(&name)
}

/// Checks `apiVersion` and `kind` on the undecoded document, so that a file
/// of an older version is told so instead of tripping over a renamed field.
pub(crate) fn check_type_meta(doc: &serde_json::Value) -> Result<(), FieldError> {
    let Some(obj) = doc.as_object() else {
        let what = match doc {
            serde_json::Value::Null => "an empty document".to_owned(),
            other => kind_of(other).to_owned(),
        };
        return Err(FieldError::new(
            "",
            format!("expected a {KIND} object, got {what}"),
        ));
    };
    match obj.get("apiVersion") {
        None | Some(serde_json::Value::Null) => {
            return Err(FieldError::new(
                "apiVersion",
                format!("required: set it to {API_VERSION:?}"),
            ));
        }
        Some(serde_json::Value::String(v)) if v == API_VERSION => {}
        Some(serde_json::Value::String(v)) => {
            let message = match REMOVED_VERSIONS.iter().find(|(old, _)| old == v) {
                Some((_, release)) => format!(
                    "{v:?} was removed from kube-scheduler in Kubernetes {release}; \
                     only {API_VERSION:?} is supported: migrate the file to v1"
                ),
                None => format!("{v:?} is not supported: use {API_VERSION:?}"),
            };
            return Err(FieldError::new("apiVersion", message));
        }
        Some(other) => {
            return Err(FieldError::new(
                "apiVersion",
                format!("expected a string, got {}", kind_of(other)),
            ));
        }
    }
    match obj.get("kind") {
        Some(serde_json::Value::String(k)) if k == KIND => Ok(()),
        None | Some(serde_json::Value::Null) => Err(FieldError::new(
            "kind",
            format!("required: set it to {KIND:?}"),
        )),
        Some(other) => Err(FieldError::new(
            "kind",
            format!("expected {KIND:?}, got {other}"),
        )),
    }
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Strictly decodes the document into the wire structs.
pub(crate) fn decode(doc: serde_json::Value) -> Result<KubeSchedulerConfiguration, FieldError> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        FieldError::new(path, e.into_inner().to_string())
    })
}

/// Where each merged profile's `pluginConfig` entries sit in the file, to
/// name `profiles[i].pluginConfig[j]` in errors found after merging.
type PluginConfigIndex = Vec<HashMap<String, usize>>;

/// Defaults and validates a decoded file into a [`SchedulerConfig`].
pub(crate) fn build(
    raw: KubeSchedulerConfiguration,
    registry: &Registry,
) -> Result<SchedulerConfig, FieldError> {
    let extenders = build_extenders(&raw.extenders)?;
    let client_connection = client_connection(&raw.client_connection)?;
    let leader_election = leader_election(&raw.leader_election)?;

    let parallelism = raw.parallelism.unwrap_or(DEFAULT_PARALLELISM);
    if parallelism <= 0 {
        return Err(FieldError::new(
            "parallelism",
            format!("{parallelism}: should be an integer value greater than zero"),
        ));
    }
    let global_pct = percentage("percentageOfNodesToScore", raw.percentage_of_nodes_to_score)?
        .unwrap_or(DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE);
    percentage(
        "percentageOfPlacementsToScore",
        raw.percentage_of_placements_to_score,
    )?;
    let initial = raw.pod_initial_backoff_seconds.unwrap_or(1);
    if initial <= 0 {
        return Err(FieldError::new(
            "podInitialBackoffSeconds",
            format!("{initial}: must be greater than 0"),
        ));
    }
    let max = raw.pod_max_backoff_seconds.unwrap_or(10);
    if max < initial {
        return Err(FieldError::new(
            "podMaxBackoffSeconds",
            format!("{max}: must be greater than or equal to podInitialBackoffSeconds ({initial})"),
        ));
    }

    let mut raw_profiles = raw.profiles;
    if raw_profiles.is_empty() {
        raw_profiles.push(KubeSchedulerProfile::default());
    }
    // Upstream names the profile only when it is the only one.
    if raw_profiles.len() == 1 && raw_profiles[0].scheduler_name.is_none() {
        raw_profiles[0].scheduler_name = Some(DEFAULT_SCHEDULER_NAME.to_owned());
    }
    let mut profiles = Vec::with_capacity(raw_profiles.len());
    let mut pc_index: PluginConfigIndex = Vec::new();
    for (i, p) in raw_profiles.iter().enumerate() {
        let (profile, index) = profile(i, p, global_pct, registry)?;
        profiles.push(profile);
        pc_index.push(index);
    }
    // Upstream's buildExtenders: resources an extender manages with
    // `ignoredByScheduler` become NodeResourcesFit's `ignoredResources` in
    // every profile (replacing what the file says there).
    let ignored = ignored_by_scheduler(&extenders);
    if !ignored.is_empty() {
        for p in &mut profiles {
            let args = p
                .plugin_config
                .entry(names::NODE_RESOURCES_FIT.to_owned())
                .or_insert_with(|| serde_json::json!({}));
            if let Some(obj) = args.as_object_mut() {
                obj.insert("ignoredResources".into(), serde_json::json!(ignored));
            }
        }
    }

    let cfg = SchedulerConfig {
        profiles,
        parallelism: usize::try_from(parallelism).unwrap_or(1),
        percentage_of_nodes_to_score: global_pct,
        pod_initial_backoff: Duration::from_secs(initial.unsigned_abs()),
        pod_max_backoff: Duration::from_secs(max.unsigned_abs()),
        leader_election,
        client_connection,
        enable_profiling: raw.enable_profiling.unwrap_or(true),
        enable_contention_profiling: raw
            .enable_contention_profiling
            .unwrap_or(raw.enable_profiling.unwrap_or(true)),
        delay_cache_until_active: raw.delay_cache_until_active,
        extenders,
    };
    check_profiles(&cfg, registry, &pc_index)?;
    Ok(cfg)
}

fn percentage(path: &str, value: Option<i32>) -> Result<Option<u32>, FieldError> {
    match value {
        None => Ok(None),
        Some(v) => u32::try_from(v)
            .ok()
            .filter(|v| *v <= 100)
            .map(Some)
            .ok_or_else(|| FieldError::new(path, format!("{v}: not in valid range [0-100]"))),
    }
}

fn client_connection(
    raw: &types::ClientConnectionConfiguration,
) -> Result<ClientConnection, FieldError> {
    if raw.burst < 0 {
        return Err(FieldError::new(
            "clientConnection.burst",
            format!("{}: must be non-negative", raw.burst),
        ));
    }
    let or = |s: &str, d: &str| {
        if s.is_empty() {
            d.to_owned()
        } else {
            s.to_owned()
        }
    };
    Ok(ClientConnection {
        kubeconfig: raw.kubeconfig.clone(),
        accept_content_types: raw.accept_content_types.clone(),
        content_type: or(&raw.content_type, DEFAULT_CONTENT_TYPE),
        // Upstream: the scheduler's own QPS / burst when 0.
        qps: if raw.qps == 0.0 { DEFAULT_QPS } else { raw.qps },
        burst: if raw.burst == 0 {
            DEFAULT_BURST
        } else {
            raw.burst.unsigned_abs()
        },
    })
}

/// A `metav1.Duration` field: unset or zero → `default`; negative kept as
/// negative nanoseconds for validation.
fn duration_field(path: &str, raw: Option<&String>, default: Duration) -> Result<i64, FieldError> {
    let nanos = match raw {
        None => 0,
        Some(s) => parse_go_duration(s).map_err(|m| FieldError::new(path, m))?,
    };
    Ok(if nanos == 0 {
        i64::try_from(default.as_nanos()).unwrap_or(i64::MAX)
    } else {
        nanos
    })
}

fn leader_election(raw: &types::LeaderElectionConfiguration) -> Result<LeaderElection, FieldError> {
    let lease = duration_field(
        "leaderElection.leaseDuration",
        raw.lease_duration.as_ref(),
        DEFAULT_LEASE_DURATION,
    )?;
    let renew = duration_field(
        "leaderElection.renewDeadline",
        raw.renew_deadline.as_ref(),
        DEFAULT_RENEW_DEADLINE,
    )?;
    let retry = duration_field(
        "leaderElection.retryPeriod",
        raw.retry_period.as_ref(),
        DEFAULT_RETRY_PERIOD,
    )?;
    let or = |s: &str, d: &str| {
        if s.is_empty() {
            d.to_owned()
        } else {
            s.to_owned()
        }
    };
    let le = LeaderElection {
        leader_elect: raw.leader_elect.unwrap_or(true),
        lease_duration: nonneg(lease),
        renew_deadline: nonneg(renew),
        retry_period: nonneg(retry),
        resource_lock: or(&raw.resource_lock, DEFAULT_RESOURCE_LOCK),
        resource_name: or(&raw.resource_name, DEFAULT_RESOURCE_NAME),
        resource_namespace: or(&raw.resource_namespace, DEFAULT_RESOURCE_NAMESPACE),
    };
    if le.leader_elect {
        for (path, v, text) in [
            ("leaderElection.leaseDuration", lease, &raw.lease_duration),
            ("leaderElection.renewDeadline", renew, &raw.renew_deadline),
            ("leaderElection.retryPeriod", retry, &raw.retry_period),
        ] {
            if v <= 0 {
                return Err(FieldError::new(
                    path,
                    format!(
                        "{}: must be greater than zero",
                        text.as_deref().unwrap_or_default()
                    ),
                ));
            }
        }
    }
    check_leader_election(&le)?;
    Ok(le)
}

fn nonneg(nanos: i64) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}

/// Upstream's `ValidateLeaderElectionConfiguration` plus the scheduler's
/// `resourceLock` rule, on defaulted values.
pub(crate) fn check_leader_election(le: &LeaderElection) -> Result<(), FieldError> {
    if !le.leader_elect {
        return Ok(());
    }
    for (path, d) in [
        ("leaderElection.leaseDuration", le.lease_duration),
        ("leaderElection.renewDeadline", le.renew_deadline),
        ("leaderElection.retryPeriod", le.retry_period),
    ] {
        if d.is_zero() {
            return Err(FieldError::new(path, "must be greater than zero"));
        }
    }
    if le.lease_duration <= le.renew_deadline {
        return Err(FieldError::new(
            "leaderElection.leaseDuration",
            format!(
                "{:?}: must be greater than renewDeadline ({:?})",
                le.lease_duration, le.renew_deadline
            ),
        ));
    }
    for (path, v) in [
        ("leaderElection.resourceLock", &le.resource_lock),
        ("leaderElection.resourceNamespace", &le.resource_namespace),
        ("leaderElection.resourceName", &le.resource_name),
    ] {
        if v.is_empty() {
            return Err(FieldError::new(path, "required"));
        }
    }
    if le.resource_lock != DEFAULT_RESOURCE_LOCK {
        return Err(FieldError::new(
            "leaderElection.resourceLock",
            format!(
                "{:?}: resourceLock value must be \"leases\"",
                le.resource_lock
            ),
        ));
    }
    Ok(())
}

/// A profile's plugin sets by config name, in the order they are checked.
fn point_sets(
    p: &types::Plugins,
) -> [(&'static str, Option<ExtensionPoint>, &types::PluginSet); 17] {
    use ExtensionPoint as E;
    [
        ("multiPoint", None, &p.multi_point),
        ("preEnqueue", Some(E::PreEnqueue), &p.pre_enqueue),
        ("queueSort", Some(E::QueueSort), &p.queue_sort),
        ("preFilter", Some(E::PreFilter), &p.pre_filter),
        ("filter", Some(E::Filter), &p.filter),
        ("postFilter", Some(E::PostFilter), &p.post_filter),
        ("preScore", Some(E::PreScore), &p.pre_score),
        ("score", Some(E::Score), &p.score),
        ("reserve", Some(E::Reserve), &p.reserve),
        ("permit", Some(E::Permit), &p.permit),
        ("preBind", Some(E::PreBind), &p.pre_bind),
        ("bind", Some(E::Bind), &p.bind),
        ("postBind", Some(E::PostBind), &p.post_bind),
        (POD_GROUP_POINTS[0], None, &p.placement_generate),
        (POD_GROUP_POINTS[1], None, &p.placement_score),
        (POD_GROUP_POINTS[2], None, &p.placement_feasible),
        (POD_GROUP_POINTS[3], None, &p.pod_group_post_filter),
    ]
}

/// Builds plugin instances on demand, once each, with the profile's args.
struct Handles<'a> {
    registry: &'a Registry,
    args: &'a BTreeMap<String, serde_json::Value>,
    built: HashMap<String, PluginHandle>,
}

impl Handles<'_> {
    fn get(&mut self, name: &str, path: &str) -> Result<&PluginHandle, FieldError> {
        if !self.built.contains_key(name) {
            let h = self
                .registry
                .build(name, self.args.get(name))
                .map_err(|e| FieldError::new(path, e.to_string()))?;
            self.built.insert(name.to_owned(), h);
        }
        Ok(&self.built[name])
    }
}

/// Validates, defaults and merges profile `i`. Returns it with the file
/// index of each `pluginConfig` entry.
fn profile(
    i: usize,
    raw: &KubeSchedulerProfile,
    global_pct: u32,
    registry: &Registry,
) -> Result<(Profile, HashMap<String, usize>), FieldError> {
    let at = |rest: &str| format!("profiles[{i}].{rest}");
    let scheduler_name = raw.scheduler_name.clone().unwrap_or_default();
    if scheduler_name.is_empty() {
        let why = if raw.scheduler_name.is_none() {
            "required: every profile needs a name when there are several"
        } else {
            "required"
        };
        return Err(FieldError::new(at("schedulerName"), why));
    }
    let pct = percentage(
        &at("percentageOfNodesToScore"),
        raw.percentage_of_nodes_to_score,
    )?
    .unwrap_or(global_pct);
    percentage(
        &at("percentageOfPlacementsToScore"),
        raw.percentage_of_placements_to_score,
    )?;
    let workload_class = match raw.workload_class.as_deref() {
        None => None,
        Some(c) => Some(WorkloadClass::parse(c).ok_or_else(|| {
            FieldError::new(
                at("workloadClass"),
                format!("{c:?} is not one of \"online\", \"batch\""),
            )
        })?),
    };

    let tie_break = match raw.tie_break.as_deref() {
        None => TieBreak::Random,
        Some(t) => TieBreak::parse(t).ok_or_else(|| {
            FieldError::new(
                at("tieBreak"),
                format!("{t:?} is not one of \"Random\", \"NodeName\""),
            )
        })?,
    };

    // pluginConfig: names, duplicates, args.
    let mut plugin_config = BTreeMap::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (j, pc) in raw.plugin_config.iter().enumerate() {
        let entry = at(&format!("pluginConfig[{j}]"));
        let name = pc.name.as_str();
        if name.is_empty() {
            return Err(FieldError::new(format!("{entry}.name"), "required"));
        }
        if let Some(k) = index.get(name) {
            return Err(FieldError::new(
                entry,
                format!("duplicate value {name:?} (also pluginConfig[{k}])"),
            ));
        }
        index.insert(name.to_owned(), j);
        if REMOVED_UPSTREAM.contains(&name) {
            return Err(removed_upstream(entry, name));
        }
        if is_not_implemented(registry, name) {
            tracing::warn!(
                profile = %scheduler_name, plugin = name,
                "pluginConfig for {name} ignored: Flotilla does not implement {name}"
            );
            continue;
        }
        if !registry.names().contains(&name) {
            return Err(unknown_plugin(format!("{entry}.name"), name));
        }
        let Some(args) = pc.args.as_ref().filter(|a| !a.is_null()) else {
            continue;
        };
        let args = strip_type_meta(&entry, name, args)?;
        if let Err(e) = registry.build(name, Some(&args)) {
            return Err(args_error(&entry, e));
        }
        plugin_config.insert(name.to_owned(), args);
    }

    // Plugin sets: names and weights at their file paths; then the
    // explicit points' own rules (implemented, not twice).
    let mut handles = Handles {
        registry,
        args: &plugin_config,
        built: HashMap::new(),
    };
    let custom = match &raw.plugins {
        None => None,
        Some(plugins) => Some(custom_plugins(
            &at("plugins"),
            &scheduler_name,
            plugins,
            &mut handles,
        )?),
    };
    let webhook = raw
        .placement_webhook
        .as_ref()
        .map(|w| build_webhook(&at("placementWebhook"), w))
        .transpose()?;
    let profile = Profile {
        scheduler_name,
        plugins: merge_plugins(custom.as_ref()),
        plugin_config,
        percentage_of_nodes_to_score: pct,
        workload_class,
        webhook,
        tie_break,
    };
    Ok((profile, index))
}

fn removed_upstream(path: String, name: &str) -> FieldError {
    FieldError::new(
        path,
        format!("{name:?} was invalid in version {API_VERSION:?}: upstream removed this plugin"),
    )
}

/// Checks `args.apiVersion` / `args.kind` and returns the args without them.
fn strip_type_meta(
    entry: &str,
    name: &str,
    args: &serde_json::Value,
) -> Result<serde_json::Value, FieldError> {
    let mut args = args.clone();
    let Some(obj) = args.as_object_mut() else {
        return Err(FieldError::new(
            format!("{entry}.args"),
            format!("expected an object ({name}Args), got {}", kind_of(&args)),
        ));
    };
    if let Some(v) = obj.remove("apiVersion")
        && v.as_str() != Some(API_VERSION)
    {
        return Err(FieldError::new(
            format!("{entry}.args.apiVersion"),
            format!("expected {API_VERSION:?}, got {v}"),
        ));
    }
    if let Some(k) = obj.remove("kind") {
        let want = format!("{name}Args");
        if k.as_str() != Some(want.as_str()) {
            return Err(FieldError::new(
                format!("{entry}.args.kind"),
                format!("expected {want:?}, got {k}"),
            ));
        }
    }
    Ok(args)
}

/// Maps a factory's error (`"<path inside args>: <message>"`, see
/// [`crate::framework::decode_args`]) under `<entry>.args`.
fn args_error(entry: &str, e: RegistryError) -> FieldError {
    let RegistryError::Args { message, .. } = e else {
        return FieldError::new(entry.to_owned(), e.to_string());
    };
    match message.split_once(": ") {
        Some(("", rest)) => FieldError::new(format!("{entry}.args"), rest),
        Some((inner, rest)) if !inner.contains(' ') => {
            FieldError::new(format!("{entry}.args.{inner}"), rest)
        }
        _ => FieldError::new(format!("{entry}.args"), message.trim_start_matches(": ")),
    }
}

/// Checks every set of `plugins` at its file path and converts the sets to
/// the in-process form, dropping (with a warning) enabled plugins Flotilla
/// does not implement.
fn custom_plugins(
    base: &str,
    profile: &str,
    plugins: &types::Plugins,
    handles: &mut Handles<'_>,
) -> Result<Plugins, FieldError> {
    let registry = handles.registry;
    let mut out = Plugins::default();
    for (set_name, point, set) in point_sets(plugins) {
        let mut enabled: Vec<PluginRef> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for (k, p) in set.enabled.iter().enumerate() {
            let path = format!("{base}.{set_name}.enabled[{k}]");
            let name = p.name.as_str();
            if name.is_empty() {
                return Err(FieldError::new(format!("{path}.name"), "required"));
            }
            if name == "*" {
                return Err(FieldError::new(
                    format!("{path}.name"),
                    "\"*\" may only be used in disabled",
                ));
            }
            if REMOVED_UPSTREAM.contains(&name) {
                return Err(removed_upstream(format!("{path}.name"), name));
            }
            if let Some(w) = p.weight
                && w < 0
            {
                return Err(FieldError::new(
                    format!("{path}.weight"),
                    format!("{w}: must not be negative"),
                ));
            }
            if is_not_implemented(registry, name) {
                tracing::warn!(
                    profile,
                    plugin = name,
                    point = set_name,
                    "{name} is not implemented in Flotilla and is left out ({})",
                    not_implemented_effect(name)
                );
                continue;
            }
            if !registry.names().contains(&name) {
                return Err(unknown_plugin(format!("{path}.name"), name));
            }
            if POD_GROUP_POINTS.contains(&set_name) {
                return Err(FieldError::new(
                    format!("{path}.name"),
                    format!(
                        "plugin {name:?} does not extend {set_name} plugin: Flotilla has no \
                         pod-group scheduling"
                    ),
                ));
            }
            if let Some(point) = point {
                if !handles.get(name, &path)?.implements(point) {
                    return Err(FieldError::new(
                        format!("{path}.name"),
                        point.not_extended(name),
                    ));
                }
                if !seen.insert(name) {
                    return Err(FieldError::new(
                        format!("{path}.name"),
                        point.already_registered(name),
                    ));
                }
            }
            enabled.push(PluginRef::new(name, i64::from(p.weight.unwrap_or(0))));
        }
        let mut disabled = Vec::new();
        for (k, p) in set.disabled.iter().enumerate() {
            let name = p.name.as_str();
            let known = name == "*"
                || registry.names().contains(&name)
                || names::NOT_IMPLEMENTED.contains(&name)
                || UPSTREAM_PLUGINS.contains(&name)
                || REMOVED_UPSTREAM.contains(&name);
            if name.is_empty() {
                return Err(FieldError::new(
                    format!("{base}.{set_name}.disabled[{k}].name"),
                    "required",
                ));
            }
            if !known {
                return Err(FieldError::new(
                    format!("{base}.{set_name}.disabled[{k}].name"),
                    format!("unknown plugin {name:?}"),
                ));
            }
            disabled.push(name.to_owned());
        }
        let converted = PluginSet { enabled, disabled };
        match point {
            _ if set_name == "multiPoint" => out.multi_point = converted,
            Some(point) => {
                out.points.insert(point, converted);
            }
            // Pod-group points: only disabled entries can be left; they
            // have no effect.
            None => {}
        }
    }
    Ok(out)
}

/// Checks every merged profile: names unique, each one a valid framework
/// (upstream's `NewFramework` errors), the same queue sort everywhere.
/// `pc_index[i]` maps plugin names to their `pluginConfig` index.
pub(crate) fn check_profiles(
    cfg: &SchedulerConfig,
    registry: &Registry,
    pc_index: &PluginConfigIndex,
) -> Result<(), FieldError> {
    if cfg.profiles.is_empty() {
        return Err(FieldError::new(
            "profiles",
            "required: at least one profile",
        ));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut queue_sorts: Vec<&'static str> = Vec::new();
    for (i, p) in cfg.profiles.iter().enumerate() {
        if let Some(k) = seen.get(p.scheduler_name.as_str()) {
            return Err(FieldError::new(
                format!("profiles[{i}].schedulerName"),
                format!(
                    "duplicate value {:?} (also profiles[{k}].schedulerName)",
                    p.scheduler_name
                ),
            ));
        }
        seen.insert(&p.scheduler_name, i);
        let fw = Framework::new(p, registry).map_err(|e| match e {
            RegistryError::Args { ref name, .. } => match pc_index[i].get(name) {
                Some(j) => args_error(&format!("profiles[{i}].pluginConfig[{j}]"), e),
                None => FieldError::new(format!("profiles[{i}].plugins"), e.to_string()),
            },
            RegistryError::Profile { message, .. } => {
                FieldError::new(format!("profiles[{i}].plugins"), message)
            }
            other => FieldError::new(format!("profiles[{i}].plugins"), other.to_string()),
        })?;
        queue_sorts.push(fw.enabled_at(ExtensionPoint::QueueSort)[0]);
    }
    // Upstream's validateCommonQueueSort: the queueSort sets and the queue
    // sort plugin's args must match profile 0's; also the effective queue
    // sort plugin (the worker has one queue for all profiles).
    let first = &cfg.profiles[0];
    let qs_set = first.plugins.point(ExtensionPoint::QueueSort);
    let qs_args = first.plugin_config.get(queue_sorts[0]);
    for (i, p) in cfg.profiles.iter().enumerate().skip(1) {
        let set = p.plugins.point(ExtensionPoint::QueueSort);
        if set != qs_set {
            return Err(FieldError::new(
                format!("profiles[{i}].plugins.queueSort"),
                format!(
                    "must be the same for all profiles: profiles[0] has {}, this profile {}",
                    describe(&qs_set),
                    describe(&set)
                ),
            ));
        }
        if queue_sorts[i] != queue_sorts[0] {
            return Err(FieldError::new(
                format!("profiles[{i}].plugins.queueSort"),
                format!(
                    "must be the same for all profiles: profiles[0] sorts the queue with \
                     {:?}, this profile with {:?}",
                    queue_sorts[0], queue_sorts[i]
                ),
            ));
        }
        if p.plugin_config.get(queue_sorts[i]) != qs_args {
            let path = match pc_index[i].get(queue_sorts[i]) {
                Some(j) => format!("profiles[{i}].pluginConfig[{j}].args"),
                None => format!("profiles[{i}].pluginConfig"),
            };
            return Err(FieldError::new(
                path,
                "queueSort must be the same for all profiles",
            ));
        }
    }
    Ok(())
}

/// `enabled [A, B], disabled [C]` (or `no queueSort set`).
fn describe(set: &PluginSet) -> String {
    if set.enabled.is_empty() && set.disabled.is_empty() {
        return "no queueSort set".to_owned();
    }
    let enabled: Vec<&str> = set.enabled.iter().map(|p| p.name.as_str()).collect();
    format!(
        "enabled [{}], disabled [{}]",
        enabled.join(", "),
        set.disabled.join(", ")
    )
}

/// [`SchedulerConfig::validate_with`]: the checks of [`build`] on an
/// already merged configuration. `pluginConfig` entries are numbered in
/// the order of their plugin names.
pub(crate) fn validate_built(cfg: &SchedulerConfig, registry: &Registry) -> Result<(), FieldError> {
    if cfg.parallelism == 0 {
        return Err(FieldError::new(
            "parallelism",
            "0: should be an integer value greater than zero",
        ));
    }
    if cfg.percentage_of_nodes_to_score > 100 {
        return Err(FieldError::new(
            "percentageOfNodesToScore",
            format!(
                "{}: not in valid range [0-100]",
                cfg.percentage_of_nodes_to_score
            ),
        ));
    }
    if cfg.pod_initial_backoff.is_zero() {
        return Err(FieldError::new(
            "podInitialBackoffSeconds",
            "0: must be greater than 0",
        ));
    }
    if cfg.pod_max_backoff < cfg.pod_initial_backoff {
        return Err(FieldError::new(
            "podMaxBackoffSeconds",
            "must be greater than or equal to podInitialBackoffSeconds",
        ));
    }
    check_leader_election(&cfg.leader_election)?;
    let mut pc_index: PluginConfigIndex = Vec::new();
    for (i, p) in cfg.profiles.iter().enumerate() {
        if p.scheduler_name.is_empty() {
            return Err(FieldError::new(
                format!("profiles[{i}].schedulerName"),
                "required",
            ));
        }
        if p.percentage_of_nodes_to_score > 100 {
            return Err(FieldError::new(
                format!("profiles[{i}].percentageOfNodesToScore"),
                format!(
                    "{}: not in valid range [0-100]",
                    p.percentage_of_nodes_to_score
                ),
            ));
        }
        let sets = std::iter::once(("multiPoint", &p.plugins.multi_point)).chain(
            p.plugins
                .points
                .iter()
                .map(|(point, set)| (point.config_name(), set)),
        );
        for (set_name, set) in sets {
            for (k, r) in set.enabled.iter().enumerate() {
                if !registry.names().contains(&r.name.as_str()) {
                    return Err(FieldError::new(
                        format!("profiles[{i}].plugins.{set_name}.enabled[{k}].name"),
                        format!("unknown plugin {:?}", r.name),
                    ));
                }
            }
        }
        let mut index = HashMap::new();
        for (j, (name, args)) in p.plugin_config.iter().enumerate() {
            let entry = format!("profiles[{i}].pluginConfig[{j}]");
            if !registry.names().contains(&name.as_str()) {
                return Err(FieldError::new(
                    format!("{entry}.name"),
                    format!("unknown plugin {name:?}"),
                ));
            }
            if let Err(e) = registry.build(name, Some(args)) {
                return Err(args_error(&entry, e));
            }
            index.insert(name.clone(), j);
        }
        pc_index.push(index);
    }
    check_profiles(cfg, registry, &pc_index)
}
