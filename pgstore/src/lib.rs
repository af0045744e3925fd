//! `relay-pgstore`: the relay's state on PostgreSQL (and engines speaking its wire protocol).
//!
//! CONTRACT: the same operations and rules as the fjall keyspace (`relay-keyspace`), checked by
//! the backend conformance suite. Every logical operation is one transaction; no answer before
//! `COMMIT` returned with `synchronous_commit` on (checked at open: the store refuses to start
//! otherwise). Conflicts between relay processes on one database are settled by explicit row
//! locks (`SELECT ... FOR UPDATE` on a target's `queues` row, the `meta` row for enrolments and
//! the relay log), with bounded retry on serialization failure and deadlock. Quota counters are
//! rows moved in the same transaction as the items they count. Bytes are stored exactly
//! (`bytea`). seq = max(head + 1, now_ms), never reused (the head lives in `queues`).
//!
//! Files, from the ground up: `tls` (sslmode / sslrootcert, the rustls connector), `stats`
//! (the pool's counters, which the server shows as metrics), `fence` (only the current primary
//! of the newest timeline is used), `db` (pool, transactions, retry, deadlines), `schema`
//! (versioned migrations), `pipeline` (a write in two round trips: BEGIN with its locking
//! reads, its writes with COMMIT), `ctx` (what every operation runs with: the one write and
//! read helpers on the store's runtime), `watch` (LISTEN/NOTIFY between the relay processes on
//! one database: cross-process wake), `ops/` (one file per group, each a function of `&Ctx`:
//! `kind` (an item's stored kind), `meta`, `oplog`, `enrol`, `invite`, `lists`, `admission`
//! (the reads admitting a push, in one statement), `insert` and `insert_plan` (a batch of
//! items in one transaction), `queue` (pull, cursors, usage, delete), `pull`, `ack`, `sweep`,
//! `rebind` (rotation, revoke/purge), `admin` (idle expiry, hosts, stats), `process` (the
//! process rows, the queue heads of the one-second poll), `dump`, `backup` (the logical backup
//! of one snapshot), `restore` (a backup into an empty database, in one transaction), `lease`
//! (leases, the shared challenge book)), `combine` (concurrent pushes share one insert
//! transaction: group commit), `store` (the handle: open, runtime, close), `invariants` (the
//! bookkeeping recount tests run), `backend` (`impl RelayStore`; [`UNIMPLEMENTED`] names what
//! is missing: nothing now). The throwaway PostgreSQL of the tests is `relay-testkit`'s.

mod backend;
mod cached;
mod combine;
mod ctx;
mod db;
mod fence;
mod guess;
mod invariants;
mod op_error;
mod ops;
mod pipeline;
mod schema;
mod stats;
mod store;
mod tls;
mod watch;

pub use backend::UNIMPLEMENTED;
pub use combine::InsertPaths;
pub use schema::PG_SCHEMA_VERSION;
pub use stats::{pool_figures, PoolFigures};
pub use store::PgStore;
