//! The running jobs on each link, kept between rounds (the combined
//! policy's per-link traffic, [`super::duty`], and its loaded fabric links,
//! [`super::BidsWhenLoaded`]). Each round is brought in step by the jobs
//! that started, left, paused or moved since the last: O(R) to find them
//! (a merge of two lists in ascending id, reading the view's own array) and
//! O(links × jobs on each) per job that changed, where rebuilding from
//! every running job's links was O(Σ links) a round and a cache miss or a
//! hash probe per link (7-11% of an `orrery` run at 16,384 hosts).

use crate::memo::ByJob;
use crate::{ClusterView, JobId, RunningJob};
use orrery_model::LinkId;

/// Per link, the jobs counted on it, each with a value (its traffic there,
/// or nothing), in ascending id; and the jobs counted, with the serial of
/// the placement they were counted on.
#[derive(Debug, Clone)]
pub(crate) struct OnLinks<V> {
    /// The jobs counted, ascending id, and their placement serials.
    counted: Vec<(JobId, u64)>,
    /// Each counted job's links and values.
    links: ByJob<Vec<(LinkId, V)>>,
    /// Per link id, the counted jobs on it and their values, ascending id.
    jobs: Vec<Vec<(JobId, V)>>,
}

impl<V> Default for OnLinks<V> {
    fn default() -> Self {
        OnLinks { counted: Vec::new(), links: ByJob::default(), jobs: Vec::new() }
    }
}

impl<V: Copy> OnLinks<V> {
    /// The jobs on link `l`, ascending id, with their values. O(1).
    pub(crate) fn on(&self, l: LinkId) -> &[(JobId, V)] {
        self.jobs.get(l).map_or(&[], Vec::as_slice)
    }

    /// Brings it in step with the running jobs of `view` that `counts`
    /// accepts, `make` giving a new or moved job's links and values; pushes
    /// onto `changed` each link whose jobs changed (a link may come more
    /// than once). False, leaving it empty, when it cannot: the view does
    /// not list the running jobs in ascending id, or a job has no placement
    /// serial (the live service gives none); the caller then builds its
    /// sums from every job. O(R) plus O(links × jobs on each) per job that
    /// came, left or moved.
    pub(crate) fn sync<'a>(
        &mut self,
        view: &ClusterView<'a>,
        counts: impl Fn(&RunningJob<'a>) -> bool,
        mut make: impl FnMut(&RunningJob<'a>) -> Vec<(LinkId, V)>,
        changed: &mut Vec<LinkId>,
    ) -> bool {
        let ascending = view.running.windows(2).all(|w| w[0].id < w[1].id);
        if !ascending || view.running.iter().any(|r| r.placement == 0) {
            self.clear();
            return false;
        }
        let now: Vec<&RunningJob<'a>> = view.running.iter().filter(|r| counts(r)).collect();
        let (mut i, mut k) = (0, 0);
        let mut gone = Vec::new();
        let mut came = Vec::new();
        while i < self.counted.len() || k < now.len() {
            match (self.counted.get(i), now.get(k)) {
                (Some(&(id, serial)), Some(r)) if id == r.id => {
                    if serial != r.placement {
                        gone.push(id);
                        came.push(*r);
                    }
                    i += 1;
                    k += 1;
                }
                (Some(&(id, _)), Some(r)) if id < r.id => {
                    gone.push(id);
                    i += 1;
                }
                (Some(&(id, _)), None) => {
                    gone.push(id);
                    i += 1;
                }
                (_, Some(r)) => {
                    came.push(*r);
                    k += 1;
                }
                (None, None) => unreachable!("the loop stops when both lists are walked"),
            }
        }
        for job in gone {
            for (l, _) in self.links.insert(job, Vec::new()).unwrap_or_default() {
                if let Ok(at) = self.jobs[l].binary_search_by_key(&job, |e| e.0) {
                    self.jobs[l].remove(at);
                }
                changed.push(l);
            }
        }
        for r in came {
            let links = make(r);
            for &(l, v) in &links {
                if self.jobs.len() <= l {
                    self.jobs.resize_with(l + 1, Vec::new);
                }
                let at = self.jobs[l].partition_point(|e| e.0 < r.id);
                self.jobs[l].insert(at, (r.id, v));
                changed.push(l);
            }
            self.links.insert(r.id, links);
        }
        self.counted.clear();
        self.counted.extend(now.iter().map(|r| (r.id, r.placement)));
        true
    }

    /// Counts no job. O(links held).
    pub(crate) fn clear(&mut self) {
        for &(id, _) in &self.counted {
            for &(l, _) in self.links.get(id).map_or(&[][..], Vec::as_slice) {
                self.jobs[l].clear();
            }
        }
        self.counted.clear();
        self.links = ByJob::default();
    }
}
