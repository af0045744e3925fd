//! Versioned schema migrations: `schema_version` holds one row per applied migration; each
//! migration runs in one transaction with its row, so a crash leaves it wholly applied or not
//! at all. Concurrent relay processes starting on one database serialise on a lock of the
//! `schema_version` table (created first, idempotently).

use relay_store::{Result, StoreError};

use crate::db::{db_err, Db};

/// The migrations, in order: version `n` is `MIGRATIONS[n - 1]`. 32-bit columns are spelt
/// `INT4`, the same type as PostgreSQL's `INT`, because CockroachDB's `INT` is 64-bit and the
/// store reads these as `i32` (docs/scale-out.md).
const MIGRATIONS: &[&str] = &[
    // 1: the whole relay state.
    r"
CREATE TABLE meta (
    id INT4 PRIMARY KEY CHECK (id = 1),
    epoch TEXT NOT NULL,
    relay_pubkey BYTEA,
    heartbeat_ms BIGINT,
    created_ms BIGINT NOT NULL,
    live_enrolments BIGINT NOT NULL DEFAULT 0,
    revoked_enrolments BIGINT NOT NULL DEFAULT 0,
    ops_next BIGINT NOT NULL DEFAULT 0,
    ops_head BYTEA,
    ops_cp_seq BIGINT,
    ops_cp_hash BYTEA
);
CREATE TABLE enrolments (
    host_pubkey BYTEA PRIMARY KEY,
    host_name TEXT NOT NULL,
    name_folded TEXT NOT NULL,
    owner_fp TEXT NOT NULL,
    account TEXT,
    authorized_by TEXT NOT NULL,
    authority_rank SMALLINT NOT NULL,
    enrolled_at_ms BIGINT NOT NULL,
    revoked_at_ms BIGINT,
    last_seen_day INT4
);
CREATE INDEX enrolments_live_name ON enrolments (name_folded) WHERE revoked_at_ms IS NULL;
CREATE TABLE enc_ads (
    host_pubkey BYTEA PRIMARY KEY,
    enc_pub TEXT NOT NULL,
    sig TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE TABLE enc_ads_v2 (
    host_pubkey BYTEA PRIMARY KEY,
    record BYTEA NOT NULL,
    sig TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE TABLE sender_lists (
    target BYTEA PRIMARY KEY,
    senders BYTEA NOT NULL,
    iat_ms BIGINT NOT NULL,
    record BYTEA NOT NULL,
    sig TEXT NOT NULL
);
CREATE TABLE sender_index (
    sender BYTEA NOT NULL,
    target BYTEA NOT NULL,
    PRIMARY KEY (sender, target)
);
CREATE TABLE queues (
    target BYTEA PRIMARY KEY,
    head_seq BIGINT NOT NULL DEFAULT 0,
    acked_through BIGINT NOT NULL DEFAULT 0,
    items BIGINT NOT NULL DEFAULT 0,
    bytes BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE items (
    target BYTEA NOT NULL,
    seq BIGINT NOT NULL,
    kind SMALLINT NOT NULL,
    item_id TEXT NOT NULL,
    sender BYTEA NOT NULL,
    wire BYTEA NOT NULL,
    wire_hash BYTEA NOT NULL,
    bytes BIGINT NOT NULL,
    accepted_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    account TEXT,
    PRIMARY KEY (target, seq)
);
CREATE INDEX items_expiry ON items (expires_at_ms);
CREATE TABLE dedup (
    target BYTEA NOT NULL,
    sender BYTEA NOT NULL,
    item_id TEXT NOT NULL,
    wire_hash BYTEA NOT NULL,
    seq BIGINT NOT NULL,
    accepted_at_ms BIGINT NOT NULL,
    PRIMARY KEY (target, sender, item_id)
);
CREATE INDEX dedup_age ON dedup (accepted_at_ms);
CREATE TABLE usage_sender (
    target BYTEA NOT NULL,
    sender BYTEA NOT NULL,
    items BIGINT NOT NULL,
    bytes BIGINT NOT NULL,
    PRIMARY KEY (target, sender)
);
CREATE TABLE usage_account (
    account TEXT PRIMARY KEY,
    items BIGINT NOT NULL,
    bytes BIGINT NOT NULL
);
CREATE TABLE ops (
    seq BIGINT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    hash BYTEA NOT NULL
);
CREATE TABLE challenges (
    host_pubkey BYTEA PRIMARY KEY,
    challenge TEXT NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX challenges_expiry ON challenges (expires_ms);
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until_ms BIGINT NOT NULL
);
",
    // 2: the dedup horizon counts from when an item left its queue (acked, expired, purged,
    // deleted), not from its acceptance: `gone_at_ms` (NULL while queued).
    r"
ALTER TABLE dedup ADD COLUMN gone_at_ms BIGINT;
UPDATE dedup d SET gone_at_ms = d.accepted_at_ms
    WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.target = d.target AND i.seq = d.seq);
DROP INDEX dedup_age;
CREATE INDEX dedup_gone ON dedup (gone_at_ms) WHERE gone_at_ms IS NOT NULL;
",
    // 3: the relay log's enrolment entries (`relay_store::rules::log::ENROLMENT_KINDS`) are counted,
    // for their budget within the log's count cap.
    r"
ALTER TABLE meta ADD COLUMN ops_enrol_held BIGINT NOT NULL DEFAULT 0;
UPDATE meta SET ops_enrol_held = (SELECT count(*) FROM ops WHERE kind IN ('enrol', 're-enrol'));
",
    // 4: a row per relay process serving the store (`ops/process.rs`), renewed while it runs.
    r"
CREATE TABLE processes (
    id TEXT PRIMARY KEY,
    address TEXT NOT NULL,
    version TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL
);
",
    // 5: single-use enrolment invites (`relay-tool invite`), by the SHA-256 of their code.
    r"
CREATE TABLE invites (
    hash BYTEA PRIMARY KEY,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    note TEXT NOT NULL
);
",
    // 6: the deny list (`relay-tool deny`, spec §8 "Revocation"): by host key or client id.
    r"
CREATE TABLE deny_list (
    kind TEXT NOT NULL,
    subject BYTEA NOT NULL,
    added_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    note TEXT NOT NULL,
    PRIMARY KEY (kind, subject)
);
",
    // 7: an enrolment records the account token's organisation and client (a deny entry for
    // the client finds its live hosts through the index).
    r"
ALTER TABLE enrolments ADD COLUMN org TEXT, ADD COLUMN client_id TEXT;
CREATE INDEX enrolments_live_client ON enrolments (client_id)
    WHERE revoked_at_ms IS NULL AND client_id IS NOT NULL;
",
];

/// The schema version this binary writes.
pub const PG_SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// The `schema_version` table.
const VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_version (
                 version INT4 PRIMARY KEY,
                 applied_ms BIGINT NOT NULL
             )";

/// Run migration `version` (`sql`) and record it, inside `t`.
async fn apply(
    t: &deadpool_postgres::Transaction<'_>,
    version: i32,
    sql: &str,
    now_ms: u64,
) -> Result<()> {
    t.batch_execute(sql).await.map_err(db_err)?;
    t.execute(
        "INSERT INTO schema_version (version, applied_ms) VALUES ($1, $2)",
        &[&version, &crate::db::i(now_ms)],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Create the whole current schema inside `t` (a restore into an empty database: the tables
/// and the data commit together, or nothing is left behind). No meta row.
///
/// # Errors
/// `Engine` on database errors.
pub(crate) async fn create_in(t: &deadpool_postgres::Transaction<'_>, now_ms: u64) -> Result<()> {
    t.batch_execute(VERSION_TABLE).await.map_err(db_err)?;
    for (n, sql) in MIGRATIONS.iter().enumerate() {
        let version = i32::try_from(n + 1).unwrap_or(i32::MAX);
        apply(t, version, sql, now_ms).await?;
    }
    Ok(())
}

/// Whether the database holds a relay store already (its `meta` table), for openers that
/// must not create one (`OpenOptions::create == false`: relay-tool).
///
/// # Errors
/// `Engine` on database errors.
pub(crate) async fn holds_store(db: &Db) -> Result<bool> {
    let c = db.conn().await?;
    c.query_one(
        "SELECT EXISTS (SELECT 1 FROM information_schema.tables          WHERE table_schema = current_schema() AND table_name = 'meta')",
        &[],
    )
    .await
    .map(|r| r.get(0))
    .map_err(db_err)
}

/// Bring the database up to [`PG_SCHEMA_VERSION`] and create meta on first open.
///
/// # Errors
/// `SchemaTooNew` when a newer binary migrated it; `Engine` on database errors.
pub(crate) async fn prepare(db: &Db, now_ms: u64, epoch: String) -> Result<()> {
    let mut c = db.conn().await?;
    let created = c.batch_execute(VERSION_TABLE).await;
    // Two processes starting together on an empty database race here (IF NOT EXISTS is not
    // atomic in PostgreSQL): the loser sees a duplicate (of the table, or of its row type in
    // pg_type: 42710), and the table exists either way once the winner committed.
    if let Err(e) = created {
        let raced = e.code().is_some_and(|c| {
            *c == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
                || *c == tokio_postgres::error::SqlState::DUPLICATE_TABLE
                || *c == tokio_postgres::error::SqlState::DUPLICATE_OBJECT
        });
        if !raced {
            return Err(db_err(e));
        }
    }
    for (n, sql) in MIGRATIONS.iter().enumerate() {
        let version = i32::try_from(n + 1).unwrap_or(i32::MAX);
        let t = c.transaction().await.map_err(db_err)?;
        // One process migrates at a time; the others wait here and then see the row.
        t.batch_execute("LOCK TABLE schema_version IN EXCLUSIVE MODE")
            .await
            .map_err(db_err)?;
        let current: Option<i32> = t
            .query_one("SELECT max(version) FROM schema_version", &[])
            .await
            .map_err(db_err)?
            .get(0);
        let current = current.unwrap_or(0);
        if current > PG_SCHEMA_VERSION as i32 {
            return Err(StoreError::SchemaTooNew {
                found: u32::try_from(current).unwrap_or(0),
                supported: PG_SCHEMA_VERSION,
            });
        }
        if current >= version {
            t.rollback().await.map_err(db_err)?;
            continue;
        }
        apply(&t, version, sql, now_ms).await?;
        t.commit().await.map_err(db_err)?;
    }
    c.execute(
        "INSERT INTO meta (id, epoch, created_ms) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING",
        &[&epoch, &crate::db::i(now_ms)],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}
