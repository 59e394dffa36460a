//! A workload's scripted decisions (`decisions = [...]` in an experiment):
//! what a script may do and its entries resolved to job indices.

use orrery_model::JobSpec;
use orrery_sim::engine::Simulation;

/// The decision kinds a script may give: those that act on a running job.
/// Placements come from pins (`pinned`), not scripts.
const SCRIPTABLE: [&str; 8] = ["shift", "align", "pace", "pause", "resume", "throttle", "route", "preempt"];

/// A workload's scripted decisions, resolved to job indices.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// (seconds, decision): applied at that time.
    pub at_time: Vec<(f64, orrery_policy::Decision)>,
    /// (job, iteration from 0, communication step, decision): applied as the
    /// job begins that iteration ([`Simulation::script_iterations`]).
    pub at_iteration: Vec<(usize, u64, Option<usize>, orrery_policy::Decision)>,
}

impl Script {
    /// Hands both lists to a simulation before it runs.
    pub fn apply(&self, sim: &mut Simulation<'_>) {
        sim.script(self.at_time.clone());
        sim.script_iterations(self.at_iteration.clone());
    }
}

/// Kinds a decision due at an iteration may be: FORESIGHT's per-iteration
/// delay, rate and routes.
const PER_ITERATION: [&str; 3] = ["shift", "throttle", "route"];

/// A workload's scripted decisions for its jobs: `at_s` (a time) or
/// `at_iteration` (as the job begins that iteration, from 0; a route may
/// then name the iteration's communication `step` it is for) and the job's
/// id become a trigger and the job's index; the rest must be one of the
/// decisions in [`SCRIPTABLE`] with its fields. Errors name the entry and
/// the field. O(decisions + jobs).
pub(crate) fn scripted(decisions: &[serde_json::Value], jobs: &[JobSpec]) -> Result<Script, String> {
    let index: std::collections::HashMap<&str, usize> =
        jobs.iter().enumerate().map(|(k, j)| (j.id.as_str(), k)).collect();
    let mut out = Script::default();
    for (i, d) in decisions.iter().enumerate() {
        let at = |field: &str, expected: &str| format!("workload.decision[{i}]: {field}: expected {expected}");
        let mut fields = d.as_object().cloned().ok_or_else(|| at("", "a table"))?;
        let at_s = fields.remove("at_s");
        let at_iteration = fields.remove("at_iteration");
        let step = fields.remove("step");
        let id =
            fields.remove("job").and_then(|v| v.as_str().map(str::to_string)).ok_or_else(|| at("job", "a job id"))?;
        let &job = index
            .get(id.as_str())
            .ok_or_else(|| format!("{}, found {id:?}", at("job", "the id of a job of the workload")))?;
        let kind = fields.get("kind").and_then(|v| v.as_str()).unwrap_or("").to_string();
        if !SCRIPTABLE.contains(&kind.as_str()) {
            return Err(format!("{}, found {kind:?}", at("kind", &SCRIPTABLE.join(", "))));
        }
        fields.insert("job".into(), job.into());
        let decision = serde_json::from_value(serde_json::Value::Object(fields))
            .map_err(|e| format!("workload.decision[{i}] ({kind}): {e}"))?;
        match (at_s, at_iteration) {
            (Some(t), None) => {
                let t = t.as_f64().filter(|t| t.is_finite() && *t >= 0.0);
                let t = t.ok_or_else(|| at("at_s", "a time in seconds, 0 or more"))?;
                if step.is_some() {
                    return Err(at("step", "only with at_iteration"));
                }
                out.at_time.push((t, decision));
            }
            (None, Some(k)) => {
                let k = k.as_u64().ok_or_else(|| at("at_iteration", "an iteration number, 0 or more"))?;
                if !PER_ITERATION.contains(&kind.as_str()) {
                    return Err(format!(
                        "{}, found {kind:?}",
                        at("kind", "shift, throttle or route with at_iteration")
                    ));
                }
                let step = match step {
                    None => None,
                    Some(v) if kind == "route" => Some(
                        v.as_u64().map(|s| s as usize).ok_or_else(|| at("step", "a communication step, 0 or more"))?,
                    ),
                    Some(_) => return Err(at("step", "only on a route")),
                };
                out.at_iteration.push((job, k, step, decision));
            }
            (Some(_), Some(_)) => return Err(at("at_s", "either at_s or at_iteration, not both")),
            (None, None) => return Err(at("at_s", "a time in seconds (or at_iteration, an iteration)")),
        }
    }
    Ok(out)
}
