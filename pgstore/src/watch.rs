//! Cross-process wake: PostgreSQL's `LISTEN`/`NOTIFY` on channel [`CHANNEL`] tells every relay
//! process on the database what another one committed (`relay_store::StoreEvent`), so a pull
//! waiting on one process answers a push through another within milliseconds.
//!
//! Sending: the insert's WRITE statement ends in `pg_notify` over [`queued_payloads`] (no
//! statement or round trip of its own); an epoch rotation and the writes that end a key's
//! enrolment send theirs ([`notify`]) in their transaction too. PostgreSQL delivers a
//! notification only when its transaction commits, so nobody is woken for an item a failure
//! could still erase. Payloads are text: a kind (`q` queued, `e` epoch, `k` keys), this
//! process's [`tag`] (so a process skips its own), then entries, at most [`MAX_PAYLOAD`] bytes
//! (PostgreSQL's limit is 8000).
//!
//! Receiving: [`start_watch`] keeps one connection of its own (outside the pool)
//! listening, reconnecting every [`RECONNECT_EVERY`] while it cannot. After each (re)connection
//! it delivers `Resumed`: what was committed while nobody listened is found by the waiters
//! looking again. A connection lost without a word is found by TCP keepalive (10 s); meanwhile
//! the relay's one-second poll of its waiters' queue heads (`queue_heads`) is the safety net.

use std::future::{poll_fn, Future};
use std::sync::OnceLock;
use std::task::Poll;
use std::time::Duration;

use relay_store::{Key32, StoreEvent, StoreEvents, WATCH_BACKLOG};
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use crate::ctx::Ctx;

/// The notification channel (one per database).
pub(crate) const CHANNEL: &str = "mbx_relay";
/// Longest payload sent (PostgreSQL refuses 8000 bytes and more).
const MAX_PAYLOAD: usize = 7_900;
/// Wait between attempts to (re)connect the listening connection.
const RECONNECT_EVERY: Duration = Duration::from_secs(1);

/// This process's tag in payloads: random per process.
pub(crate) fn tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| uuid::Uuid::new_v4().simple().to_string()[..12].to_string())
}

fn hex(k: &Key32) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Key32> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(k)
}

/// Payloads of `kind` with these entries, each at most [`MAX_PAYLOAD`] bytes.
fn payloads(kind: char, entries: impl IntoIterator<Item = String>) -> Vec<String> {
    let head = format!("{kind} {}", tag());
    let mut out = Vec::new();
    let mut cur = head.clone();
    for e in entries {
        if cur.len() + 1 + e.len() > MAX_PAYLOAD && cur.len() > head.len() {
            out.push(std::mem::replace(&mut cur, head.clone()));
        }
        cur.push(' ');
        cur.push_str(&e);
    }
    if cur.len() > head.len() {
        out.push(cur);
    }
    out
}

/// The payloads telling that items up to these seqs are queued for these targets.
pub(crate) fn queued_payloads<'a>(
    heads: impl IntoIterator<Item = (&'a Key32, u64)>,
) -> Vec<String> {
    payloads(
        'q',
        heads.into_iter().map(|(k, s)| format!("{}:{s}", hex(k))),
    )
}

/// The payloads telling that these keys may have lost their live enrolment.
pub(crate) fn keys_payloads<'a>(keys: impl IntoIterator<Item = &'a Key32>) -> Vec<String> {
    payloads('k', keys.into_iter().map(hex))
}

/// The payload telling that the epoch changed.
pub(crate) fn epoch_payload() -> Vec<String> {
    vec![format!("e {}", tag())]
}

/// Send `payloads` inside transaction `t` (delivered only if it commits).
pub(crate) async fn notify(
    t: &impl deadpool_postgres::GenericClient,
    payloads: Vec<String>,
) -> Result<(), tokio_postgres::Error> {
    if payloads.is_empty() {
        return Ok(());
    }
    t.execute(
        "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p",
        &[&CHANNEL, &payloads],
    )
    .await
    .map(drop)
}

/// What another process's payload says; `None` for this process's own, or one not understood.
pub(crate) fn parse(payload: &str) -> Option<StoreEvent> {
    let mut parts = payload.split(' ');
    let kind = parts.next()?;
    if parts.next()? == tag() {
        return None;
    }
    match kind {
        "e" => Some(StoreEvent::Epoch),
        "k" => Some(StoreEvent::Keys(parts.filter_map(unhex).collect())),
        "q" => Some(StoreEvent::Queued(
            parts
                .filter_map(|e| {
                    let (k, s) = e.split_once(':')?;
                    Some((unhex(k)?, s.parse().ok()?))
                })
                .collect(),
        )),
        _ => None,
    }
}

/// Start listening for other processes' changes; the relay takes them from the answer.
/// The listener ends when the answer is dropped or the store closes.
pub(crate) fn start_watch(ctx: &Ctx) -> StoreEvents {
    let (tx, rx) = mpsc::channel(WATCH_BACKLOG);
    let s = ctx.clone();
    ctx.spawn_task(async move {
            let mut first = true;
            while !tx.is_closed() {
                tokio::select! {
                    ended = listen_once(&s, &tx) => match ended {
                        Err(e) if first => tracing::warn!(error = %e, "postgres: cannot listen for other processes' changes; retrying (the one-second poll covers them meanwhile)"),
                        Err(e) => tracing::warn!(error = %e, "postgres: the listening connection ended; reconnecting"),
                        Ok(()) => {}
                    },
                    () = tx.closed() => return,
                }
                first = false;
                crate::stats::PoolStats::add(&crate::stats::STATS.listen_lost, 1);
                tokio::time::sleep(RECONNECT_EVERY).await;
            }
        });
    rx
}

/// One listening connection, until it ends: `LISTEN`, `Resumed`, then every notification.
async fn listen_once(ctx: &Ctx, tx: &mpsc::Sender<StoreEvent>) -> relay_store::Result<()> {
    let (client, mut conn) = crate::db::bounded(ctx.db.dedicated()).await?;
    let listen_sql = format!("LISTEN {CHANNEL}");
    let mut listen = Box::pin(client.batch_execute(&listen_sql));
    let mut listening = false;
    poll_fn(|cx| {
        if !listening {
            if let Poll::Ready(r) = listen.as_mut().poll(cx) {
                r.map_err(crate::db::db_err)?;
                listening = true;
                let _ = tx.try_send(StoreEvent::Resumed);
            }
        }
        loop {
            match conn.poll_message(cx) {
                Poll::Ready(Some(Ok(AsyncMessage::Notification(n)))) => {
                    if let Some(ev) = parse(n.payload()) {
                        if tx.try_send(ev).is_err() {
                            crate::stats::PoolStats::add(&crate::stats::STATS.watch_dropped, 1);
                        }
                    }
                }
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(crate::db::db_err(e))),
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_round_trips_and_stays_under_the_limit() {
        let heads: Vec<(Key32, u64)> = (0..200u8).map(|n| ([n; 32], u64::from(n) * 1000)).collect();
        let ps = queued_payloads(heads.iter().map(|(k, s)| (k, *s)));
        assert!(ps.len() > 1 && ps.iter().all(|p| p.len() <= MAX_PAYLOAD));
        // Our own payloads are skipped: parse them as another process would.
        let mut got = Vec::new();
        for p in &ps {
            let other = p.replacen(tag(), "someoneelse", 1);
            match parse(&other) {
                Some(StoreEvent::Queued(v)) => got.extend(v),
                e => panic!("{e:?}"),
            }
        }
        assert_eq!(got, heads);
        assert_eq!(parse(&ps[0]), None, "a process skips its own");
    }

    #[test]
    fn keys_and_epoch_payloads_parse_and_junk_does_not() {
        let k = keys_payloads(&[[7u8; 32], [9u8; 32]]);
        let other = k[0].replacen(tag(), "x", 1);
        assert_eq!(
            parse(&other),
            Some(StoreEvent::Keys(vec![[7; 32], [9; 32]]))
        );
        assert_eq!(
            parse(&epoch_payload()[0].replacen(tag(), "x", 1)),
            Some(StoreEvent::Epoch)
        );
        assert!(queued_payloads([]).is_empty());
        assert_eq!(parse(""), None);
        assert_eq!(parse("z x 1"), None);
        assert_eq!(
            parse("q x zz:1 0101:2"),
            Some(StoreEvent::Queued(Vec::new())),
            "malformed entries are dropped"
        );
    }
}
