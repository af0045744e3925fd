//! What relay-bench's load generator and its bench targets share: the small pieces of their
//! hand-written SVG charts (no plotting dependency), written once.

pub mod chart;
