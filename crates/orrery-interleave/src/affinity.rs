//! Affinity graph (CASSINI §4.1).
