//! Whether this process runs as root, which decides how the harness starts things: PostgreSQL
//! refuses to run as root (the cluster then runs as `nobody`), and a network namespace can be
//! made only by root (a partition test skips without it).

/// The effective user is root.
pub(crate) fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
