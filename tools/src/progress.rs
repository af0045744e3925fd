//! Progress display on stderr, drawn only when stderr is a terminal (scripts and cron get none).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

fn on_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// A byte counter of unknown total (a backup being streamed).
pub(crate) fn bytes(what: &'static str) -> ProgressBar {
    if !on_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner().with_message(what);
    let style = ProgressStyle::with_template(
        "{spinner} {msg}: {bytes} ({binary_bytes_per_sec}, {elapsed})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_spinner());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A byte count against a known (estimated) total, with a bar and the time left: a backup of
/// a store opened here, whose figures give the size before it starts.
pub(crate) fn bytes_of(what: &'static str, total: u64) -> ProgressBar {
    if !on_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total.max(1)).with_message(what);
    let style = ProgressStyle::with_template(
        "{msg} [{wide_bar}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, {eta} left)",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Move `bar` to `done`, growing its total when the estimate was short.
pub(crate) fn advance(bar: &ProgressBar, done: u64) {
    if bar.length().is_some_and(|len| done > len) {
        bar.set_length(done);
    }
    bar.set_position(done);
}

/// A step without a byte count (verifying, building the restored store), with elapsed time.
pub(crate) fn step(what: String) -> ProgressBar {
    if !on_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner().with_message(what);
    let style = ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A writer that counts the bytes passing through it on `bar`.
pub(crate) struct Counting<'a, W: Write> {
    pub inner: W,
    pub bar: &'a ProgressBar,
    pub written: u64,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        self.bar.set_position(self.written);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
