//! The bundle: each node's view of the best bids for a job's components
//! (Plebiscito §IV-A, Fig. 1b: per component λ the highest bid b, its winner a
//! and its timestamp t).
//!
//! The components of one role of a data-parallel job (its workers, or its
//! parameter servers) are interchangeable, so a role's bundle keeps the best
//! `k` bids in rank order and component λ goes to the λ-th best. Merging two
//! bundles keeps the best `k` of their union. That merge is commutative,
//! associative and idempotent (a join), so duplicated, reordered or re-sent
//! messages cannot make nodes disagree, and every connected node ends with the
//! same bundle: the best `k` bids made anywhere. This is Algorithm 1's
//! agreement phase: a held component is released exactly when `k` better
//! bids are known.

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// One node's bid for one of its slots: its `slot`-th component of a role.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bid {
    /// Warped utility (Eqs. 10-11).
    pub value: f64,
    /// Bidding node.
    pub node: u32,
    /// The bidder's clock when it bid, µs.
    pub stamp: u64,
    /// Which of the node's components this is (0 = its first).
    pub slot: u16,
}

impl Bid {
    /// The agreement order, best first: the higher value; on equal values the
    /// earlier timestamp, then the lower node id, then the lower slot.
    ///
    /// Algorithm 1 (line 16) lets the *later* timestamp win a tie. With that
    /// rule two nodes of equal utility can take a component from each other
    /// forever by re-bidding, so we keep the first bid, which makes the order
    /// total and every change a strict improvement.
    pub fn rank(&self, other: &Bid) -> Ordering {
        other
            .value
            .total_cmp(&self.value)
            .then(self.stamp.cmp(&other.stamp))
            .then(self.node.cmp(&other.node))
            .then(self.slot.cmp(&other.slot))
    }
}

/// The best `capacity` bids for one role, best first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Bundle {
    capacity: usize,
    bids: Vec<Bid>,
}

impl Bundle {
    /// An empty bundle for a role of `capacity` components.
    pub fn new(capacity: usize) -> Self {
        Bundle { capacity, bids: Vec::with_capacity(capacity) }
    }

    /// Number of components of the role.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The winning bids so far, best first.
    pub fn bids(&self) -> &[Bid] {
        &self.bids
    }

    /// Whether every component has a winner.
    pub fn is_full(&self) -> bool {
        self.bids.len() == self.capacity
    }

    /// How many of the role's components `node` currently wins.
    pub fn held_by(&self, node: u32) -> usize {
        self.bids.iter().filter(|b| b.node == node).count()
    }

    /// Merges bids in; returns whether the bundle changed. A bid for a
    /// `(node, slot)` already present keeps the better-ranked copy.
    /// O((k + m) log(k + m)) for `k` held and `m` incoming bids.
    pub fn merge(&mut self, incoming: &[Bid]) -> bool {
        let before = self.bids.clone();
        for b in incoming {
            if !b.value.is_finite() {
                continue;
            }
            match self.bids.iter_mut().find(|x| x.node == b.node && x.slot == b.slot) {
                Some(x) if b.rank(x) == Ordering::Less => *x = *b,
                Some(_) => {}
                None => self.bids.push(*b),
            }
        }
        self.bids.sort_by(Bid::rank);
        self.bids.truncate(self.capacity);
        self.bids != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bid(value: f64, node: u32, stamp: u64, slot: u16) -> Bid {
        Bid { value, node, stamp, slot }
    }

    #[test]
    fn a_higher_bid_pushes_out_the_worst() {
        let mut b = Bundle::new(2);
        assert!(b.merge(&[bid(0.5, 1, 10, 0), bid(0.4, 1, 10, 1)]));
        assert!(b.merge(&[bid(0.6, 2, 20, 0)]));
        assert_eq!(b.bids().iter().map(|x| x.node).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!((b.held_by(1), b.held_by(2)), (1, 1));
        assert!(b.is_full());
        // A worse bid changes nothing.
        assert!(!b.merge(&[bid(0.1, 3, 5, 0)]));
    }

    #[test]
    fn ties_go_to_the_earlier_stamp_then_the_lower_node() {
        let mut b = Bundle::new(1);
        b.merge(&[bid(0.5, 7, 20, 0)]);
        assert!(b.merge(&[bid(0.5, 9, 10, 0)]), "earlier stamp wins the tie");
        assert!(!b.merge(&[bid(0.5, 3, 30, 0)]), "a later stamp does not");
        assert!(b.merge(&[bid(0.5, 3, 10, 0)]), "same stamp: lower node");
        assert_eq!(b.bids()[0].node, 3);
    }

    #[test]
    fn merge_is_order_independent_and_idempotent() {
        let sets = [
            vec![bid(0.9, 1, 1, 0), bid(0.8, 1, 1, 1)],
            vec![bid(0.85, 2, 2, 0), bid(0.1, 2, 2, 1)],
            vec![bid(0.95, 3, 3, 0)],
        ];
        let mut a = Bundle::new(3);
        let mut b = Bundle::new(3);
        for s in &sets {
            a.merge(s);
        }
        for s in sets.iter().rev() {
            b.merge(s);
            b.merge(s);
        }
        assert_eq!(a, b);
        assert_eq!(a.bids().iter().map(|x| x.value).collect::<Vec<_>>(), vec![0.95, 0.9, 0.85]);
        let copy = a.bids().to_vec();
        assert!(!a.merge(&copy));
    }
}
