//! `mbx-relay host run`: the host as a daemon. It holds the host store, runs the ordinary sync
//! pass ([`Session::run`]) whenever there is something to do, and otherwise sleeps:
//! - the watcher thread ([`super::watch`]) keeps a long-poll (or a poll) open and wakes it when
//!   mail arrives, the epoch changes, or the relay answers again after an outage;
//! - the local socket ([`super::local`]) takes `send` (sealed and committed in one change before
//!   the answer, pushed at once), `status`, `inbox` and `quarantine` from other processes;
//! - a pass caused by a `send` or a wake is only the pull and push these wait for while the last
//!   whole pass (info check first, as `sync`) is under [`FULL_PASS_GAP`] old, else it starts
//!   with them and goes on with the whole pass: delivery waits for no other round trip;
//! - rows backed off by a failed push are retried when due (the pass's own backoff), a failed
//!   pass is retried after a jittered, capped reconnect delay, and an idle daemon still passes
//!   every [`IDLE_PASS`] (deadlines, enc-ad renewal);
//! - SIGTERM/SIGINT stop it: the pass in flight finishes (or, after [`STOP_GRACE`], is
//!   abandoned: every store change is atomic), the store is closed, the socket removed, exit 0.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::args::RunArgs;
use super::daemon_log::daemon_log;
use super::doctor::StoreFacts;
use super::identity::Identity;
use super::local::{self, Reply, Request};
use super::mailbox::{inbox, inbox_show, quarantine, queue_message, status, Out};
use super::store::{HostStore, OutRow, RowState};
use super::sync::{Agents, Session, SyncOptions};
use super::trace;
use super::watch::{reconnect_delay, watch, Shared, WatchOptions};
use super::{now_ms, HostError};

/// A full pass at least this often, even when nothing happens (deadlines, enc-ad renewal).
pub(crate) const IDLE_PASS: Duration = Duration::from_secs(60);
/// After a stop signal, how long the pass in flight may take before the process exits anyway.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);
/// Under steady traffic a pass for a `send` or a wake is the whole pass at least this often.
const FULL_PASS_GAP: Duration = Duration::from_secs(1);
/// The enc-key lookup of a `send` sealed at once waits at most this (then the pass seals it).
const SEAL_AT_QUEUE_TIMEOUT: Duration = Duration::from_secs(2);
/// Least time between passes scheduled for due rows (no hot loop on a row the relay refuses).
const MIN_PASS_GAP: Duration = Duration::from_millis(10);
/// Bound on events taken in before the next pass.
const MAX_EVENTS_PER_PASS: usize = 1_000;

/// What wakes the daemon's loop.
enum Event {
    Local(Request, mpsc::Sender<Reply>),
    Wake,
    Stop,
}

/// The daemon's state between events.
struct Daemon<'a> {
    dir: &'a Path,
    id: Identity,
    store: HostStore,
    opts: SyncOptions,
    shared: Arc<Shared>,
    /// Consecutive failed passes (0: the relay answered last time).
    failures: u32,
    /// When the last whole pass completed (relay key, epoch and enrolment checked); `None` after
    /// a failed pass. While it is recent, a pass for a `send` or a wake is only the steps these
    /// wait for ([`Session::head_start`]); the whole pass runs at least every [`FULL_PASS_GAP`].
    last_full: Option<Instant>,
    /// What the events since the last pass wait for: a push (a `send`), a pull (a wake).
    push_first: bool,
    pull_first: bool,
    /// Keep-alive connections to the relay, reused by every pass.
    agents: Agents,
    next_pass: Instant,
    passes: u64,
    stop: bool,
}

/// Run the daemon until SIGTERM/SIGINT.
///
/// # Errors
/// The store is locked or damaged, no relay or name is configured, the socket cannot be made, or
/// the relay's key changed (relay use waits for the owner, as with `sync`).
pub(crate) fn run(dir: &Path, args: &RunArgs) -> Out {
    // As `sync` does: an interrupted key rotation is finished first, so the keys loaded below are
    // the host's current ones (`rotate` is refused while the daemon runs).
    if super::rotate::finish_pending(dir)?.is_some() {
        daemon_log!("finished the interrupted key rotation");
    }
    let id = Identity::load(dir)?;
    let mut store = HostStore::open(dir).map_err(|e| {
        HostError::Store(format!(
            "{e} (is another `host run` holding this directory?)"
        ))
    })?;
    let opts = SyncOptions::from_env();
    let name = Session::open(&mut store, &id, opts)?.name;
    let listener = local::bind(dir)?;
    let (tx, rx) = mpsc::channel();
    on_stop_signal(tx.clone())?;
    let local_tx = tx.clone();
    spawn("host-local", move || {
        local::serve(listener, |req| ask(&local_tx, req));
    })?;
    let shared = Arc::new(Shared::default());
    let watch_id = Identity::load(dir)?;
    let watch_shared = Arc::clone(&shared);
    let watch_opts = WatchOptions {
        poll: Duration::from_secs(args.poll_secs),
        sync: opts,
    };
    spawn("host-watch", move || {
        watch(&watch_id, &name, &watch_shared, watch_opts, || {
            tx.send(Event::Wake).is_ok()
        });
    })?;
    println!(
        "host daemon running (pid {}); socket {}",
        std::process::id(),
        local::socket_path(dir).display()
    );
    daemon_log!("started (pid {})", std::process::id());
    let mut d = Daemon {
        dir,
        id,
        store,
        opts,
        shared,
        failures: 0,
        last_full: None,
        push_first: false,
        pull_first: false,
        agents: Agents::default(),
        next_pass: Instant::now(),
        passes: 0,
        stop: false,
    };
    let result = d.serve(&rx);
    let passes = d.passes;
    drop(d);
    let _ = std::fs::remove_file(local::socket_path(dir));
    match &result {
        Ok(()) => daemon_log!("stopped after {passes} pass(es)"),
        Err(e) => daemon_log!("stopped after {passes} pass(es): {e}"),
    }
    result?;
    Ok((
        json!({"stopped": true, "passes": passes}),
        format!("host daemon stopped after {passes} pass(es)"),
    ))
}

/// Hand a local request to the daemon's loop and wait for its reply.
fn ask(tx: &mpsc::Sender<Event>, req: Request) -> Reply {
    let (rtx, rrx) = mpsc::channel();
    if tx.send(Event::Local(req, rtx)).is_err() {
        return Reply::from_out(Err(HostError::Store("the host daemon is stopping".into())));
    }
    rrx.recv().unwrap_or_else(|_| {
        Reply::from_out(Err(HostError::Store(
            "the host daemon stopped before answering".into(),
        )))
    })
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), HostError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(drop)
        .map_err(|e| HostError::Store(format!("cannot start the {name} thread: {e}")))
}

/// SIGTERM or SIGINT sends [`Event::Stop`]; a pass that does not finish within [`STOP_GRACE`]
/// (or a second signal) ends the process at once, still with exit code 0.
fn on_stop_signal(tx: mpsc::Sender<Event>) -> Result<(), HostError> {
    use tokio::signal::unix::{signal, SignalKind};
    let err = |e: std::io::Error| HostError::Store(format!("cannot install a signal handler: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let (mut term, mut int) = {
        let _guard = rt.enter();
        (
            signal(SignalKind::terminate()).map_err(err)?,
            signal(SignalKind::interrupt()).map_err(err)?,
        )
    };
    spawn("host-signals", move || {
        rt.block_on(async {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            let _ = tx.send(Event::Stop);
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = tokio::time::sleep(STOP_GRACE) => {}
            }
        });
        daemon_log!("stop: the pass in flight was abandoned");
        std::process::exit(0);
    })
}

impl Daemon<'_> {
    /// The event loop; returns on a stop signal or a failure that needs the owner.
    fn serve(&mut self, rx: &mpsc::Receiver<Event>) -> Result<(), HostError> {
        loop {
            let timeout = self.next_pass.saturating_duration_since(Instant::now());
            let mut due = match rx.recv_timeout(timeout) {
                Ok(ev) => self.handle(ev),
                Err(RecvTimeoutError::Timeout) => true,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            // Coalesce what else waits (sends queued together go out in one push).
            for ev in rx.try_iter().take(MAX_EVENTS_PER_PASS) {
                due |= self.handle(ev);
            }
            if self.stop {
                return Ok(());
            }
            if due || Instant::now() >= self.next_pass {
                self.pass()?;
            }
        }
    }

    /// Take in one event; true when a pass should follow.
    fn handle(&mut self, ev: Event) -> bool {
        match ev {
            Event::Stop => {
                self.stop = true;
                false
            }
            Event::Wake => {
                self.pull_first = true;
                true
            }
            Event::Local(req, reply) => {
                let is_send = matches!(req, Request::Send { .. });
                let out = self.local(req);
                let queued = is_send && out.is_ok();
                let _ = reply.send(Reply::from_out(out));
                self.push_first |= queued;
                queued
            }
        }
    }

    /// Serve one local request with the daemon's store.
    fn local(&mut self, req: Request) -> Out {
        match req {
            Request::Ping => Ok((json!({"pid": std::process::id()}), "running".into())),
            Request::Send { to, subject, body } => {
                trace::mark("send-taken", "-");
                // Sealed before its one commit when the relay answered the last pass, with a
                // short lookup timeout: a relay gone since then delays `send` by at most that.
                let (id, checked, agents) = (&self.id, self.last_full.is_some(), &mut self.agents);
                let opts = SyncOptions {
                    timeout: self.opts.timeout.min(SEAL_AT_QUEUE_TIMEOUT),
                    ..self.opts
                };
                let seal = |store: &mut HostStore, row: &mut OutRow| {
                    if !checked {
                        return;
                    }
                    if let Ok(mut s) = Session::open_kept(store, id, opts, agents) {
                        s.seal_at_queue(row);
                    }
                };
                let (v, _) = queue_message(&mut self.store, &to, &subject, &body, seal)?;
                let id = v["id"].as_str().unwrap_or_default();
                trace::mark("send-durable", id);
                let text = format!("queued {id} for {to}; the host daemon pushes it now");
                Ok((v, text))
            }
            Request::Status => status(self.dir, &self.store),
            Request::Inbox => inbox(&self.store),
            Request::InboxShow { id } => inbox_show(&self.store, &id),
            Request::Quarantine => quarantine(&self.store),
            Request::DoctorFacts => {
                let facts = StoreFacts::read(&self.store)?;
                let v = serde_json::to_value(facts)
                    .map_err(|e| HostError::Store(format!("doctor facts: {e}")))?;
                Ok((v, String::new()))
            }
        }
    }

    /// One sync pass, then the next pass's time and the watcher's new position.
    fn pass(&mut self) -> Result<(), HostError> {
        self.passes += 1;
        trace::mark("pass-start", "-");
        let (push, pull) = (self.push_first, self.pull_first);
        (self.push_first, self.pull_first) = (false, false);
        let checked = self.last_full.take();
        let head_start = checked.is_some() && (push || pull);
        let full_due = checked.is_none_or(|t| t.elapsed() >= FULL_PASS_GAP);
        let opened = Session::open_kept(&mut self.store, &self.id, self.opts, &mut self.agents);
        let result = opened.and_then(|mut s| {
            if push {
                relay_os::failpoint::hit("host-daemon-after-send-before-push");
            }
            if head_start && s.head_start(pull)? && !full_due {
                return Ok(checked);
            }
            s.run().map(|_| Some(Instant::now()))
        });
        let now = Instant::now();
        match result {
            Ok(last_full) => {
                self.last_full = last_full;
                if self.failures > 0 {
                    daemon_log!("the relay answers again");
                }
                self.failures = 0;
                self.next_pass = now + self.idle_or_due()?;
            }
            Err(
                e @ (HostError::RelayKeyChanged { .. } | HostError::Usage(_) | HostError::Store(_)),
            ) => return Err(e),
            Err(e) => {
                // Kept connections may be dead (a relay restart): the retry opens fresh ones.
                self.agents = Agents::default();
                self.failures = self.failures.saturating_add(1);
                if self.failures == 1 {
                    daemon_log!("pass failed, retrying: {e}");
                }
                self.next_pass = now + reconnect_delay(&self.opts, self.failures);
            }
        }
        self.publish()
    }

    /// Time until the earliest row due for sealing or pushing, at most [`IDLE_PASS`].
    fn idle_or_due(&self) -> Result<Duration, HostError> {
        let now = now_ms();
        let due = self
            .store
            .rows()?
            .iter()
            .filter(|r| matches!(r.state, RowState::Draft | RowState::Pending))
            .map(|r| r.next_at.saturating_sub(now))
            .min();
        Ok(due.map_or(IDLE_PASS, |ms| {
            Duration::from_millis(ms).clamp(MIN_PASS_GAP, IDLE_PASS)
        }))
    }

    /// Tell the watcher where receiving stands now.
    fn publish(&self) -> Result<(), HostError> {
        if let Some(relay) = self.store.relay()? {
            let cp = self.store.checkpoint(&relay.url, &relay.relay_pubkey)?;
            let endpoint = self.store.endpoint_of(&relay)?;
            let epoch = relay.epoch.unwrap_or_default();
            self.shared.publish(&endpoint, &epoch, cp.received_through);
        }
        Ok(())
    }
}
