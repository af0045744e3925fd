#!/usr/bin/env python3
"""Black-box probes of issue 36's findings against a running mbx-relay (Python 3.11 stdlib only).

Each probe starts a fresh relay from the given binary (a temporary store, loopback, a private
listener), runs one finding's attack from the outside, prints the figure the issue reported and
PASS or FAIL against the bound docs/failure-behaviour.md documents, and stops the relay.

    cargo build --release -p mbx-relay
    python3 tools/probes/issue36.py --relay-bin target/release/mbx-relay            # all
    python3 tools/probes/issue36.py --relay-bin target/release/mbx-relay unread-pages

Findings: unread-pages (1), stalled-bodies (2), victim-key (3), deep-parse (4),
private-listener (5). Finding 6 (the PostgreSQL TLS default and `hostaddr`) is a code finding,
pinned by relay-pgstore's unit test `a_remote_hostaddr_behind_a_local_name_is_verified`.
The exit status is the number of probes that failed.

Hops are signed here with a small pure-Python Ed25519 (RFC 8032); loopback addresses 127.0.0.N
stand for distinct client addresses.
"""

import argparse
import json
import socket
import sys
import threading
import time

from probelib import Host, Key, Relay, envelope_item, request


def junk_hop(key_b64):
    return [("x-mbx-host", "attacker"), ("x-mbx-key", key_b64),
            ("x-mbx-ts", str(int(time.time() * 1000))), ("x-mbx-sig", Key().sign(b"junk"))]


def raw_connect(relay, src, at=None):
    s = socket.create_connection(at or relay.addr, timeout=30, source_address=(src, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def stalled_body(relay, src, hop, sent, declared=8 * 1024 * 1024):
    """A connection that declared `declared` bytes, sent `sent` of them and stalls."""
    s = raw_connect(relay, src)
    head = "POST /v2/relay/items HTTP/1.1\r\nhost: relay\r\ncontent-type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in hop)
    head += f"content-length: {declared}\r\n\r\n"
    try:
        s.sendall(head.encode() + b" " * sent)
    except OSError:
        pass
    return s


def answered_status(s, wait):
    """The status a held connection got within `wait` seconds (None: still held)."""
    s.settimeout(wait)
    try:
        got = s.recv(12)
        return int(got[9:12]) if len(got) >= 12 else 0
    except (socket.timeout, ValueError):
        return None
    except OSError:
        return 0


# docs/failure-behaviour.md: a key's share of the memory account (--max-body-bytes-per-key)
# and the fixed base the relay holds outside the account (its documented total is the account's
# 256 MiB plus this base).
KEY_SHARE_MIB = 32
BASE_MIB = 96


def verdict(name, ok, figure):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {figure}", flush=True)
    return ok


# --------------------------------------------------------------------------------------------
# The probes.
# --------------------------------------------------------------------------------------------


def unread_pages(binary):
    """Finding 1: two keys queue 16 x ~524 KB for themselves; 64 connections per key, from one
    address each, ask for a page and never read. Issue: VmHWM +1.0 GiB (64), +1.8 GiB (128)."""
    relay = Relay(binary)
    try:
        keys = [Host(relay, f"greedy{i}") for i in range(2)]
        for k in keys:
            for _ in range(2):
                items = [envelope_item(k, [k], 524_000) for _ in range(8)]
                st, data, _ = k.call("POST", "/v2/relay/items",
                                     json.dumps({"items": items}).encode())
                assert st == 200, data[:200]
        before = relay.mib("VmRSS")
        conns = []
        for i, k in enumerate(keys):
            for _ in range(64):
                s = raw_connect(relay, f"127.0.0.{2 + i}")
                path = "/v2/relay/items?after=0"
                req = f"GET {path} HTTP/1.1\r\nhost: relay\r\n"
                req += "".join(f"{h}: {v}\r\n" for h, v in k.hop("GET", path, b"")) + "\r\n"
                s.sendall(req.encode())
                conns.append(s)
        time.sleep(5)
        honest = Host(relay, "honest")
        st, _, took = honest.call("GET", "/v2/relay/items?after=0", src="127.0.0.9")
        hwm = relay.mib("VmHWM")
        for s in conns:
            s.close()
        bound = 2 * KEY_SHARE_MIB + BASE_MIB
        return verdict("unread-pages", hwm - before <= bound and st == 200,
                       f"128 unread pulls of 2 keys: VmHWM {hwm} MiB, +{hwm - before} MiB over "
                       f"VmRSS {before} MiB before (bound: the keys' shares, 2 x {KEY_SHARE_MIB} "
                       f"MiB, plus the {BASE_MIB} MiB base: {bound} MiB); another key's pull "
                       f"{st} in {took * 1000:.0f} ms")
    finally:
        relay.stop()


def stalled_bodies(binary):
    """Finding 2: 8 live keys with junk signatures, 8 addresses x 4 bodies declaring 8 MiB,
    6.1 MB sent, then silence. Issue: an honest push 503 at 5 s and 25 s; bodies held ~25 min."""
    relay = Relay(binary)
    try:
        honest, target = Host(relay, "honest"), Host(relay, "target")
        keys = [Host(relay, f"junk{i}") for i in range(8)]
        started = time.monotonic()
        held = []
        threads = []

        def attack(i, k):
            for _ in range(4):
                held.append(stalled_body(relay, f"127.0.0.{10 + i}", junk_hop(k.key.b64()),
                                         6_100_000))

        for i, k in enumerate(keys):
            t = threading.Thread(target=attack, args=(i, k))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        sent_in = time.monotonic() - started
        figures, ok = [], True
        for at in (1, 5, 10):
            time.sleep(max(0, started + at - time.monotonic()))
            body = json.dumps({"items": [envelope_item(honest, [target])]}).encode()
            st, _, took = honest.call("POST", "/v2/relay/items", body, src="127.0.0.50")
            figures.append(f"{st} in {took * 1000:.0f} ms at {at} s")
            ok &= st == 200 and took < 1.0
        # Every stalled body is cut within a pacing window or two of its stall (issue: ~25 min).
        time.sleep(max(0, started + 15 - time.monotonic()))
        still = sum(answered_status(s, 0.05) is None for s in held)
        for s in held:
            s.close()
        ok &= still == 0
        return verdict("stalled-bodies", ok,
                       f"32 stalled 8 MiB bodies (sent in {sent_in:.1f} s); honest push "
                       f"{', '.join(figures)}; bodies still held 15 s after the start: {still}")
    finally:
        relay.stop()


def victim_key(binary):
    """Finding 3: 4 junk-signed 6.1 MB bodies naming the victim's key, from one address.
    Issue: the victim's own push and ack 429 for the whole minute."""
    relay = Relay(binary)
    try:
        victim, target = Host(relay, "victim"), Host(relay, "target")
        held = [stalled_body(relay, "127.0.0.20", junk_hop(victim.key.b64()), 6_100_000)
                for _ in range(4)]
        time.sleep(1)
        body = json.dumps({"items": [envelope_item(victim, [target])]}).encode()
        push, _, _ = victim.call("POST", "/v2/relay/items", body, src="127.0.0.21")
        st, data, _ = victim.call("GET", "/v2/relay/info", src="127.0.0.21")
        epoch = json.loads(data).get("epoch", "") if st == 200 else ""
        ack, data, _ = victim.call("POST", "/v2/relay/ack",
                                   json.dumps({"epoch": epoch, "through": 0}).encode(),
                                   src="127.0.0.21")
        for s in held:
            s.close()
        return verdict("victim-key", push == 200 and ack == 200,
                       f"4 x 6.1 MB junk bodies naming the victim's key: its push {push}, "
                       f"its ack {ack}")
    finally:
        relay.stop()


def deep_body(n):
    body = b'{"items":[{"item_id":0}],"pad":[0' + b",0" * ((n - 40) // 2) + b"]}"
    return body + b" " * (n - len(body))


def deep_parse(binary):
    """Finding 4: a signed 8 MiB push of a deep array. Issue: one request VmHWM +265 MiB, waves
    of 8 +322..479 MiB, 535-640 ms of CPU each on an async worker, honest info up to 746 ms."""
    relay = Relay(binary)
    try:
        pusher = Host(relay, "bloater")
        body = deep_body(8 * 1024 * 1024)
        before, cpu0 = relay.mib("VmRSS"), relay.cpu_s()
        st, data, took = pusher.call("POST", "/v2/relay/items", body, src="127.0.0.30")
        one = relay.mib("VmHWM") - before
        cpu_one = relay.cpu_s() - cpu0
        # A wave of 8 from 8 addresses (each its own key), honest info sampled meanwhile.
        wave_keys = [Host(relay, f"bloat{i}") for i in range(8)]
        statuses, lat = [], []
        stop = threading.Event()

        def info():
            while not stop.is_set():
                _, _, t = request(relay.addr, "GET", "/v2/relay/info", src="127.0.0.60")
                lat.append(t)
                time.sleep(0.05)

        def push(i, k):
            statuses.append(k.call("POST", "/v2/relay/items", body, src=f"127.0.0.{31 + i}")[0])

        sampler = threading.Thread(target=info)
        sampler.start()
        wave = [threading.Thread(target=push, args=(i, k)) for i, k in enumerate(wave_keys)]
        for t in wave:
            t.start()
        for t in wave:
            t.join()
        stop.set()
        sampler.join()
        waves = relay.mib("VmHWM") - before
        # An ack body past its 1 MiB cap.
        ack, _, _ = pusher.call("POST", "/v2/relay/ack",
                                b'{"epoch":"x","through":0,"pad":[' + b"0," * 600_000 + b"0]}",
                                src="127.0.0.40")
        ok = st in (429, 503) and one <= 32 and waves <= 96 and max(lat) < 0.25 and ack == 413
        ok &= all(s in (429, 503) for s in statuses)
        return verdict("deep-parse", ok,
                       f"one 8 MiB deep push: {st} in {took * 1000:.0f} ms, VmHWM +{one} MiB, "
                       f"relay CPU {cpu_one * 1000:.0f} ms; a wave of 8: {sorted(statuses)}, "
                       f"VmHWM +{waves} MiB; honest info max {max(lat) * 1000:.0f} ms over "
                       f"{len(lat)}; a 1.2 MB ack: {ack}")
    finally:
        relay.stop()


def private_listener(binary):
    """Finding 5: 8 unfinished heads from one address held every slot of --metrics-listen.
    Issue: the scraper's /status 503 25 of 25 times."""
    relay = Relay(binary)
    try:
        heads = []
        for _ in range(8):
            try:
                s = raw_connect(relay, "127.0.0.70", relay.metrics)
                s.sendall(b"GET /status HTTP/1.1\r\nhost: x\r\n")
                heads.append(s)
            except OSError:
                pass
        time.sleep(0.3)
        served = 0
        for _ in range(25):
            st, _, _ = request(relay.metrics, "GET", "/status", src="127.0.0.71", timeout=5)
            served += st == 200
        for s in heads:
            s.close()
        return verdict("private-listener", served == 25,
                       f"8 unfinished heads from one address: the scraper's /status 200 "
                       f"{served} of 25 times")
    finally:
        relay.stop()


PROBES = {
    "unread-pages": unread_pages,
    "stalled-bodies": stalled_bodies,
    "victim-key": victim_key,
    "deep-parse": deep_parse,
    "private-listener": private_listener,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--relay-bin", required=True, help="the mbx-relay binary to probe")
    ap.add_argument("probes", nargs="*", choices=[*PROBES, []], help="default: all")
    args = ap.parse_args()
    failed = 0
    for name in args.probes or PROBES:
        try:
            failed += not PROBES[name](args.relay_bin)
        except Exception as e:  # a probe that cannot run is a failure, said as such
            failed += 1
            print(f"FAIL {name}: the probe could not run: {e!r}", flush=True)
    sys.exit(failed)


if __name__ == "__main__":
    main()
