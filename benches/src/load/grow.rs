//! Growth mode (`--round-items N`, driven by `cargo bench -p relay-bench --bench growth`): push
//! `--items` in rounds onto queues nobody drains, so every round lands on a bigger store. After
//! enrolling, after each round and before the drain it prints one JSON line on stdout and (but
//! for the enrolment line) waits for a line on stdin: the harness reads the relay's own figures
//! (CPU, disk writes, memory, store size) there, and before the drain restarts, backs up and
//! sweeps the store. The drain then counts what a sweep took as `missing`, not as errors.

use serde::Serialize;
use serde_json::json;

use super::report::Phase;
use super::verify::Tally;
use super::{
    client, drain, failed_requests, hosts, pause, progress, push, relay_err, setup, usage,
    BenchArgs, Setup,
};
use crate::fail::Failure;

/// The error kind `drain` counts items that did not come back under (here: what the harness's
/// retention sweep expired while the bench was paused).
const MISSING: &str = "drain: accepted items missing";

/// One line of output.
fn say(v: &impl Serialize) -> Result<String, Failure> {
    serde_json::to_string(v).map_err(|e| relay_err(format!("cannot encode a line: {e}")))
}

/// Run the growth rounds, then (with --drain) pause and drain everything.
///
/// # Errors
/// As `super::run`; a failed request anywhere makes the run fail after its last line.
pub(super) fn run(a: &BenchArgs) -> Result<(), Failure> {
    let round = a.round_items.unwrap_or(a.items);
    if round == 0 {
        return Err(usage("--round-items must be at least 1"));
    }
    if a.senders.len() != 1 {
        return Err(usage("--round-items takes one --senders value"));
    }
    let Setup {
        conn,
        info,
        targets,
        senders,
        plain_len,
        item_bytes,
        conns,
        enrol_time,
    } = setup(a)?;
    let n = a.senders[0];
    println!(
        "{}",
        say(&json!({
            "enrolled": targets.len() + senders.len(),
            "seconds": enrol_time.as_secs_f64(),
            "item_bytes": item_bytes,
        }))?
    );
    let mut total = Tally::new(targets.len());
    let mut pushed = 0u64;
    let mut k = 0u64;
    while pushed < a.items {
        k += 1;
        let items = round.min(a.items - pushed);
        progress(&format!(
            "round {k}: pushing {items} items onto {pushed} queued"
        ));
        let plan = push::Plan {
            info: &info,
            conns: &conns[..n],
            senders: &senders[..n],
            targets: &targets,
            items,
            first: pushed / n as u64,
            batch: a.batch,
            plain_len,
            item_bytes,
        };
        let mut out = push::run(&plan).map_err(relay_err)?;
        let t = &out.tally;
        let phase = Phase::new(
            t.accepted,
            t.accepted_bytes,
            out.requests,
            (out.timed, out.cpu),
            &mut out.lat_us,
            &t.errors,
        );
        total.merge(t);
        pushed += items;
        super::tell_and_wait(&say(&json!({
            "round": k,
            "queued": total.accepted,
            "queued_bytes": total.accepted_bytes,
            "push": phase,
        }))?)?;
    }
    let mut failed: u64 = total.errors.0.values().sum();
    if a.drain {
        pause(n, total.accepted)?;
        // The harness restarted the relay while we were paused: its epoch is read again.
        let epoch = hosts::relay_info(&conn).map_err(relay_err)?.epoch;
        progress(&format!("draining {} items", total.accepted));
        let receivers: Vec<&client::Host> = targets.iter().map(|t| &t.host).collect();
        let mut d = drain::run(&conn, &receivers, &epoch, info.max_pull, &total.per_target);
        let missing = d.errors.0.remove(MISSING).unwrap_or(0);
        let phase = Phase::new(
            d.items,
            d.bytes,
            d.pages,
            (d.timed, d.cpu),
            &mut d.lat_us,
            &d.errors,
        );
        failed += d.errors.0.values().sum::<u64>();
        println!(
            "{}",
            say(&json!({"drain": phase, "missing": missing, "pushed": total.accepted}))?
        );
    }
    failed_requests(failed)
}
