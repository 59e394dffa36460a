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
            reports: Counter::default(),
            decision_seconds: Histogram::new(exponential_buckets(1e-5, 4.0, 10)),
            commit_seconds: Histogram::new(exponential_buckets(1e-4, 2.0, 14)),
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            agents_up: Gauge::default(),
        };
        registry.register("jobs", "Jobs by state", m.jobs.clone());
        registry.register("decisions", "Logged decisions and driver events by kind", m.decisions.clone());
        registry.register("invalid_decisions", "Policy decisions refused as invalid", m.invalid_decisions.clone());
        registry.register("submissions", "Jobs accepted", m.submissions.clone());
        registry.register("iteration_reports", "Iteration reports accepted", m.reports.clone());
        registry.register("decision_seconds", "Time in a policy call", m.decision_seconds.clone());
        registry.register("commit_seconds", "Time of a group commit to SQLite", m.commit_seconds.clone());
        registry.register("commit_batch_size", "Commands per group commit", m.batch_size.clone());
        registry.register("agents_up", "Node agents registered and heartbeating", m.agents_up.clone());
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
