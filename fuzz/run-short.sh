#!/usr/bin/env sh
# Short fuzz run: every target for SECONDS (default 30) each, one after another, at low priority.
# Not part of the default test command (needs cargo-fuzz and nightly flags; see README.md).
# Usage: fuzz/run-short.sh [SECONDS] [TARGET...]
set -eu
cd "$(dirname "$0")"
secs="${1:-30}"
[ $# -gt 0 ] && shift
targets="${*:-bodies hop shapes canonical backup}"
export RUSTC_BOOTSTRAP=1
nice -n 19 cargo fuzz build -a
for t in $targets; do
    work="target/corpus-work/$t"
    mkdir -p "$work"
    echo "== $t: ${secs}s"
    # New inputs go to the work corpus (ignored by git); corpus/$t holds the committed seeds.
    nice -n 19 cargo fuzz run -a "$t" "$work" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=512 -malloc_limit_mb=512 -max_len=65536 \
        -dict=dict/json.dict -print_final_stats=1
done
