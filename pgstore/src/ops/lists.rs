//! lists (in progress).
