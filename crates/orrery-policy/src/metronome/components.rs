//! The Affinity graph's components (§III-C, "Global offset"): which jobs
//! one global offset must rotate together, and the contended nodes whose
//! schemes tie them. Kept across a round's placements: a placement only
//! adds edges, so it joins components in O(their size) where deriving
//! them again from every scheme was O(schemes) a placement (with the
//! controller's BFS indexing its component by a scan of every scheme,
//! 9% of a `metronome` run at 16,384 hosts).

use super::Scheme;
use crate::JobId;
use crate::memo::FastMap;
use orrery_model::HostId;

/// Each job on a scheme: its label (the smallest job of its component);
/// each label: its jobs and the nodes of its schemes.
#[derive(Debug, Clone, Default)]
pub(super) struct Components {
    label: FastMap<JobId, JobId>,
    /// Per label: (its jobs, the nodes whose schemes hold them).
    members: FastMap<JobId, (Vec<JobId>, Vec<HostId>)>,
}

impl Components {
    /// The components of the graph whose edges are `schemes` (node → its
    /// scheme). O(scheme entries).
    pub(super) fn of<'a>(schemes: impl Iterator<Item = (&'a HostId, &'a Scheme)> + Clone) -> Components {
        // Union-find, each root the smallest job of its set.
        fn find(parent: &mut FastMap<JobId, JobId>, j: JobId) -> JobId {
            let p = *parent.entry(j).or_insert(j);
            if p == j {
                return j;
            }
            let root = find(parent, p);
            parent.insert(j, root);
            root
        }
        let mut parent: FastMap<JobId, JobId> = FastMap::default();
        for (_, scheme) in schemes.clone() {
            let first = scheme.jobs[0].0;
            for &(j, ..) in &scheme.jobs[1..] {
                let (a, b) = (find(&mut parent, first), find(&mut parent, j));
                parent.insert(a.max(b), a.min(b));
            }
            find(&mut parent, first);
        }
        let jobs: Vec<JobId> = parent.keys().copied().collect();
        let label: FastMap<JobId, JobId> = jobs.into_iter().map(|j| (j, find(&mut parent, j))).collect();
        let mut members: FastMap<JobId, (Vec<JobId>, Vec<HostId>)> = FastMap::default();
        for (&j, &l) in &label {
            members.entry(l).or_default().0.push(j);
        }
        for (&n, scheme) in schemes {
            members.entry(label[&scheme.jobs[0].0]).or_default().1.push(n);
        }
        Components { label, members }
    }

    /// The label of `job`'s component, if it is on a scheme.
    pub(super) fn label(&self, job: JobId) -> Option<JobId> {
        self.label.get(&job).copied()
    }

    /// The jobs of the component labelled `label` and the nodes of its
    /// schemes, each once, in no order.
    pub(super) fn members(&self, label: JobId) -> (&[JobId], &[HostId]) {
        self.members.get(&label).map_or((&[], &[]), |(jobs, nodes)| (jobs.as_slice(), nodes.as_slice()))
    }

    /// Node `n`'s scheme (new, or replacing one whose jobs it keeps) joins
    /// its jobs' components into one, labelled by the smallest job.
    /// O(size of the components joined).
    pub(super) fn join(&mut self, n: HostId, scheme: &Scheme) {
        let mut labels: Vec<JobId> = scheme.jobs.iter().map(|j| self.label(j.0).unwrap_or(j.0)).collect();
        labels.sort_unstable();
        labels.dedup();
        let Some(&into) = labels.first() else { return };
        let mut kept = self.members.remove(&into).unwrap_or_default();
        for l in &labels[1..] {
            if let Some((jobs, nodes)) = self.members.remove(l) {
                for &j in &jobs {
                    self.label.insert(j, into);
                }
                kept.0.extend(jobs);
                kept.1.extend(nodes);
            }
        }
        for j in scheme.jobs.iter().map(|j| j.0) {
            if self.label.insert(j, into).is_none() {
                kept.0.push(j);
            }
        }
        if !kept.1.contains(&n) {
            kept.1.push(n);
        }
        self.members.insert(into, kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::Priority;
    use std::collections::BTreeMap;

    fn scheme(jobs: &[JobId]) -> Scheme {
        Scheme { jobs: jobs.iter().map(|&j| (j, 0.0, 100.0, Priority::Low)).collect() }
    }

    /// Union-find over every scheme, the definition: the smallest job of
    /// each connected set of jobs.
    fn by_union_find(schemes: &BTreeMap<HostId, Scheme>) -> FastMap<JobId, JobId> {
        fn find(parent: &mut FastMap<JobId, JobId>, j: JobId) -> JobId {
            let p = *parent.entry(j).or_insert(j);
            if p == j { j } else { find(parent, p) }
        }
        let mut parent = FastMap::default();
        for s in schemes.values() {
            for &(j, ..) in &s.jobs {
                let (a, b) = (find(&mut parent, s.jobs[0].0), find(&mut parent, j));
                parent.insert(a.max(b), a.min(b));
            }
        }
        let jobs: Vec<JobId> = parent.keys().copied().collect();
        jobs.into_iter().map(|j| (j, find(&mut parent, j))).collect()
    }

    #[test]
    fn joining_scheme_by_scheme_gives_the_components_of_all_of_them() {
        // Node 1 ties 5 and 9, node 2 ties 3 and 7, node 4 grows node 1's
        // scheme by 7 (joining both), node 6 stands apart, and node 1's
        // scheme is replaced by a larger one.
        let steps: [(HostId, &[JobId]); 5] =
            [(1, &[9, 5]), (2, &[7, 3]), (4, &[5, 7]), (6, &[11, 12]), (1, &[9, 5, 13])];
        let mut schemes = BTreeMap::new();
        let mut kept = Components::default();
        for (n, jobs) in steps {
            schemes.insert(n, scheme(jobs));
            kept.join(n, &schemes[&n]);
            let whole = Components::of(schemes.iter());
            let truth = by_union_find(&schemes);
            for (&j, &l) in &truth {
                assert_eq!(kept.label(j), Some(l), "job {j} after node {n}");
                assert_eq!(whole.label(j), Some(l), "job {j} after node {n}");
            }
            assert_eq!(kept.label.len(), truth.len());
            // Each label's members are the jobs labelled so, and its nodes
            // those whose scheme's jobs are labelled so, each once.
            for (&l, (jobs, nodes)) in &kept.members {
                let mut jobs = jobs.clone();
                jobs.sort_unstable();
                let mut want: Vec<JobId> = truth.iter().filter(|(_, x)| **x == l).map(|(&j, _)| j).collect();
                want.sort_unstable();
                assert_eq!(jobs, want, "members of {l}");
                let mut nodes = nodes.clone();
                nodes.sort_unstable();
                let want: Vec<HostId> =
                    schemes.iter().filter(|(_, s)| truth[&s.jobs[0].0] == l).map(|(&n, _)| n).collect();
                assert_eq!(nodes, want, "nodes of {l}");
            }
        }
        assert_eq!(kept.label(7), Some(3));
        assert_eq!(kept.label(13), Some(3));
        assert_eq!(kept.members(3).0.len(), 5);
        assert_eq!(kept.label(12), Some(11));
        assert_eq!(kept.label(8), None);
    }
}
