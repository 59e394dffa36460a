//! Prometheus metrics (`GET /metrics`, text exposition format).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a decision counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// Decision kind (`place`, `shift`, ...) or driver event.
    pub kind: String,
    /// `policy` or `driver`.
    pub source: String,
}

/// Labels of a per-state gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// Job status.
    pub state: String,
}

/// Labels of a per-link gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LinkLabels {
    /// `from→to` by node names.
    pub link: String,
}

/// Every metric the service exports.
pub struct Metrics {
    registry: Registry,
    /// Jobs by status (set at each scrape).
    pub jobs: Family<StateLabels, Gauge>,
    /// Log entries by kind and source.
    pub decisions: Family<DecisionLabels, Counter>,
    /// Decisions the ledger refused as invalid.
    pub invalid_decisions: Counter,
    /// Jobs accepted.
    pub submissions: Counter,
    /// Jobs forgotten after `--keep-finished` (this replica's, since it led).
    pub expired: Counter,
    /// Iteration reports accepted.
    pub reports: Counter,
    /// Time in `Policy::schedule` / `on_iteration`, s.
    pub decision_seconds: Histogram,
    /// Time of a group commit, s.
    pub commit_seconds: Histogram,
    /// Commands per group commit.
    pub batch_size: Histogram,
    /// Agents up (set at each scrape).
    pub agents_up: Gauge,
    /// Placed jobs held until the hosts of their earlier placement show
    /// their ranks stopped (`ledger::handover`; set at each scrape).
    pub jobs_awaiting_handover: Gauge,
    /// GPUs by state, `used` or `free`, of nodes up (set at each scrape).
    pub gpus: Family<StateLabels, Gauge>,
    /// Mean offered load over capacity of each link active jobs cross (set
    /// at each scrape; [`crate::dashboard::link_loads`]).
    pub link_utilisation: Family<LinkLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("orrery");
        let m = Metrics {
            registry: Registry::default(),
            jobs: Family::default(),
            decisions: Family::default(),
            invalid_decisions: Counter::default(),
            submissions: Counter::default(),
            expired: Counter::default(),
            reports: Counter::default(),
            decision_seconds: Histogram::new(exponential_buckets(1e-5, 4.0, 10)),
            commit_seconds: Histogram::new(exponential_buckets(1e-4, 2.0, 14)),
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            agents_up: Gauge::default(),
            jobs_awaiting_handover: Gauge::default(),
            gpus: Family::default(),
            link_utilisation: Family::default(),
        };
        registry.register("jobs", "Jobs by state", m.jobs.clone());
        registry.register("decisions", "Logged decisions and driver events by kind", m.decisions.clone());
        registry.register("invalid_decisions", "Policy decisions refused as invalid", m.invalid_decisions.clone());
        registry.register("submissions", "Jobs accepted", m.submissions.clone());
        registry.register("expired", "Jobs forgotten once they ended --keep-finished ago", m.expired.clone());
        registry.register("iteration_reports", "Iteration reports accepted", m.reports.clone());
        registry.register("decision_seconds", "Time in a policy call", m.decision_seconds.clone());
        registry.register("commit_seconds", "Time of a group commit to SQLite", m.commit_seconds.clone());
        registry.register("commit_batch_size", "Commands per group commit", m.batch_size.clone());
        registry.register("agents_up", "Node agents registered and heartbeating", m.agents_up.clone());
        registry.register(
            "jobs_awaiting_handover",
            "Placed jobs whose earlier placement's ranks are still stopping",
            m.jobs_awaiting_handover.clone(),
        );
        registry.register("gpus", "GPUs of nodes up, by state (used, free)", m.gpus.clone());
        registry.register(
            "link_utilisation",
            "Mean offered load over capacity of links that running jobs cross",
            m.link_utilisation.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The sample names the service exports, with one sample of every family.
    fn exported() -> BTreeSet<String> {
        let m = Metrics::default();
        m.jobs.get_or_create(&StateLabels { state: "running".into() }).set(1);
        m.gpus.get_or_create(&StateLabels { state: "used".into() }).set(1);
        m.decisions.get_or_create(&DecisionLabels { kind: "place".into(), source: "policy".into() }).inc();
        m.link_utilisation.get_or_create(&LinkLabels { link: "h0→leaf0".into() }).set(0.5);
        m.decision_seconds.observe(1e-3);
        m.encode()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
            .collect()
    }

    /// deploy/grafana-dashboard.json parses, every panel has a query, and
    /// every metric its queries name is one the service exports.
    #[test]
    fn the_grafana_dashboard_queries_only_exported_metrics() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/grafana-dashboard.json");
        let text = std::fs::read_to_string(path).expect("deploy/grafana-dashboard.json");
        let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
        let exported = exported();
        for name in ["orrery_jobs", "orrery_decisions_total", "orrery_decision_seconds_bucket", "orrery_gpus"] {
            assert!(exported.contains(name), "{name} not in {exported:?}");
        }
        let panels = dash["panels"].as_array().expect("panels");
        assert!(panels.len() >= 8, "{} panels", panels.len());
        let mut named = BTreeSet::new();
        for p in panels {
            let title = p["title"].as_str().expect("a title");
            let targets = p["targets"].as_array().filter(|t| !t.is_empty());
            let targets = targets.unwrap_or_else(|| panic!("panel {title:?} has no query"));
            for t in targets {
                let expr = t["expr"].as_str().unwrap_or_else(|| panic!("panel {title:?}: a target without expr"));
                for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if word.starts_with("orrery_") {
                        assert!(
                            exported.contains(word),
                            "panel {title:?} queries {word}, which /metrics does not export"
                        );
                        named.insert(word.to_string());
                    }
                }
            }
            assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {title:?} uses the dashboard's data source");
        }
        // The operator's essentials are on it.
        for name in ["orrery_agents_up", "orrery_jobs", "orrery_link_utilisation", "orrery_decisions_total"] {
            assert!(named.contains(name), "the dashboard does not show {name}");
        }
    }
}
