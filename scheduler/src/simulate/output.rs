//! How `simulate` and `explain` print: the JSON document (a public
//! interface), terminal tables, and the input summary.
//!
//! # JSON (`flotilla simulate --output json`)
//! ```json
//! {"results": [
//!   {"pod": "default/web-1", "status": "Scheduled", "node": "node-2",
//!    "message": "",
//!    "nodes": {
//!      "node-1": {"filter": {"code": "Unschedulable", "plugin": "NodeResourcesFit",
//!                             "reasons": ["Insufficient cpu"]}},
//!      "node-2": {"filter": {"code": "Success"},
//!                 "scores": {"NodeResourcesFit": 62, "TaintToleration": 100},
//!                 "totalScore": 362}}}
//! ]}
//! ```
//! - `status`: `Scheduled`, `Unschedulable` (then `node` is null and
//!   `message` is upstream's FitError text) or `Error` (the pod's
//!   PriorityClass does not exist, or a plugin failed; `message` says which).
//! - `nominatedNode` and `victims` (a list of `namespace/name`) appear only
//!   for a pod that preempted: DefaultPreemption nominated that node and
//!   evicted those pods there; `status`/`node` then say where the pod landed
//!   on its next attempt (normally the nominated node).
//! - `nodes`: every node the cycle evaluated, by name. `filter.code` is
//!   `Success`, `Unschedulable`, `UnschedulableAndUnresolvable` or `Error`;
//!   for a rejected node, `plugin` is the first plugin that rejected it and
//!   `reasons` its reasons in order. Feasible nodes add `scores` (each Score
//!   plugin's normalized 0..=100 score before weighting, by plugin name) and
//!   `totalScore` (the weighted sum). Nodes not evaluated are absent.
//! - With `extenders` configured: nodes an extender's filter rejected have
//!   `plugin: "Extender"` and the extender's reasons (a node it removed
//!   without a reason says so); feasible nodes add `extenderScores`
//!   (`urlPrefix` → `score × weight × 10`, already in `totalScore`).
//! - For a profile with a placement webhook, pods the pipeline could place
//!   add `webhook`: `{"inProcessChoice": "node-2", "decidedBy": "webhook" |
//!   "fallback" | "pending", "message": "..."}` (`fallback`: the service
//!   failed and the in-process choice was used; `pending`: the service
//!   declined, or failed with `fallback: Pending`, and `status` is then
//!   `Unschedulable` with that message).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{Explanation, NodeResult, Outcome, PodResult, Simulation, code_name};
use flotilla_shared::objects::ClusterObjects;

#[derive(Serialize)]
struct JsonDocument<'a> {
    results: Vec<JsonPod<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonPod<'a> {
    pod: String,
    status: &'static str,
    node: Option<&'a str>,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    nominated_node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    victims: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    webhook: Option<JsonWebhook<'a>>,
    nodes: BTreeMap<&'a str, JsonNode<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonWebhook<'a> {
    in_process_choice: &'a str,
    decided_by: &'static str,
    message: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonNode<'a> {
    filter: JsonFilter<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scores: Option<BTreeMap<&'static str, i64>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    extender_scores: BTreeMap<&'a str, i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_score: Option<i64>,
}

#[derive(Serialize)]
struct JsonFilter<'a> {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    plugin: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasons: Option<Vec<&'a str>>,
}

/// The JSON document of `flotilla simulate --output json` (shape in the
/// module docs), pretty-printed.
///
/// # Errors
/// Only if serialization fails, which these types do not cause.
pub fn json(results: &[PodResult]) -> serde_json::Result<String> {
    let doc = JsonDocument {
        results: results.iter().map(json_pod).collect(),
    };
    serde_json::to_string_pretty(&doc)
}

fn json_pod(r: &PodResult) -> JsonPod<'_> {
    JsonPod {
        pod: r.pod.to_string(),
        status: r.outcome.status(),
        node: r.outcome.node(),
        message: r.outcome.message(),
        nominated_node: r.nominated_node.as_deref(),
        victims: r.nominated_node.as_ref().map(|_| r.victims.as_slice()),
        webhook: r.webhook.as_ref().map(|w| JsonWebhook {
            in_process_choice: &w.in_process_choice,
            decided_by: w.decided_by,
            message: &w.message,
        }),
        nodes: r
            .nodes
            .iter()
            .map(|(name, node)| (name.as_str(), json_node(node)))
            .collect(),
    }
}

fn json_node(n: &NodeResult) -> JsonNode<'_> {
    let passed = n.filter.is_success();
    JsonNode {
        filter: JsonFilter {
            code: code_name(n.filter.code),
            plugin: (!passed && !n.filter.plugin.is_empty()).then_some(n.filter.plugin),
            reasons: (!passed).then(|| n.filter.reasons.iter().map(AsRef::as_ref).collect()),
        },
        scores: n.scores.as_ref().map(|s| s.iter().copied().collect()),
        extender_scores: n
            .extender_scores
            .iter()
            .map(|(e, s)| (e.as_str(), *s))
            .collect(),
        total_score: n.total_score,
    }
}

/// One line about the input, for stderr: object counts per kind.
#[must_use]
pub fn summary(objects: &ClusterObjects) -> String {
    let bound = objects.pods.iter().filter(|p| super::is_bound(p)).count();
    format!(
        "{}: {} node(s), {} pod(s) ({bound} bound, {} pending), {} Namespace(s), \
         {} PriorityClass(es), {} PodDisruptionBudget(s), {} PodGroup(s)",
        objects.name,
        objects.nodes.len(),
        objects.pods.len(),
        objects.pods.len() - bound,
        objects.namespaces.len(),
        objects.priority_classes.len(),
        objects.pod_disruption_budgets.len(),
        objects.pod_groups.len() + objects.workload_pod_groups.len(),
    )
}

/// `flotilla simulate --output table`: one block per result, in result order.
#[must_use]
pub fn table(sim: &Simulation) -> String {
    let mut out = String::new();
    for (i, r) in sim.results.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        pod_block(&mut out, r);
    }
    if sim.results.is_empty() {
        out.push_str("no pending pod to schedule\n");
    }
    out
}

/// `flotilla explain`: the pod's block, then the verdict.
#[must_use]
pub fn explain_text(e: &Explanation, source: &str) -> String {
    let r = &e.result;
    let mut out = format!(
        "explain {} against {source}: {} node(s), {} bound pod(s); other pending pods are not \
         placed first\n",
        r.pod, r.num_all_nodes, e.bound_pods
    );
    for note in &e.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out.push('\n');
    pod_block(&mut out, r);
    out.push('\n');
    match &r.outcome {
        Outcome::Scheduled { node } => {
            let total = r.nodes.get(node).and_then(|n| n.total_score);
            match total {
                Some(t) => {
                    let _ = writeln!(out, "would pick: {node} (total score {t})");
                }
                None => {
                    let _ = writeln!(out, "would pick: {node}");
                }
            }
        }
        Outcome::Unschedulable { message } if r.webhook.is_some() => {
            let _ = writeln!(out, "left pending by the placement webhook: {message}");
        }
        Outcome::Unschedulable { message } => {
            let _ = writeln!(out, "fits nowhere: {message}");
        }
        Outcome::Error { message } => {
            let _ = writeln!(out, "cannot be scheduled: {message}");
        }
    }
    out
}

/// One pod: headline, feasible nodes with scores, rejected nodes.
fn pod_block(out: &mut String, r: &PodResult) {
    let priority = r
        .priority
        .map_or_else(|| "unresolved".to_owned(), |p| p.to_string());
    let headline = match &r.outcome {
        Outcome::Scheduled { node } => format!("Scheduled on {node}"),
        Outcome::Unschedulable { .. } => "Unschedulable".to_owned(),
        Outcome::Error { .. } => "Error".to_owned(),
    };
    let _ = writeln!(
        out,
        "{}: {headline}  (priority {priority}, profile {})",
        r.pod, r.profile
    );
    match &r.outcome {
        Outcome::Scheduled { .. } => {}
        Outcome::Unschedulable { message } | Outcome::Error { message } => {
            let _ = writeln!(out, "  {message}");
        }
    }
    if let Some(node) = &r.nominated_node {
        let _ = writeln!(
            out,
            "  preempted on {node}: evicted {}",
            r.victims.join(", ")
        );
    }
    if let Some(w) = &r.webhook {
        let what = match w.decided_by {
            "webhook" => "chosen by the placement webhook",
            "fallback" => "the placement webhook failed; in-process choice used",
            _ => "left pending by the placement webhook",
        };
        let reason = if w.message.is_empty() {
            String::new()
        } else {
            format!(": {}", w.message)
        };
        let _ = writeln!(
            out,
            "  {what} (in-process choice {}){reason}",
            w.in_process_choice
        );
    }

    let mut feasible: Vec<(&String, &NodeResult)> = r
        .nodes
        .iter()
        .filter(|(_, n)| n.total_score.is_some())
        .collect();
    feasible.sort_by(|a, b| b.1.total_score.cmp(&a.1.total_score).then(a.0.cmp(b.0)));
    let rejected: Vec<(&String, &NodeResult)> = r
        .nodes
        .iter()
        .filter(|(_, n)| n.total_score.is_none())
        .collect();

    if !feasible.is_empty() {
        out.push_str(
            "  feasible nodes: each plugin's normalized score (x its weight), weighted total\n",
        );
        // Extenders that scored any of these nodes, in name order.
        let extenders: std::collections::BTreeSet<&str> = feasible
            .iter()
            .flat_map(|(_, n)| n.extender_scores.iter().map(|(e, _)| e.as_str()))
            .collect();
        let mut header = vec![String::new(), "NODE".to_owned()];
        header.extend(r.score_weights.iter().map(|(p, w)| format!("{p} x{w}")));
        header.extend(extenders.iter().map(|e| format!("extender {e}")));
        header.push("TOTAL".to_owned());
        let mut rows = vec![header];
        for (name, n) in &feasible {
            let picked = r.outcome.node() == Some(name.as_str());
            let mut row = vec![if picked { "->" } else { "" }.to_owned(), (*name).clone()];
            let scores: BTreeMap<&str, i64> = n.scores.iter().flatten().copied().collect();
            row.extend(r.score_weights.iter().map(|(p, _)| {
                scores
                    .get(p)
                    .map_or_else(|| "-".to_owned(), ToString::to_string)
            }));
            let ext: BTreeMap<&str, i64> = n
                .extender_scores
                .iter()
                .map(|(e, s)| (e.as_str(), *s))
                .collect();
            row.extend(extenders.iter().map(|e| {
                ext.get(e)
                    .map_or_else(|| "-".to_owned(), ToString::to_string)
            }));
            row.push(n.total_score.map_or_else(String::new, |t| t.to_string()));
            rows.push(row);
        }
        let columns = rows[0].len();
        let right: Vec<bool> = (0..columns).map(|c| c >= 2).collect();
        columns_into(out, &rows, &right, "  ");
    }
    if !rejected.is_empty() {
        out.push_str("  rejected nodes: first plugin that rejected each, and why\n");
        let mut rows = vec![vec![
            String::new(),
            "NODE".to_owned(),
            "PLUGIN".to_owned(),
            "CODE".to_owned(),
            "REASONS".to_owned(),
        ]];
        for (name, n) in &rejected {
            rows.push(vec![
                String::new(),
                (*name).clone(),
                n.filter.plugin.to_owned(),
                code_name(n.filter.code).to_owned(),
                n.filter.reasons.join(", "),
            ]);
        }
        columns_into(out, &rows, &[false; 5], "  ");
    }
    let evaluated = r.nodes.len();
    // A cycle that ended normally skipped only the nodes its search never
    // reached; an Error result ended early or never ran.
    let completed = !matches!(r.outcome, Outcome::Error { .. });
    if completed && evaluated < r.num_all_nodes {
        let _ = writeln!(
            out,
            "  not evaluated: {} of {} node(s) (the search stops once enough feasible nodes \
             are found: percentageOfNodesToScore)",
            r.num_all_nodes - evaluated,
            r.num_all_nodes
        );
    }
}

/// Writes `rows` as aligned columns (two spaces apart), each line after
/// `indent`; `right[c]` right-aligns column `c`. Trailing spaces are cut.
fn columns_into(out: &mut String, rows: &[Vec<String>], right: &[bool], indent: &str) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = indent.to_owned();
        for (c, width) in widths.iter().enumerate() {
            let cell = row.get(c).map_or("", String::as_str);
            if c > 0 {
                line.push_str("  ");
            }
            let pad = width.saturating_sub(cell.chars().count());
            if right.get(c).copied().unwrap_or(false) {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::PodKey;
    use flotilla_shared::framework::Status;

    fn result(outcome: Outcome, nodes: Vec<(&str, NodeResult)>, num_all_nodes: usize) -> PodResult {
        PodResult {
            pod: PodKey::new("default", "web-1"),
            priority: Some(0),
            profile: "default-scheduler".into(),
            outcome,
            nodes: nodes.into_iter().map(|(n, r)| (n.to_owned(), r)).collect(),
            num_all_nodes,
            score_weights: vec![("TaintToleration", 3), ("NodeResourcesFit", 1)],
            nominated_node: None,
            victims: Vec::new(),
            webhook: None,
        }
    }

    fn scored(taint: i64, fit: i64) -> NodeResult {
        NodeResult {
            filter: Status::success(),
            scores: Some(vec![("TaintToleration", taint), ("NodeResourcesFit", fit)]),
            extender_scores: Vec::new(),
            total_score: Some(3 * taint + fit),
        }
    }

    #[test]
    fn table_block_lists_feasible_by_score_then_rejected_by_name() {
        let r = result(
            Outcome::Scheduled {
                node: "node-2".into(),
            },
            vec![
                (
                    "node-1",
                    NodeResult {
                        filter: Status::unschedulable("Insufficient cpu")
                            .with_plugin("NodeResourcesFit"),
                        scores: None,
                        extender_scores: Vec::new(),
                        total_score: None,
                    },
                ),
                ("node-2", scored(100, 62)),
                ("node-4", scored(0, 69)),
            ],
            5,
        );
        let sim = Simulation {
            results: vec![r],
            ..Simulation::default()
        };
        let want = "\
default/web-1: Scheduled on node-2  (priority 0, profile default-scheduler)
  feasible nodes: each plugin's normalized score (x its weight), weighted total
      NODE    TaintToleration x3  NodeResourcesFit x1  TOTAL
  ->  node-2                 100                   62    362
      node-4                   0                   69     69
  rejected nodes: first plugin that rejected each, and why
    NODE    PLUGIN            CODE           REASONS
    node-1  NodeResourcesFit  Unschedulable  Insufficient cpu
  not evaluated: 2 of 5 node(s) (the search stops once enough feasible nodes are found: percentageOfNodesToScore)
";
        assert_eq!(table(&sim), want);
    }

    #[test]
    fn extender_scores_and_the_webhook_show_in_table_and_json() {
        let ext = "http://127.0.0.1:8888/scheduler";
        let mut n2 = scored(100, 62);
        n2.extender_scores = vec![(ext.to_owned(), 100)];
        n2.total_score = Some(462);
        let mut r = result(
            Outcome::Scheduled {
                node: "node-2".into(),
            },
            vec![
                (
                    "node-1",
                    NodeResult {
                        filter: Status::unschedulable("label exclude-from-scheduling=true")
                            .with_plugin("Extender"),
                        scores: None,
                        extender_scores: Vec::new(),
                        total_score: None,
                    },
                ),
                ("node-2", n2),
                ("node-4", scored(0, 69)),
            ],
            3,
        );
        r.webhook = Some(super::super::WebhookResult {
            in_process_choice: "node-4".into(),
            decided_by: "webhook",
            message: "rack r7".into(),
        });
        let sim = Simulation {
            results: vec![r.clone()],
            ..Simulation::default()
        };
        let want = "\
default/web-1: Scheduled on node-2  (priority 0, profile default-scheduler)
  chosen by the placement webhook (in-process choice node-4): rack r7
  feasible nodes: each plugin's normalized score (x its weight), weighted total
      NODE    TaintToleration x3  NodeResourcesFit x1  extender http://127.0.0.1:8888/scheduler  TOTAL
  ->  node-2                 100                   62                                       100    462
      node-4                   0                   69                                         -     69
  rejected nodes: first plugin that rejected each, and why
    NODE    PLUGIN    CODE           REASONS
    node-1  Extender  Unschedulable  label exclude-from-scheduling=true
";
        assert_eq!(table(&sim), want);
        let doc: serde_json::Value =
            serde_json::from_str(&json(&[r]).expect("json")).expect("parses");
        let pod = &doc["results"][0];
        assert_eq!(pod["webhook"]["decidedBy"], "webhook");
        assert_eq!(pod["webhook"]["inProcessChoice"], "node-4");
        assert_eq!(pod["nodes"]["node-2"]["extenderScores"][ext], 100);
        assert!(pod["nodes"]["node-4"].get("extenderScores").is_none());
        assert_eq!(pod["nodes"]["node-1"]["filter"]["plugin"], "Extender");
    }

    #[test]
    fn explain_ends_with_the_verdict() {
        let fit = "0/1 nodes are available: 1 Insufficient cpu.";
        let e = Explanation {
            result: result(
                Outcome::Unschedulable {
                    message: fit.into(),
                },
                vec![(
                    "node-1",
                    NodeResult {
                        filter: Status::unschedulable("Insufficient cpu")
                            .with_plugin("NodeResourcesFit"),
                        scores: None,
                        extender_scores: Vec::new(),
                        total_score: None,
                    },
                )],
                1,
            ),
            notes: vec!["a remark".into()],
            bound_pods: 2,
        };
        let text = explain_text(&e, "c.yaml");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "explain default/web-1 against c.yaml: 1 node(s), 2 bound pod(s); other pending \
             pods are not placed first"
        );
        assert_eq!(lines[1], "note: a remark");
        assert_eq!(lines[4], format!("  {fit}"));
        assert_eq!(
            lines.last().copied(),
            Some(format!("fits nowhere: {fit}").as_str())
        );
    }

    #[test]
    fn summary_counts_every_kind_and_flags_unused_ones() {
        let mut o = ClusterObjects {
            name: "c".into(),
            ..ClusterObjects::default()
        };
        assert_eq!(
            summary(&o),
            "c: 0 node(s), 0 pod(s) (0 bound, 0 pending), 0 Namespace(s), 0 PriorityClass(es), \
             0 PodDisruptionBudget(s), 0 PodGroup(s)"
        );
        o.pod_groups
            .push(flotilla_shared::pod_group::PodGroup::default());
        assert!(summary(&o).ends_with(", 1 PodGroup(s)"), "{}", summary(&o));
    }
}
