//! lease (in progress).
