//! Concurrent inserts share one transaction: PostgreSQL's group commit, as the keyspace's writer
//! does it for fjall.
//!
//! Every push locks its targets' queue rows from its first read to COMMIT, so single pushes to
//! the same targets run one after another, each paying its own two round trips, its own
//! planning and its own WAL flush. Here a push that finds [`IN_FLIGHT`] transactions already
//! running waits in a queue; the next transaction takes every queued push (at most
//! [`GROUP_ITEMS`] items) and runs them as one batch (`ops/insert.rs`), whose rules decide each
//! item in order as if it ran alone. Each push gets its own outcomes back; a transaction that
//! fails answers every push of its group with the error, and none of them wrote anything (the
//! group is one transaction), so each client's retry is safe.
//!
//! Groups run on tasks of their own, so a caller abandoned at its deadline never stops a group
//! that answers others. The queue holds at most [`MAX_QUEUED`] pushes; beyond it a push runs
//! alone (its memory is its caller's own, bounded by the server's connection limit).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use relay_store::{InsertOutcome, InsertRequest, Pending, Result, StoreError};
use tokio::sync::oneshot;

use crate::ctx::Ctx;
use crate::ops::insert::Push;
use crate::ops::insert_flight::Flight;
use crate::ops::insert_keys::Keys;
use crate::ops::insert_plan::plan;
use crate::stats::{PoolStats, STATS};

/// Insert transactions of one store handle running at once: one committing while the next
/// one's pushes gather, and one more, so a slow commit does not stall every push behind it.
const IN_FLIGHT: usize = 2;
/// Most items one grouped transaction takes (a push of more still runs, alone).
const GROUP_ITEMS: usize = 512;
/// Most pushes waiting for a group.
const MAX_QUEUED: usize = 4096;

/// A push waiting for its group, and where its outcomes go.
struct Waiting {
    reqs: Vec<InsertRequest>,
    answer: oneshot::Sender<Result<Vec<InsertOutcome>>>,
}

/// The inserts of one store handle: each push joins a group ([`Groups`]) and the groups run
/// as insert transactions on the store's runtime.
pub(crate) struct Combiner {
    ctx: Ctx,
    groups: Groups,
    paths: PathCounters,
    /// The turn: held by a flight from its guess to its answer, and by a two-round-trip push
    /// from forgetting its rows until it has decided and taught them (`insert_tx`).
    order: Arc<tokio::sync::Mutex<()>>,
}

/// The queue of pushes and how many groups are running.
#[derive(Default)]
struct Groups {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Waiting>,
    running: usize,
}

/// What a push does on arrival.
enum Turn {
    /// Wait for a group's answer; `start_task`: no free group task is running, start one.
    Wait {
        answer: oneshot::Receiver<Result<Vec<InsertOutcome>>>,
        start_task: bool,
    },
    /// The queue is full: run alone.
    Alone(Vec<InsertRequest>),
}

impl Groups {
    fn enqueue(&self, reqs: Vec<InsertRequest>) -> Turn {
        let Ok(mut s) = self.state.lock() else {
            return Turn::Alone(reqs);
        };
        if s.queue.len() >= MAX_QUEUED {
            return Turn::Alone(reqs);
        }
        let (answer, rx) = oneshot::channel();
        s.queue.push_back(Waiting { reqs, answer });
        let start_task = s.running < IN_FLIGHT;
        if start_task {
            s.running += 1;
        }
        Turn::Wait {
            answer: rx,
            start_task,
        }
    }

    /// The next group: at least one push, then more while they fit in [`GROUP_ITEMS`]. Empty
    /// when the queue is: the caller's group task then ends (counted out under the same lock,
    /// so a push queued after this sees a free slot and starts a task of its own).
    fn next_group(&self) -> Vec<Waiting> {
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        let mut group = Vec::new();
        let mut items = 0;
        while let Some(w) = s.queue.front() {
            if !group.is_empty() && items + w.reqs.len() > GROUP_ITEMS {
                break;
            }
            items += w.reqs.len();
            group.extend(s.queue.pop_front());
        }
        if group.is_empty() {
            s.running = s.running.saturating_sub(1);
        }
        group
    }
}

impl Combiner {
    pub(crate) fn new(ctx: Ctx) -> Combiner {
        Combiner {
            ctx,
            groups: Groups::default(),
            paths: PathCounters::default(),
            order: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Insert one item over all its targets atomically.
    pub(crate) fn insert(self: &Arc<Self>, req: InsertRequest) -> Pending<InsertOutcome> {
        let me = Arc::clone(self);
        self.ctx.spawn(async move {
            me.insert_grouped(vec![req])
                .await?
                .pop()
                .ok_or_else(|| StoreError::Engine("postgres: an insert answered no outcome".into()))
        })
    }

    /// Insert several items, each its own atomic operation, in one transaction (with the
    /// other pushes waiting then): one commit, as the keyspace's one group commit.
    pub(crate) fn insert_many(
        self: &Arc<Self>,
        reqs: Vec<InsertRequest>,
    ) -> Pending<Vec<InsertOutcome>> {
        let me = Arc::clone(self);
        self.ctx.spawn(async move { me.insert_grouped(reqs).await })
    }

    /// Insert `reqs` (one push), grouped with the pushes that arrive while others commit.
    async fn insert_grouped(
        self: &Arc<Self>,
        reqs: Vec<InsertRequest>,
    ) -> Result<Vec<InsertOutcome>> {
        match self.groups.enqueue(reqs) {
            Turn::Alone(reqs) => self.insert_tx(reqs).await,
            Turn::Wait { answer, start_task } => {
                if start_task {
                    let me = Arc::clone(self);
                    self.ctx.spawn_task(async move { me.run_groups().await });
                }
                answer.await.unwrap_or(Err(StoreError::Closed))
            }
        }
    }

    /// Run groups until the queue is empty.
    async fn run_groups(&self) {
        let mut slot = Slot {
            groups: &self.groups,
            ended: false,
        };
        loop {
            let group = slot.groups.next_group();
            if group.is_empty() {
                slot.ended = true;
                return;
            }
            let sizes: Vec<usize> = group.iter().map(|w| w.reqs.len()).collect();
            let mut reqs = Vec::with_capacity(sizes.iter().sum());
            let mut answers = Vec::with_capacity(group.len());
            for w in group {
                reqs.extend(w.reqs);
                answers.push(w.answer);
            }
            PoolStats::add(&STATS.insert_groups, 1);
            PoolStats::add(&STATS.grouped_pushes, answers.len() as u64);
            let outcome = crate::db::bounded(self.insert_tx(reqs)).await;
            for (answer, part) in answers.into_iter().zip(split(outcome, &sizes)) {
                let _ = answer.send(part);
            }
        }
    }

    /// The insert transaction, retried as every write: in one round trip when its rows are
    /// guessed and the guess holds (`ops/insert_flight.rs`), else in two (`ops/insert.rs`).
    ///
    /// The insert transactions of this handle take their locks in turn ([`Combiner::order`]):
    /// a flight from its guess to its answer, a two-round-trip push until it has decided. So a
    /// flight guesses from what the one before it committed, or from what a two-round-trip
    /// push decided under locks taken before this flight's. Without it, two sent at once reach
    /// their locks in either order, and the one that guessed from the other's rows misses if it
    /// locks first (13-19 % of flights missed so on h-rt, each costing a flight before its two
    /// round trips). Waiting costs little the database would not make it wait: the groups of
    /// one handle share their targets' queue rows, whose locks make them commit in turn anyway.
    async fn insert_tx(&self, reqs: Vec<InsertRequest>) -> Result<Vec<InsertOutcome>> {
        let reqs = Arc::new(reqs);
        let guesses = &self.ctx.guesses;
        let keys = Keys::of(&reqs);
        let turn = Arc::clone(&self.order).lock_owned().await;
        let now = self.ctx.now_ms();
        if let Some(guess) = guesses.guess(&keys) {
            let mut plan = plan(&reqs, &guess, now)?;
            PoolStats::add(&STATS.insert_flights, 1);
            PoolStats::add(&self.paths.flights, 1);
            let after = std::mem::take(&mut plan.after);
            let flight = Flight {
                reqs: Arc::clone(&reqs),
                now,
                guess,
                plan,
            };
            match self.ctx.db.run(flight).await {
                Ok(Some(outcomes)) => {
                    guesses.learn(&keys, &after);
                    return Ok(outcomes);
                }
                Ok(None) => {
                    PoolStats::add(&STATS.insert_flights_missed, 1);
                    PoolStats::add(&self.paths.missed, 1);
                }
                Err(e) => {
                    guesses.forget(&keys);
                    return Err(e);
                }
            }
        }
        PoolStats::add(&self.paths.two_trips, 1);
        // The flights behind this push must not guess what it is changing; it teaches the rows
        // once it has decided, under its locks, and only then gives the turn on (`Push`).
        guesses.forget(&keys);
        let push = Push {
            reqs: Arc::clone(&reqs),
            now,
            guesses: Arc::clone(guesses),
            turn: Some(turn),
        };
        match self.ctx.db.run(push).await {
            Ok(plan) => Ok(plan.outcomes),
            Err(e) => {
                guesses.forget(&keys);
                Err(e)
            }
        }
    }

    /// How this handle's insert transactions were sent so far.
    pub(crate) fn paths(&self) -> InsertPaths {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        InsertPaths {
            flights: get(&self.paths.flights),
            missed: get(&self.paths.missed),
            two_trips: get(&self.paths.two_trips),
        }
    }
}

/// How one store handle's insert transactions were sent (`PgStore::insert_paths`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InsertPaths {
    /// Sent in one round trip, decided from a guess of their rows.
    pub flights: u64,
    /// Of those, the ones whose guess was wrong (nothing written; each then ran in two).
    pub missed: u64,
    /// Sent in two round trips (no guess, or after a miss).
    pub two_trips: u64,
}

/// [`InsertPaths`]' counters.
#[derive(Default)]
struct PathCounters {
    flights: AtomicU64,
    missed: AtomicU64,
    two_trips: AtomicU64,
}

/// A running group task's place in [`State::running`]: given back by `next_group` when the
/// queue is empty, or here if the task ends otherwise (a panic, the runtime shutting down), so a
/// lost task never leaves pushes queued with no task to run them.
struct Slot<'a> {
    groups: &'a Groups,
    ended: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.ended {
            if let Ok(mut s) = self.groups.state.lock() {
                s.running = s.running.saturating_sub(1);
            }
        }
    }
}

/// A group's answer as its pushes' answers: consecutive runs of `sizes` outcomes, or the
/// group's error for each.
fn split(outcome: Result<Vec<InsertOutcome>>, sizes: &[usize]) -> Vec<Result<Vec<InsertOutcome>>> {
    let all = match outcome {
        Ok(all) if all.len() == sizes.iter().sum::<usize>() => all,
        Ok(_) => {
            return sizes
                .iter()
                .map(|_| {
                    Err(StoreError::Engine(
                        "postgres: a grouped insert answered the wrong number of outcomes".into(),
                    ))
                })
                .collect()
        }
        Err(e) => return sizes.iter().map(|_| Err(same_error(&e))).collect(),
    };
    let mut rest = all.into_iter();
    sizes
        .iter()
        .map(|&n| Ok(rest.by_ref().take(n).collect()))
        .collect()
}

/// The group's error for one of its pushes: the same kind, so each is answered as it would be
/// alone (an engine failure 503, a closed store, damage).
fn same_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::Closed => StoreError::Closed,
        StoreError::Corrupt(why) => StoreError::Corrupt(why.clone()),
        StoreError::Engine(why) => StoreError::Engine(why.clone()),
        other => StoreError::Engine(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outcomes told apart by their target.
    fn outcome(n: u8) -> InsertOutcome {
        InsertOutcome::TargetNotEnrolled { target: [n; 32] }
    }

    #[test]
    fn each_push_gets_its_own_outcomes_in_order() {
        let parts = split(Ok(vec![outcome(1), outcome(2), outcome(3)]), &[1, 2]);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].as_ref().unwrap(), &vec![outcome(1)]);
        assert_eq!(parts[1].as_ref().unwrap(), &vec![outcome(2), outcome(3)]);
    }

    #[test]
    fn a_failed_group_answers_every_push_with_its_error() {
        let parts = split(Err(StoreError::Engine("lost".into())), &[1, 3]);
        assert_eq!(parts.len(), 2);
        for p in parts {
            assert!(matches!(p, Err(StoreError::Engine(w)) if w == "lost"));
        }
        let parts = split(Err(StoreError::Closed), &[2]);
        assert!(matches!(parts[0], Err(StoreError::Closed)));
    }

    #[test]
    fn a_miscounted_answer_is_an_error_for_every_push() {
        let parts = split(Ok(vec![outcome(1)]), &[1, 1]);
        assert!(parts.iter().all(Result::is_err));
    }

    #[test]
    fn a_group_takes_queued_pushes_up_to_its_item_bound() {
        let c = Groups::default();
        let waits: Vec<_> = [300, 200, 100, 5]
            .into_iter()
            .map(|n| c.enqueue((0..n).map(|_| req()).collect()))
            .collect();
        let started: Vec<bool> = waits
            .iter()
            .map(|t| {
                matches!(
                    t,
                    Turn::Wait {
                        start_task: true,
                        ..
                    }
                )
            })
            .collect();
        assert_eq!(started, [true, true, false, false], "two groups at most");
        let sizes = |g: Vec<Waiting>| g.iter().map(|w| w.reqs.len()).collect::<Vec<_>>();
        assert_eq!(sizes(c.next_group()), [300, 200]);
        assert_eq!(sizes(c.next_group()), [100, 5]);
        assert!(c.next_group().is_empty());
        assert!(c.next_group().is_empty());
        assert_eq!(c.state.lock().unwrap().running, 0);
        // A push bigger than the bound still runs, alone in its group.
        let _ = c.enqueue((0..600).map(|_| req()).collect());
        let _ = c.enqueue(vec![req()]);
        assert_eq!(sizes(c.next_group()), [600]);
        assert_eq!(sizes(c.next_group()), [1]);
    }

    #[test]
    fn a_group_task_that_ends_early_gives_its_slot_back() {
        let c = Groups::default();
        assert!(matches!(
            c.enqueue(vec![req()]),
            Turn::Wait {
                start_task: true,
                ..
            }
        ));
        drop(Slot {
            groups: &c,
            ended: false,
        });
        assert!(
            matches!(
                c.enqueue(vec![req()]),
                Turn::Wait {
                    start_task: true,
                    ..
                }
            ),
            "the next push starts a task for what is queued"
        );
        drop(Slot {
            groups: &c,
            ended: true,
        });
        assert_eq!(
            c.state.lock().unwrap().running,
            1,
            "an ended task gave it back already"
        );
    }

    #[test]
    fn a_full_queue_runs_the_push_alone() {
        let c = Groups::default();
        for _ in 0..MAX_QUEUED {
            assert!(matches!(c.enqueue(vec![req()]), Turn::Wait { .. }));
        }
        assert!(matches!(c.enqueue(vec![req()]), Turn::Alone(r) if r.len() == 1));
    }

    fn req() -> InsertRequest {
        InsertRequest {
            item: relay_store::NewItem {
                kind: relay_store::ItemKind::Envelope,
                item_id: "i".into(),
                sender: [1; 32],
                targets: Vec::new(),
            },
            quotas: relay_store::Quotas::all(1),
            retention_ms: 1,
            require_live_sender: true,
        }
    }
}
