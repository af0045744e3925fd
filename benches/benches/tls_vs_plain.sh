#!/bin/sh
# What TLS costs the relay: single-item pushes on keep-alive connections, https and plain http
# alternating (RUNS each, a fresh store per run), with the relay's own CPU per item from
# /proc/<pid>/stat (utime + stime over the whole bench run, enrolment included).
# Needs a release build (`cargo build --release -p mbx-relay -p relay-bench`) and openssl.
# Usage: benches/benches/tls_vs_plain.sh [RUNS] [ITEMS] [SENDERS]   (defaults 3 20000 64)
set -eu
RUNS=${1:-3}
ITEMS=${2:-20000}
SENDERS=${3:-64}
BIN=${BIN:-target/release}
TICK=$(getconf CLK_TCK)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# A CA and an ECDSA P-256 leaf for 127.0.0.1 (what an ACME CA commonly issues).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
    -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
    -keyout "$WORK/key.pem" -out "$WORK/leaf.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$WORK/ext"
openssl x509 -req -in "$WORK/leaf.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
    -days 2 -extfile "$WORK/ext" -out "$WORK/cert.pem" 2>/dev/null
chmod 600 "$WORK/key.pem"

B=1000000000000
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # $1 = https|http, $2 = run number
    store="$WORK/store-$1-$2"
    tls=""
    ca=""
    if [ "$1" = https ]; then
        tls="--tls-cert $WORK/cert.pem --tls-key $WORK/key.pem"
        ca="--ca $WORK/ca.pem"
    fi
    # shellcheck disable=SC2086
    "$BIN/mbx-relay" serve --listen 127.0.0.1:0 --store-dir "$store" $tls \
        --pushes-per-minute 4000000000 --enrol-per-minute 1000000 \
        --enrol-per-minute-v4-24 1000000 --enrol-per-minute-v6-48 1000000 \
        --max-connections-per-address 1024 --max-queue-items $B --max-queue-bytes $B \
        --max-sender-items $B --max-sender-bytes $B > "$WORK/out" 2> "$WORK/err" &
    pid=$!
    while ! grep -q '^listening on' "$WORK/out"; do sleep 0.05; done
    port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$WORK/out")
    before=$(cpu_ticks "$pid")
    # shellcheck disable=SC2086
    status=0
    json=$("$BIN/relay-bench" --url "$1://127.0.0.1:$port" $ca --senders "$SENDERS" \
        --targets 8 --items "$ITEMS" --batch 1 --item-bytes 1024 --json 2> "$WORK/bench.err") ||
        status=$?
    after=$(cpu_ticks "$pid")
    kill -TERM "$pid"
    wait "$pid" || true
    if [ "$status" -ne 0 ]; then
        echo "$1 run $2: bench failed ($status): $(tail -3 "$WORK/bench.err")"
        return 0
    fi
    rate=$(printf '%s' "$json" | grep -o '"items_per_s":[0-9.]*' | head -1 | cut -d: -f2)
    done_items=$(printf '%s' "$json" | grep -o '"items":[0-9]*' | sed -n 2p | cut -d: -f2)
    us=$(awk -v t=$((after - before)) -v hz="$TICK" -v n="$done_items" \
        'BEGIN { printf "%.0f", t / hz * 1e6 / n }')
    printf '%-5s run %s: %s items, %.0f items/s, relay CPU %s us/item\n' \
        "$1" "$2" "$done_items" "$rate" "$us"
}

i=1
while [ "$i" -le "$RUNS" ]; do
    run https "$i"
    run http "$i"
    i=$((i + 1))
done
