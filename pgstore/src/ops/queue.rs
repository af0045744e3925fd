//! queue (in progress).
