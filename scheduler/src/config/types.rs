//! The `kubescheduler.config.k8s.io/v1` wire format, decoded strictly: every
//! field of upstream's `KubeSchedulerConfiguration`
//! (`staging/src/k8s.io/kube-scheduler/config/v1/types.go`, with the embedded
//! component-base `LeaderElectionConfiguration`,
//! `ClientConnectionConfiguration` and `DebuggingConfiguration`) plus
//! Flotilla's `workloadClass` profile field. Unknown fields are errors, as in
//! upstream's strict decoding. These structs are the file as written;
//! defaulting and validation happen in [`super::validate`].
//!
//! Like Go's JSON decoder, an explicit `null` leaves a non-pointer field at
//! its zero value (`profiles: ~` is no profile).

use serde::{Deserialize, Deserializer};

/// Deserializes `null` as `T::default()` (Go's behaviour for non-pointer
/// fields); used with `#[serde(default)]`.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `KubeSchedulerConfiguration`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct KubeSchedulerConfiguration {
    /// `apiVersion` (checked before decoding; kept so strict decoding accepts it).
    #[serde(default, deserialize_with = "nullable")]
    #[allow(dead_code)]
    pub api_version: String,
    /// `kind` (checked before decoding).
    #[serde(default, deserialize_with = "nullable")]
    #[allow(dead_code)]
    pub kind: String,
    /// `parallelism` (int32).
    pub parallelism: Option<i32>,
    /// `leaderElection`.
    #[serde(default, deserialize_with = "nullable")]
    pub leader_election: LeaderElectionConfiguration,
    /// `clientConnection`.
    #[serde(default, deserialize_with = "nullable")]
    pub client_connection: ClientConnectionConfiguration,
    /// `enableProfiling` (inline `DebuggingConfiguration`).
    pub enable_profiling: Option<bool>,
    /// `enableContentionProfiling` (inline `DebuggingConfiguration`).
    pub enable_contention_profiling: Option<bool>,
    /// `percentageOfNodesToScore` (int32).
    pub percentage_of_nodes_to_score: Option<i32>,
    /// `percentageOfPlacementsToScore` (int32; pod-group scheduling).
    pub percentage_of_placements_to_score: Option<i32>,
    /// `podInitialBackoffSeconds` (int64).
    pub pod_initial_backoff_seconds: Option<i64>,
    /// `podMaxBackoffSeconds` (int64).
    pub pod_max_backoff_seconds: Option<i64>,
    /// `profiles`.
    #[serde(default, deserialize_with = "nullable")]
    pub profiles: Vec<KubeSchedulerProfile>,
    /// `extenders`.
    #[serde(default, deserialize_with = "nullable")]
    pub extenders: Vec<Extender>,
    /// `delayCacheUntilActive`.
    #[serde(default, deserialize_with = "nullable")]
    pub delay_cache_until_active: bool,
}

/// component-base `LeaderElectionConfiguration` (v1alpha1).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LeaderElectionConfiguration {
    /// `leaderElect`.
    pub leader_elect: Option<bool>,
    /// `leaseDuration` (Go duration string).
    pub lease_duration: Option<String>,
    /// `renewDeadline` (Go duration string).
    pub renew_deadline: Option<String>,
    /// `retryPeriod` (Go duration string).
    pub retry_period: Option<String>,
    /// `resourceLock`.
    #[serde(default, deserialize_with = "nullable")]
    pub resource_lock: String,
    /// `resourceName`.
    #[serde(default, deserialize_with = "nullable")]
    pub resource_name: String,
    /// `resourceNamespace`.
    #[serde(default, deserialize_with = "nullable")]
    pub resource_namespace: String,
}

/// component-base `ClientConnectionConfiguration` (v1alpha1).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ClientConnectionConfiguration {
    /// `kubeconfig`.
    #[serde(default, deserialize_with = "nullable")]
    pub kubeconfig: String,
    /// `acceptContentTypes`.
    #[serde(default, deserialize_with = "nullable")]
    pub accept_content_types: String,
    /// `contentType`.
    #[serde(default, deserialize_with = "nullable")]
    pub content_type: String,
    /// `qps` (float32).
    #[serde(default, deserialize_with = "nullable")]
    pub qps: f32,
    /// `burst` (int32).
    #[serde(default, deserialize_with = "nullable")]
    pub burst: i32,
}

/// `KubeSchedulerProfile`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct KubeSchedulerProfile {
    /// `schedulerName`.
    pub scheduler_name: Option<String>,
    /// `percentageOfNodesToScore` (int32).
    pub percentage_of_nodes_to_score: Option<i32>,
    /// `percentageOfPlacementsToScore` (int32).
    pub percentage_of_placements_to_score: Option<i32>,
    /// `plugins`.
    pub plugins: Option<Plugins>,
    /// `pluginConfig`.
    #[serde(default, deserialize_with = "nullable")]
    pub plugin_config: Vec<PluginConfig>,
    /// Flotilla's extension: `online` or `batch`.
    pub workload_class: Option<String>,
    /// Flotilla's extension: delegate the choice of node to an HTTP service.
    pub placement_webhook: Option<PlacementWebhook>,
    /// Flotilla's extension: `Random` or `NodeName`.
    pub tie_break: Option<String>,
}

/// Flotilla's `placementWebhook` profile field (see [`crate::webhook`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PlacementWebhook {
    /// `url`: where decisions are POSTed.
    #[serde(default, deserialize_with = "nullable")]
    pub url: String,
    /// `timeout` (Go duration).
    pub timeout: Option<String>,
    /// `fallback`: `InProcess` or `Pending`.
    pub fallback: Option<String>,
    /// `nodeObjects`: send whole Node objects with the candidates.
    #[serde(default, deserialize_with = "nullable")]
    pub node_objects: bool,
    /// `batch`.
    pub batch: Option<PlacementWebhookBatch>,
    /// `tlsConfig` (the extenders' `ExtenderTLSConfig`).
    pub tls_config: Option<ExtenderTlsConfig>,
}

/// `placementWebhook.batch`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PlacementWebhookBatch {
    /// `maxPods`.
    pub max_pods: Option<i64>,
    /// `maxWait` (Go duration).
    pub max_wait: Option<String>,
}

/// `Plugins`: one set per extension point, plus `multiPoint`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Plugins {
    /// `preEnqueue`.
    #[serde(default, deserialize_with = "nullable")]
    pub pre_enqueue: PluginSet,
    /// `queueSort`.
    #[serde(default, deserialize_with = "nullable")]
    pub queue_sort: PluginSet,
    /// `preFilter`.
    #[serde(default, deserialize_with = "nullable")]
    pub pre_filter: PluginSet,
    /// `filter`.
    #[serde(default, deserialize_with = "nullable")]
    pub filter: PluginSet,
    /// `postFilter`.
    #[serde(default, deserialize_with = "nullable")]
    pub post_filter: PluginSet,
    /// `preScore`.
    #[serde(default, deserialize_with = "nullable")]
    pub pre_score: PluginSet,
    /// `score`.
    #[serde(default, deserialize_with = "nullable")]
    pub score: PluginSet,
    /// `reserve`.
    #[serde(default, deserialize_with = "nullable")]
    pub reserve: PluginSet,
    /// `permit`.
    #[serde(default, deserialize_with = "nullable")]
    pub permit: PluginSet,
    /// `preBind`.
    #[serde(default, deserialize_with = "nullable")]
    pub pre_bind: PluginSet,
    /// `bind`.
    #[serde(default, deserialize_with = "nullable")]
    pub bind: PluginSet,
    /// `postBind`.
    #[serde(default, deserialize_with = "nullable")]
    pub post_bind: PluginSet,
    /// `multiPoint`.
    #[serde(default, deserialize_with = "nullable")]
    pub multi_point: PluginSet,
    /// `placementGenerate` (pod-group scheduling).
    #[serde(default, deserialize_with = "nullable")]
    pub placement_generate: PluginSet,
    /// `placementScore` (pod-group scheduling).
    #[serde(default, deserialize_with = "nullable")]
    pub placement_score: PluginSet,
    /// `placementFeasible` (pod-group scheduling).
    #[serde(default, deserialize_with = "nullable")]
    pub placement_feasible: PluginSet,
    /// `podGroupPostFilter` (pod-group scheduling).
    #[serde(default, deserialize_with = "nullable")]
    pub pod_group_post_filter: PluginSet,
}

/// `PluginSet`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PluginSet {
    /// `enabled`.
    #[serde(default, deserialize_with = "nullable")]
    pub enabled: Vec<Plugin>,
    /// `disabled`.
    #[serde(default, deserialize_with = "nullable")]
    pub disabled: Vec<Plugin>,
}

/// `Plugin`: a name and an optional weight.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Plugin {
    /// `name`.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `weight` (int32).
    pub weight: Option<i32>,
}

/// `PluginConfig`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PluginConfig {
    /// `name`.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `args`: arbitrary JSON, decoded by the plugin's factory.
    pub args: Option<serde_json::Value>,
}

/// `Extender`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Extender {
    /// `urlPrefix`.
    #[serde(default, deserialize_with = "nullable")]
    pub url_prefix: String,
    /// `filterVerb`.
    #[serde(default, deserialize_with = "nullable")]
    pub filter_verb: String,
    /// `preemptVerb`.
    #[serde(default, deserialize_with = "nullable")]
    pub preempt_verb: String,
    /// `prioritizeVerb`.
    #[serde(default, deserialize_with = "nullable")]
    pub prioritize_verb: String,
    /// `weight` (int64).
    #[serde(default, deserialize_with = "nullable")]
    pub weight: i64,
    /// `bindVerb`.
    #[serde(default, deserialize_with = "nullable")]
    pub bind_verb: String,
    /// `enableHTTPS`.
    #[serde(default, deserialize_with = "nullable", rename = "enableHTTPS")]
    pub enable_https: bool,
    /// `tlsConfig`.
    pub tls_config: Option<ExtenderTlsConfig>,
    /// `httpTimeout` (Go duration string).
    pub http_timeout: Option<String>,
    /// `nodeCacheCapable`.
    #[serde(default, deserialize_with = "nullable")]
    pub node_cache_capable: bool,
    /// `managedResources`.
    #[serde(default, deserialize_with = "nullable")]
    pub managed_resources: Vec<ExtenderManagedResource>,
    /// `ignorable`.
    #[serde(default, deserialize_with = "nullable")]
    pub ignorable: bool,
}

/// `ExtenderManagedResource`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExtenderManagedResource {
    /// `name`.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `ignoredByScheduler`.
    #[serde(default, deserialize_with = "nullable")]
    pub ignored_by_scheduler: bool,
}

/// `ExtenderTLSConfig`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExtenderTlsConfig {
    /// `insecure`.
    #[serde(default, deserialize_with = "nullable")]
    pub insecure: bool,
    /// `serverName`.
    #[serde(default, deserialize_with = "nullable")]
    pub server_name: String,
    /// `certFile`.
    #[serde(default, deserialize_with = "nullable")]
    pub cert_file: String,
    /// `keyFile`.
    #[serde(default, deserialize_with = "nullable")]
    pub key_file: String,
    /// `caFile`.
    #[serde(default, deserialize_with = "nullable")]
    pub ca_file: String,
    /// `certData` (base64).
    #[serde(default, deserialize_with = "nullable")]
    pub cert_data: String,
    /// `keyData` (base64).
    #[serde(default, deserialize_with = "nullable")]
    pub key_data: String,
    /// `caData` (base64).
    #[serde(default, deserialize_with = "nullable")]
    pub ca_data: String,
}
