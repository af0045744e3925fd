//! Growth bench (issue 40): how the relay's cost grows as its store fills. Starts the release
//! `mbx-relay serve` on a fresh store (fjall, or a throwaway PostgreSQL cluster as the tests
//! start one) and drives `relay-bench --round-items` against it: enrol the hosts, then rounds of
//! batched pushes (8 senders, batches of 100 × 1 KiB, no drain) onto the growing queue. After
//! every round it reads the relay's own figures from `/proc`: CPU per item, resident memory,
//! bytes written to disk per byte accepted (write amplification), and the store's bytes on
//! disk. At the end, with everything queued: resident memory at rest, an online backup and its
//! verify (`relay-tool`), restart time after kill -9, a retention sweep that expires the first
//! round's items (a tenth; the relay restarted under libfaketime a retention period later; the
//! later rounds were pushed after one restart with a longer retention, so they stay out of it
//! however long it runs), and a full drain. Before that, on another fresh store, the empty-store baseline: one round's
//! items over a round's share of the hosts (the same items per queue), drained at once.
//!
//! Output: one JSON document (stdout and `growth-<store>.json`), a table on stderr, and an SVG
//! plot of items/s and relay CPU per item against store size (`growth-<store>.svg`), in
//! MBX_GROWTH_OUT (default `target/release/growth/`).
//!
//! Run: `cargo build --release -p mbx-relay -p relay-tool && cargo bench -p relay-bench --bench
//! growth`. Knobs (environment): MBX_GROWTH_ITEMS (default 10000000), MBX_GROWTH_HOSTS (enrolled
//! target hosts, default 100000), MBX_GROWTH_ROUNDS (default 10), MBX_GROWTH_STORE (`fjall`, the
//! default, `postgres` or `both`), MBX_GROWTH_DIR (where the stores live, default the temp dir),
//! MBX_GROWTH_OUT, MBX_GROWTH_SKIP_BASELINE=1, MBX_GROWTH_KEEP=1 (keep the stores and logs),
//! MBX_GROWTH_ROUNDS_ONLY=1 (no backup, restart, sweep or drain), MBX_GROWTH_FAKETIME (libfaketime's
//! library, default the Debian path), MBX_PG_BINDIR (PostgreSQL's binaries), MBX_BENCH_RELAY_BIN
//! (another build of the relay).

mod plot;
mod run;

use std::path::PathBuf;

use relay_testkit::cluster::PgCluster;

/// What a run is asked for (environment knobs).
pub(crate) struct Config {
    pub(crate) items: u64,
    pub(crate) hosts: u64,
    pub(crate) rounds: u64,
    pub(crate) senders: u64,
    pub(crate) batch: u64,
    pub(crate) dir: PathBuf,
    pub(crate) out: PathBuf,
    pub(crate) baseline: bool,
    /// Keep the stores and their logs (MBX_GROWTH_KEEP=1).
    pub(crate) keep: bool,
    /// Only the rounds: no backup, restart, sweep or drain at the end (MBX_GROWTH_ROUNDS_ONLY=1,
    /// for comparing builds or settings on the growth curve alone).
    pub(crate) rounds_only: bool,
    pub(crate) faketime: Option<PathBuf>,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace(['_', ','], "").parse().ok())
        .unwrap_or(default)
}

/// libfaketime's multi-threaded library, where Debian's `faketime` package puts it.
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

fn config() -> Config {
    let faketime = std::env::var_os("MBX_GROWTH_FAKETIME")
        .map_or_else(|| PathBuf::from(FAKETIME_LIB), PathBuf::from);
    Config {
        items: env_u64("MBX_GROWTH_ITEMS", 10_000_000).max(1),
        hosts: env_u64("MBX_GROWTH_HOSTS", 100_000).max(1),
        rounds: env_u64("MBX_GROWTH_ROUNDS", 10).max(1),
        senders: 8,
        batch: 100,
        dir: std::env::var_os("MBX_GROWTH_DIR").map_or_else(std::env::temp_dir, PathBuf::from),
        out: std::env::var_os("MBX_GROWTH_OUT")
            .map_or_else(|| relay_testkit::bins::dir().join("growth"), PathBuf::from),
        baseline: std::env::var("MBX_GROWTH_SKIP_BASELINE").map_or(true, |v| v != "1"),
        keep: std::env::var("MBX_GROWTH_KEEP").is_ok_and(|v| v == "1"),
        rounds_only: std::env::var("MBX_GROWTH_ROUNDS_ONLY").is_ok_and(|v| v == "1"),
        faketime: faketime.is_file().then_some(faketime),
    }
}

fn main() -> Result<(), String> {
    let cfg = config();
    let store = std::env::var("MBX_GROWTH_STORE").unwrap_or_else(|_| "fjall".into());
    let kinds: &[&str] = match store.as_str() {
        "fjall" => &["fjall"],
        "postgres" => &["postgres"],
        "both" => &["fjall", "postgres"],
        other => {
            return Err(format!(
                "MBX_GROWTH_STORE: `{other}` is not fjall, postgres or both"
            ))
        }
    };
    std::fs::create_dir_all(&cfg.out).map_err(|e| format!("{}: {e}", cfg.out.display()))?;
    if cfg.faketime.is_none() {
        eprintln!("growth: libfaketime not found (apt-get install faketime): no retention sweep");
    }
    let cluster = if kinds.contains(&"postgres") {
        let bindir = relay_testkit::cluster::find_bindir()
            .ok_or("PostgreSQL server binaries not found (set MBX_PG_BINDIR)")?;
        Some(PgCluster::start(&bindir)?)
    } else {
        None
    };
    let mut docs = Vec::new();
    for kind in kinds {
        let pg = (*kind == "postgres").then_some(()).and(cluster.as_ref());
        let doc = run::store(&cfg, kind, pg)?;
        let base = cfg.out.join(format!("growth-{kind}"));
        let json = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(base.with_extension("json"), &json).map_err(|e| e.to_string())?;
        std::fs::write(base.with_extension("svg"), plot::render(&doc))
            .map_err(|e| e.to_string())?;
        eprintln!("{}", run::table(&doc));
        eprintln!("growth: wrote {0}.json and {0}.svg", base.display());
        docs.push(doc);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&docs).map_err(|e| e.to_string())?
    );
    Ok(())
}
