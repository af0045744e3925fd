//! enrol (in progress).
