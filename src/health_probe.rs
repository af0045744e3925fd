//! `mbx-relay health`: exit 0 when the relay's `GET /health` answers 200, else 1 with one line
//! on stderr; for container health checks (a slim image carries no curl or wget).

use std::time::Duration;

/// Longest the probe waits for the whole answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Flags of `mbx-relay health`.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// The relay's health URL.
    #[arg(long, default_value = "http://127.0.0.1:8787/health")]
    pub url: String,
}

/// Ask `args.url` once.
///
/// # Errors
/// A line saying why the relay is not healthy (no answer, or the status it gave).
pub fn probe(args: &HealthArgs) -> Result<(), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(PROBE_TIMEOUT))
        .build()
        .into();
    let r = agent
        .get(&args.url)
        .call()
        .map_err(|e| format!("{}: no answer: {e}", args.url))?;
    match r.status().as_u16() {
        200 => Ok(()),
        s => Err(format!("{}: answered {s}", args.url)),
    }
}
