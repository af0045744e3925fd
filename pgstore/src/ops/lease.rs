//! What several relay processes on one database share besides the state: leadership leases
//! (a row per lease: who holds it until when; no advisory locks, no LISTEN/NOTIFY) and the
//! enrolment challenge book (one open challenge per key, with its expiry, under a cap: the
//! rules are relay-store's `rules::challenge_book`, applied to the `challenges` rows).

use std::sync::Arc;

use relay_store::rules::challenge_book;
use relay_store::{ChallengeBook, ChallengeIssue, Key32, Pending};

use crate::cached::Cached as _;
use crate::ctx::Ctx;
use crate::db::i;
use crate::ops::Answer;

/// Take or renew lease `name` for `holder` until now + `ttl_ms`: true when `holder` holds
/// it now (it held it, or the previous holder's time ran out). Times are the processes'
/// clocks: keep them in step (NTP) and the ttl well above their skew.
pub(crate) fn try_lease(ctx: &Ctx, name: &str, holder: &str, ttl_ms: u64) -> Answer<bool> {
    let lease = (name.to_string(), holder.to_string());
    ctx.write(lease, move |t, (name, holder), env| {
        let (now, until) = (i(env.now), i(env.now.saturating_add(ttl_ms)));
        Box::pin(async move {
            let r = t
                .query_opt(
                    "INSERT INTO leases (name, holder, until_ms) VALUES ($1, $2, $3) \
                             ON CONFLICT (name) DO UPDATE SET holder = $2, until_ms = $3 \
                             WHERE leases.holder = $2 OR leases.until_ms < $4 \
                             RETURNING holder",
                    &[name, holder, &until, &now],
                )
                .await?;
            Ok(r.is_some())
        })
    })
}

/// The challenge book in the database, shared by every process on it.
pub(crate) struct PgChallenges(Ctx);

impl PgChallenges {
    pub(crate) fn shared(ctx: &Ctx) -> Arc<dyn ChallengeBook> {
        Arc::new(PgChallenges(ctx.clone()))
    }
}

impl ChallengeBook for PgChallenges {
    fn issue(
        &self,
        key: Key32,
        challenge: String,
        now_ms: u64,
        lifetime_ms: u64,
        max: u64,
    ) -> Pending<ChallengeIssue> {
        self.0.write(challenge, move |t, challenge, _| {
            Box::pin(async move {
                // One issuer at a time, so the cap holds across processes: the
                // `meta` row's lock (a row lock, not LOCK TABLE, which CockroachDB and
                // YugabyteDB lack; docs/scale-out.md). Consuming deletes concurrently,
                // which can only lower the count.
                //
                // A challenge need not survive a crash (fjall's book lives in memory:
                // the host asks again), so this commit does not wait for the WAL
                // flush. It would otherwise hold the `meta` lock through one fsync per
                // challenge, making every issuer queue behind the disk.
                //
                // The setting, the lock, the expired rows' deletion (`NOT
                // challenge_book::is_open` in SQL: a count over the table, not a read of
                // every row) and the count go in one flight: tokio-postgres pipelines the
                // statements of one connection polled together, and the server runs them
                // in the order they are sent. `biased` polls them in this order every time,
                // so each is sent after the one before it even when its statement has to be
                // prepared first (the first use on a connection): the count is taken under
                // the lock.
                let (_, _, _, others) = tokio::try_join!(
                    biased;
                    t.batch_execute("SET LOCAL synchronous_commit = off"),
                    t.query_one_cached("SELECT id FROM meta WHERE id = 1 FOR UPDATE", &[]),
                    async {
                        let sql = "DELETE FROM challenges WHERE expires_ms <= $1";
                        t.execute_cached(sql, &[&i(now_ms)]).await
                    },
                    async {
                        let sql = "SELECT count(*) FROM challenges WHERE host_pubkey <> $1";
                        t.query_one_cached(sql, &[&key.as_slice()]).await
                    },
                )?;
                let others: i64 = others.get(0);
                if !challenge_book::admits(u64::try_from(others).unwrap_or(u64::MAX), max) {
                    return Ok(ChallengeIssue::Full);
                }
                t.execute_cached(
                    "INSERT INTO challenges (host_pubkey, challenge, expires_ms) \
                             VALUES ($1, $2, $3) ON CONFLICT (host_pubkey) DO UPDATE \
                             SET challenge = $2, expires_ms = $3",
                    &[
                        &key.as_slice(),
                        challenge,
                        &i(challenge_book::expires_at(now_ms, lifetime_ms)),
                    ],
                )
                .await?;
                Ok(ChallengeIssue::Issued)
            })
        })
    }

    fn pending(&self, key: &Key32, now_ms: u64) -> Pending<Option<String>> {
        let key = *key;
        self.0.read_async(move |c| {
            Box::pin(async move {
                let r = c
                    .query_opt_cached(
                        "SELECT challenge, expires_ms FROM challenges WHERE host_pubkey = $1",
                        &[&key.as_slice()],
                    )
                    .await?;
                Ok(
                    r.filter(|r| challenge_book::is_open(crate::db::u(r.get(1)), now_ms))
                        .map(|r| r.get(0)),
                )
            })
        })
    }

    fn consume(&self, key: &Key32, challenge: &str) -> Pending<()> {
        let (key, challenge) = (*key, challenge.to_string());
        self.0.write(challenge, move |t, challenge, _| {
            Box::pin(async move {
                let r = t
                    .query_opt_cached(
                        "SELECT challenge FROM challenges WHERE host_pubkey = $1 FOR UPDATE",
                        &[&key.as_slice()],
                    )
                    .await?;
                let Some(r) = r else { return Ok(()) };
                let stored: String = r.get(0);
                if challenge_book::same(&stored, challenge) {
                    t.execute_cached(
                        "DELETE FROM challenges WHERE host_pubkey = $1",
                        &[&key.as_slice()],
                    )
                    .await?;
                }
                Ok(())
            })
        })
    }
}
