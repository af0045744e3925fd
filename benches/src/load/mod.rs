//! `relay-bench`: a load generator for any relay that speaks docs/protocol.md. It enrols its own
//! hosts, pushes sealed envelopes from N concurrent senders, checks every accept statement
//! against the relay key, optionally drains the queues as the receivers, and reports rates,
//! latency percentiles and errors by kind (text, JSON, and an SVG of a senders sweep).

mod client;
mod drain;
mod grow;
mod hosts;
mod latency;
mod latency_svg;
mod payload;
mod push;
mod report;
mod stats;
mod svg;
#[cfg(test)]
mod tests;
mod verify;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use client::Conn;
use payload::Target;
use report::{Phase, PointReport, Report};

use crate::fail::{Code, Failure};

/// Most concurrent senders, targets or items a run may ask for (bounds threads and memory).
const MAX_SENDERS: usize = 1024;
/// Targets: the growth bench spreads its queue over 100,000 hosts.
const MAX_TARGETS: usize = 1_000_000;
const MAX_ITEMS: u64 = 100_000_000;

/// Flags of `relay-bench`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BenchArgs {
    /// The relay's base URL (http://host:port or https://host:port).
    #[arg(long)]
    pub url: String,
    /// Trust only this CA (PEM) for an https --url (default: the bundled web roots, as hosts do).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Concurrent senders; a comma-separated list (1,8,64) sweeps, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "8")]
    pub senders: Vec<usize>,
    /// Target hosts; items go to them round robin.
    #[arg(long, default_value_t = 8)]
    pub targets: usize,
    /// Items pushed per run (split evenly across the senders).
    #[arg(long, default_value_t = 10_000)]
    pub items: u64,
    /// Items per push request (at most the relay's max_batch).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Approximate wire size of each sealed envelope, in bytes.
    #[arg(long, default_value_t = 1024)]
    pub item_bytes: usize,
    /// After pushing, pull and ack every queue as its receiver (timed separately).
    #[arg(long)]
    pub drain: bool,
    /// Before each drain, print a `{"paused":...}` line on stdout and wait for a line on stdin
    /// (lets a harness measure the relay with the items queued, or restart it).
    #[arg(long, requires = "drain")]
    pub pause_before_drain: bool,
    /// Growth mode: push --items in rounds of this many items onto queues left undrained, and
    /// after each round print a `{"round":...}` JSON line on stdout and wait for a line on
    /// stdin (a harness reads the relay's CPU, I/O, memory and store size between rounds);
    /// one --senders value; JSON lines only.
    #[arg(long, value_name = "ITEMS")]
    pub round_items: Option<u64>,
    /// Print one JSON document instead of the text table.
    #[arg(long)]
    pub json: bool,
    /// Draw items/s and p99 latency against senders into this SVG file (with --latency: the
    /// latency percentiles per receiver kind).
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Per-request timeout, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Measure live delivery instead (docs/protocol.md §8): push-to-receive latency for
    /// long-poll, events-stream and 1 s polling receivers at `--rate`.
    #[arg(long)]
    pub latency: bool,
    /// With --latency: items pushed per second (single-item pushes from 16 senders).
    #[arg(long, default_value_t = 1000, requires = "latency")]
    pub rate: u64,
    /// With --latency: seconds of pushing per receiver kind.
    #[arg(long, default_value_t = 10, requires = "latency")]
    pub duration: u64,
    /// With --latency: only these receiver kinds (long-poll, stream, poll; default all; `none`
    /// for the idle measurement alone).
    #[arg(long, value_delimiter = ',', requires = "latency")]
    pub kinds: Vec<String>,
    /// With --latency: then hold this many idle waiters and read the relay's RSS and CPU.
    #[arg(long, default_value_t = 0, requires = "latency")]
    pub idle_waiters: usize,
    /// With --idle-waiters: the idle receivers are event streams instead of waiting pulls.
    #[arg(long, requires = "latency")]
    pub idle_streams: bool,
    /// With --idle-waiters: seconds over which the relay's CPU is measured.
    #[arg(long, default_value_t = 30, requires = "latency")]
    pub idle_secs: u64,
    /// With --idle-waiters: the relay's process id (its RSS and CPU are read from /proc).
    #[arg(long, requires = "latency")]
    pub relay_pid: Option<u32>,
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure::new(Code::Usage, msg)
}

fn relay_err(msg: String) -> Failure {
    Failure::new(Code::Store, msg)
}

fn validate(a: &BenchArgs) -> Result<(), Failure> {
    if a.senders.is_empty() || a.senders.iter().any(|s| !(1..=MAX_SENDERS).contains(s)) {
        return Err(usage(format!(
            "--senders: each value must be 1..={MAX_SENDERS}"
        )));
    }
    if !(1..=MAX_TARGETS).contains(&a.targets) {
        return Err(usage(format!("--targets must be 1..={MAX_TARGETS}")));
    }
    if !(1..=MAX_ITEMS).contains(&a.items) {
        return Err(usage(format!("--items must be 1..={MAX_ITEMS}")));
    }
    if a.batch == 0 {
        return Err(usage("--batch must be at least 1"));
    }
    if a.timeout == 0 {
        return Err(usage("--timeout must be at least 1 second"));
    }
    if !(a.url.starts_with("http://") || a.url.starts_with("https://")) {
        return Err(usage("--url must be http://host:port or https://host:port"));
    }
    if a.ca.is_some() && !a.url.starts_with("https://") {
        return Err(usage("--ca applies to an https:// --url only"));
    }
    Ok(())
}

/// Progress on stderr (the report goes to stdout).
fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

/// Wait for the harness to say go (one line on stdin), after saying we are paused.
fn pause(senders: usize, queued: u64) -> Result<(), Failure> {
    tell_and_wait(&format!(
        "{{\"paused\":true,\"senders\":{senders},\"queued\":{queued}}}"
    ))
}

/// Print `line` on stdout, then wait for the harness to say go (one line on stdin).
fn tell_and_wait(line: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| relay_err(format!("stdout: {e}")))?;
    drop(out);
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| relay_err(format!("stdin: {e}")))?;
    Ok(())
}

/// Run the bench and print its report (and the SVG when asked).
///
/// # Errors
/// Usage errors, an unreachable relay or a refused enrolment; a run where any request failed
/// (after printing the report: the errors by kind are in it).
pub(crate) fn run(a: &BenchArgs) -> Result<(), Failure> {
    if a.latency {
        return latency::run(a);
    }
    if a.round_items.is_some() {
        return grow::run(a);
    }
    let report = measure(a)?;
    if let Some(path) = &a.svg {
        let pts: Vec<svg::Point> = report
            .points
            .iter()
            .map(|p| svg::Point {
                senders: p.senders,
                items_per_s: p.push.items_per_s,
                p99_ms: p.push.latency_ms.p99,
            })
            .collect();
        let title = format!(
            "mbx-relay push: batches of {}, {}-byte items, {} targets",
            report.batch, report.item_bytes, report.targets
        );
        std::fs::write(path, svg::render(&title, &pts, &svg::provenance()))
            .map_err(|e| Failure::io("cannot write", path, &e))?;
    }
    print_report(a, &report, report::text)?;
    let failed: u64 = report
        .points
        .iter()
        .flat_map(|p| std::iter::once(&p.push).chain(p.drain.as_ref()))
        .flat_map(|phase| phase.errors.values())
        .sum();
    failed_requests(failed)
}

/// A run whose requests did not all succeed fails (exit 1), so a script or CI job never takes
/// a run with errors for a measurement.
///
/// # Errors
/// `failed` is not 0.
pub(super) fn failed_requests(failed: u64) -> Result<(), Failure> {
    if failed == 0 {
        return Ok(());
    }
    let mut f = relay_err(format!(
        "{failed} request{} failed (the report lists them by kind)",
        if failed == 1 { "" } else { "s" }
    ));
    f.reported = true;
    Err(f)
}

/// Print a report on stdout: JSON with `--json`, else its text.
///
/// # Errors
/// The report cannot be encoded or stdout cannot be written.
pub(super) fn print_report<R: serde::Serialize>(
    a: &BenchArgs,
    report: &R,
    text: fn(&R) -> String,
) -> Result<(), Failure> {
    let text = if a.json {
        serde_json::to_string(report)
            .map_err(|e| relay_err(format!("cannot encode the report: {e}")))?
            + "\n"
    } else {
        text(report)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| relay_err(format!("stdout: {e}")))
}

/// The TLS trust of `--url`: bundled web roots, or `--ca FILE` alone.
///
/// # Errors
/// An unreadable or malformed `--ca` file.
fn tls_of(a: &BenchArgs) -> Result<ureq::tls::TlsConfig, Failure> {
    let ca =
        a.ca.as_deref()
            .map(mbx_host::trust::read_ca)
            .transpose()
            .map_err(usage)?;
    mbx_host::trust::tls_config(ca.as_deref()).map_err(usage)
}

/// What every run starts with: the relay's facts, its own enrolled targets and senders (as
/// many as the largest --senders value), the item size, a connection per sender.
struct Setup {
    conn: Conn,
    info: hosts::RelayInfo,
    targets: Vec<Target>,
    senders: Vec<client::Host>,
    plain_len: usize,
    item_bytes: usize,
    conns: Vec<Conn>,
    /// How long enrolling every target and sender took.
    enrol_time: Duration,
}

/// Check the flags against the relay, enrol the hosts and size the items.
///
/// # Errors
/// As [`run`].
fn setup(a: &BenchArgs) -> Result<Setup, Failure> {
    validate(a)?;
    let timeout = Duration::from_secs(a.timeout);
    let conn = Conn::new(&a.url, timeout, tls_of(a)?);
    let info = hosts::relay_info(&conn).map_err(relay_err)?;
    if a.batch > info.max_batch {
        return Err(usage(format!(
            "--batch {} is over the relay's max_batch {}",
            a.batch, info.max_batch
        )));
    }
    let max_senders = a.senders.iter().copied().max().unwrap_or(1);
    let tag = hosts::run_tag();
    progress(&format!(
        "enrolling {} targets and {max_senders} senders (run {tag})",
        a.targets
    ));
    let t0 = std::time::Instant::now();
    let targets: Vec<Target> = hosts::enrol_many(&conn, &format!("bench-{tag}-t"), a.targets)
        .map_err(relay_err)?
        .into_iter()
        .map(Target::new)
        .collect();
    let senders =
        hosts::enrol_many(&conn, &format!("bench-{tag}-s"), max_senders).map_err(relay_err)?;
    let enrol_time = t0.elapsed();
    let (plain_len, item_bytes) =
        payload::calibrate(&senders[0], &targets[0], a.item_bytes).map_err(relay_err)?;
    if item_bytes as u64 > info.max_item_bytes {
        return Err(usage(format!(
            "items of {item_bytes} bytes are over the relay's max_item_bytes {}",
            info.max_item_bytes
        )));
    }
    let conns: Vec<Conn> = (0..max_senders).map(|_| conn.fresh()).collect();
    Ok(Setup {
        conn,
        info,
        targets,
        senders,
        plain_len,
        item_bytes,
        conns,
        enrol_time,
    })
}

/// Enrol, push, check, optionally drain, for every sweep point; the measurements.
///
/// # Errors
/// As [`run`].
fn measure(a: &BenchArgs) -> Result<Report, Failure> {
    let Setup {
        conn,
        info,
        targets,
        senders,
        plain_len,
        item_bytes,
        conns,
        ..
    } = setup(a)?;
    let mut points = Vec::new();
    for &n in &a.senders {
        progress(&format!(
            "{n} senders: pushing {} items in batches of {}",
            a.items, a.batch
        ));
        let plan = push::Plan {
            info: &info,
            conns: &conns[..n],
            senders: &senders[..n],
            targets: &targets,
            items: a.items,
            first: 0,
            batch: a.batch,
            plain_len,
            item_bytes,
        };
        let mut pushed = push::run(&plan).map_err(relay_err)?;
        let t = &pushed.tally;
        let push = Phase::new(
            t.accepted,
            t.accepted_bytes,
            pushed.requests,
            (pushed.timed, pushed.cpu),
            &mut pushed.lat_us,
            &t.errors,
        );
        let drain = if a.drain {
            if a.pause_before_drain {
                pause(n, t.accepted)?;
            }
            // Re-read the epoch: a harness may have restarted the relay while we were paused.
            let epoch = hosts::relay_info(&conn).map_err(relay_err)?.epoch;
            progress(&format!("{n} senders: draining {} items", t.accepted));
            let receivers: Vec<&client::Host> = targets.iter().map(|t| &t.host).collect();
            let mut d = drain::run(&conn, &receivers, &epoch, info.max_pull, &t.per_target);
            Some(Phase::new(
                d.items,
                d.bytes,
                d.pages,
                (d.timed, d.cpu),
                &mut d.lat_us,
                &d.errors,
            ))
        } else {
            None
        };
        points.push(PointReport {
            senders: n,
            items: a.items,
            push,
            drain,
        });
    }
    Ok(Report {
        url: a.url.clone(),
        relay_version: info.version.clone(),
        targets: a.targets,
        batch: a.batch,
        item_bytes,
        item_bytes_asked: a.item_bytes,
        points,
    })
}
