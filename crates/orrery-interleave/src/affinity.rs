//! The Affinity graph (CASSINI §4.1) and its traversal (Alg. 1), with
//! Metronome's choice of the highest-priority job as the reference (§III-C).
//!
//! Jobs and links are the two sides of a bipartite graph; an edge (j, l)
//! carries the time-shift of job `j` on link `l` from that link's rotation
//! search. A BFS from the reference job gives every job one shift:
//! `t_k = (t_j − w(j, l) + w(l, k)) mod iter_time_k` (Alg. 1 line 23). On a
//! loop-free graph this keeps every link's relative shifts (Theorem 1).

use orrery_model::Priority;
use petgraph::graph::{NodeIndex, UnGraph};
use petgraph::visit::EdgeRef;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

/// A job of the Affinity graph. Its index in the slice is its arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AffinityJob {
    /// Iteration time, ms.
    pub iter_ms: f64,
    /// Priority.
    pub priority: Priority,
}

/// The per-link solution: time-shift of each job on one link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkShifts {
    /// Link id (any number unique among links).
    pub link: usize,
    /// (job index, time-shift in ms) for each job on the link.
    pub shifts: Vec<(usize, f64)>,
}

/// Why no unique shifts exist.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AffinityError {
    /// The graph has a loop (CASSINI §4.1: such placements are rejected).
    #[error("the Affinity graph has a loop through links {links:?}: placements like this must be rejected")]
    Loop {
        /// Links in the cyclic components.
        links: Vec<usize>,
    },
    /// A link names a job that does not exist.
    #[error("link {link} names job {job}, but there are only {jobs} jobs")]
    NoSuchJob {
        /// Link id.
        link: usize,
        /// Job index.
        job: usize,
        /// Number of jobs.
        jobs: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Node {
    Job(usize),
    Link(usize),
}

/// The bipartite graph of jobs and the links that carry more than one job.
#[derive(Debug, Clone)]
pub struct AffinityGraph {
    graph: UnGraph<Node, f64>,
    job_nodes: HashMap<usize, NodeIndex>,
}

impl AffinityGraph {
    /// Builds the graph; links with fewer than two jobs are left out.
    pub fn new(jobs: usize, links: &[LinkShifts]) -> Result<Self, AffinityError> {
        let mut graph = UnGraph::new_undirected();
        let mut job_nodes = HashMap::new();
        for l in links.iter().filter(|l| l.shifts.len() > 1) {
            let ln = graph.add_node(Node::Link(l.link));
            for &(j, w) in &l.shifts {
                if j >= jobs {
                    return Err(AffinityError::NoSuchJob { link: l.link, job: j, jobs });
                }
                let jn = *job_nodes.entry(j).or_insert_with(|| graph.add_node(Node::Job(j)));
                graph.add_edge(jn, ln, w);
            }
        }
        Ok(AffinityGraph { graph, job_nodes })
    }

    /// Links of every component that contains a loop (empty when loop-free).
    /// A component is a tree iff it has one edge fewer than vertices. O(V + E).
    pub fn loops(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for comp in self.components() {
            let edges: usize = comp.iter().map(|&n| self.graph.edges(n).count()).sum::<usize>() / 2;
            if edges + 1 != comp.len() {
                out.extend(comp.iter().filter_map(|&n| match self.graph[n] {
                    Node::Link(l) => Some(l),
                    Node::Job(_) => None,
                }));
            }
        }
        out.sort_unstable();
        out
    }

    fn components(&self) -> Vec<Vec<NodeIndex>> {
        let mut seen = vec![false; self.graph.node_count()];
        let mut out = Vec::new();
        for start in self.graph.node_indices() {
            if seen[start.index()] {
                continue;
            }
            let mut comp = Vec::new();
            let mut q = VecDeque::from([start]);
            seen[start.index()] = true;
            while let Some(n) = q.pop_front() {
                comp.push(n);
                for m in self.graph.neighbors(n) {
                    if !seen[m.index()] {
                        seen[m.index()] = true;
                        q.push_back(m);
                    }
                }
            }
            out.push(comp);
        }
        out
    }
}

/// One time-shift per job (ms); jobs that share no link with another get 0.
/// Fails on a loop. O(V + E).
pub fn traverse(jobs: &[AffinityJob], links: &[LinkShifts]) -> Result<Vec<f64>, AffinityError> {
    let g = AffinityGraph::new(jobs.len(), links)?;
    let loops = g.loops();
    if !loops.is_empty() {
        return Err(AffinityError::Loop { links: loops });
    }
    let mut shift = vec![0.0; jobs.len()];
    let mut visited = vec![false; jobs.len()];
    for comp in g.components() {
        // Reference: highest priority, then earliest arrival (Metronome §III-C).
        let Some(reference) = comp
            .iter()
            .filter_map(|&n| match g.graph[n] {
                Node::Job(j) => Some(j),
                Node::Link(_) => None,
            })
            .max_by_key(|&j| (jobs[j].priority, std::cmp::Reverse(j)))
        else {
            continue;
        };
        visited[reference] = true;
        let mut q = VecDeque::from([reference]);
        while let Some(j) = q.pop_front() {
            let jn = g.job_nodes[&j];
            for e1 in g.graph.edges(jn) {
                let (l, w_jl) = (other_end(&e1, jn), *e1.weight());
                for e2 in g.graph.edges(l) {
                    let Node::Job(k) = g.graph[other_end(&e2, l)] else { continue };
                    if visited[k] {
                        continue;
                    }
                    visited[k] = true;
                    // Alg. 1 line 23: job → link subtracts, link → job adds.
                    shift[k] = (shift[j] - w_jl + *e2.weight()).rem_euclid(jobs[k].iter_ms);
                    q.push_back(k);
                }
            }
        }
    }
    Ok(shift)
}

/// The endpoint of an undirected edge that is not `n`.
fn other_end<E: EdgeRef<NodeId = NodeIndex>>(e: &E, n: NodeIndex) -> NodeIndex {
    if e.source() == n { e.target() } else { e.source() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(periods: &[f64]) -> Vec<AffinityJob> {
        periods.iter().map(|&iter_ms| AffinityJob { iter_ms, priority: Priority::Low }).collect()
    }

    #[test]
    fn cassini_appendix_chain_j1_l1_j2_l2_j3() {
        // CASSINI Eq. 9: t_j3 = (−t_j1^l1 + t_j2^l1 − t_j2^l2 + t_j3^l2) mod iter_j3.
        let j = jobs(&[100.0, 100.0, 80.0]);
        let links = [
            LinkShifts { link: 1, shifts: vec![(0, 10.0), (1, 40.0)] },
            LinkShifts { link: 2, shifts: vec![(1, 5.0), (2, 70.0)] },
        ];
        let t = traverse(&j, &links).expect("loop-free");
        assert_eq!(t[0], 0.0);
        assert_eq!(t[1], 30.0);
        assert_eq!(t[2], (-10.0f64 + 40.0 - 5.0 + 70.0).rem_euclid(80.0));
    }

    #[test]
    fn the_high_priority_job_is_the_reference() {
        let mut j = jobs(&[100.0, 100.0]);
        j[1].priority = Priority::High;
        let t = traverse(&j, &[LinkShifts { link: 0, shifts: vec![(0, 30.0), (1, 50.0)] }]).expect("ok");
        assert_eq!(t, vec![80.0, 0.0]);
    }

    #[test]
    fn loops_are_rejected() {
        // Metronome §III-B's example: a with b on e, b with c on f, c with a on g.
        let j = jobs(&[10.0, 10.0, 10.0]);
        let links = [
            LinkShifts { link: 7, shifts: vec![(0, 0.0), (1, 1.0)] },
            LinkShifts { link: 8, shifts: vec![(1, 0.0), (2, 1.0)] },
            LinkShifts { link: 9, shifts: vec![(2, 0.0), (0, 1.0)] },
        ];
        assert_eq!(traverse(&j, &links), Err(AffinityError::Loop { links: vec![7, 8, 9] }));
        // Links with a single job are not vertices and cannot close a loop.
        let t = traverse(&j, &[LinkShifts { link: 1, shifts: vec![(0, 3.0)] }]).expect("ok");
        assert_eq!(t, vec![0.0; 3]);
    }

    #[test]
    fn unknown_jobs_are_named() {
        let e = traverse(&jobs(&[1.0]), &[LinkShifts { link: 4, shifts: vec![(0, 0.0), (3, 0.0)] }]);
        assert_eq!(e, Err(AffinityError::NoSuchJob { link: 4, job: 3, jobs: 1 }));
    }
}
