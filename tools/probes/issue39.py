#!/usr/bin/env python3
"""Black-box checks of issue 39's items 1-8 against release binaries (Python 3.11 stdlib + openssl).

Each item runs the operator's steps from the outside (fresh temporary stores, loopback, no
MBX_* variable from the caller's environment) and prints PASS or FAIL with what it saw.

    cargo build --release -p mbx-relay -p relay-tool -p relay-bench
    python3 tools/probes/issue39.py --bin-dir target/release          # all items
    python3 tools/probes/issue39.py --bin-dir target/release 1 5      # some

Items: 1 restore without the key, 2 misspelt variables, 3 health over TLS, 4 relay-bench exit
codes, 5 broken pipes, 6 exit codes and JSON errors, 7 host doctor beside host run, 8 backup to
stdout. The exit status is the number of items that failed.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probelib  # noqa: E402 (next to this file)

BIN = {}
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("MBX_")}


def run(args, env=None, timeout=120, stdout=subprocess.PIPE, cwd=None, stdin=subprocess.DEVNULL):
    e = dict(CLEAN_ENV)
    e.update(env or {})
    return subprocess.run(args, env=e, stdout=stdout, stderr=subprocess.PIPE, timeout=timeout,
                          cwd=cwd, stdin=stdin)


def text(b):
    return (b or b"").decode("utf-8", "replace")


def start(store, extra=(), env=None):
    """A relay on `store` (probelib.Relay: loopback, a metrics listener), with no MBX_* variable
    but `env`'s; `stop(graceful=True)` ends it as systemd does and keeps the store."""
    e = dict(CLEAN_ENV)
    e.update(env or {})
    return probelib.Relay(BIN["mbx-relay"], extra, store=store, env=e, generous=False)


def hostport(addr):
    return f"{addr[0]}:{addr[1]}"


def keygen():
    out = run([BIN["mbx-relay"], "keygen", "--json"])
    return json.loads(out.stdout)


# ------------------------------------------------------------------------------------------------


def item1(tmp):
    """A restored store started without its key: exit 2, no key written, --check agrees."""
    orig, restored, bak = f"{tmp}/orig", f"{tmp}/restored", f"{tmp}/b.mbxbak"
    r = start(orig)
    r.stop(graceful=True)
    seed = open(f"{orig}/relay.key").read().strip()
    b = run([BIN["relay-tool"], "backup", "--store-dir", orig, bak])
    if b.returncode != 0:
        return False, f"backup exit {b.returncode}: {text(b.stderr)}"
    rs = run([BIN["relay-tool"], "restore", "--store-dir", restored, bak])
    if rs.returncode != 0:
        return False, f"restore exit {rs.returncode}: {text(rs.stderr)}"
    os.remove(f"{restored}/relay.key") if os.path.exists(f"{restored}/relay.key") else None
    check = run([BIN["mbx-relay"], "serve", "--check", "--store-dir", restored])
    serve = run([BIN["mbx-relay"], "serve", "--store-dir", restored, "--listen", "127.0.0.1:0"],
                timeout=60)
    key_left = os.path.exists(f"{restored}/relay.key")
    if seed.startswith("{"):
        seed = json.loads(seed)["privateKey"]
    good = run([BIN["mbx-relay"], "serve", "--check", "--store-dir", restored],
               env={"MBX_RELAY_KEY": seed})
    seen = (f"--check exit {check.returncode}, serve exit {serve.returncode}, key written: "
            f"{key_left}, --check with MBX_RELAY_KEY exit {good.returncode}; serve said: "
            f"{text(serve.stderr).strip().splitlines()[-1] if serve.stderr else ''}")
    ok = (check.returncode == 2 and serve.returncode == 2 and not key_left
          and good.returncode == 0 and "MBX_RELAY_KEY" in text(serve.stderr))
    return ok, seen


def item2(tmp):
    """Misspelt MBX_RELAY_* variables refused by serve and --check, with a did-you-mean."""
    env = {"MBX_RELAY_LISTN": "127.0.0.1:0", "MBX_RELAY_MAX_QUEUE_ITEM": "5"}
    store = f"{tmp}/s"
    check = run([BIN["mbx-relay"], "serve", "--check", "--store-dir", store], env=env)
    serve = run([BIN["mbx-relay"], "serve", "--store-dir", store], env=env, timeout=60)
    said = text(check.stderr)
    ok = (check.returncode == 2 and serve.returncode == 2 and "MBX_RELAY_LISTEN" in said
          and "MBX_RELAY_MAX_QUEUE_ITEMS" in text(serve.stderr) and not os.path.exists(store))
    return ok, (f"--check exit {check.returncode}, serve exit {serve.returncode}, store created: "
                f"{os.path.exists(store)}; said: {said.strip()[:300]}")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def item3(tmp):
    """health --ca checks a TLS relay on a private CA; a refusal is said in words."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=probe CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=keyCertSign",
            cwd=tmp)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1", cwd=tmp)
    with open(f"{tmp}/ext.cnf", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "ext.cnf", cwd=tmp)
    os.chmod(f"{tmp}/leaf.key", 0o600)
    os.chmod(f"{tmp}/ca.key", 0o600)
    r = start(f"{tmp}/s", ["--tls-cert", f"{tmp}/leaf.pem", "--tls-key", f"{tmp}/leaf.key"])
    try:
        url = f"{r.url('https')}/health"
        with_ca = run([BIN["mbx-relay"], "health", "--url", url, "--ca", f"{tmp}/ca.pem"])
        without = run([BIN["mbx-relay"], "health", "--url", url])
    finally:
        r.stop(graceful=True)
    # The CA certificate served as the relay's own (the CaUsedAsEndEntity).
    r = start(f"{tmp}/s2", ["--tls-cert", f"{tmp}/ca.pem", "--tls-key", f"{tmp}/ca.key"])
    try:
        ca_as_leaf = run([BIN["mbx-relay"], "health", "--url", f"{r.url('https')}/health",
                          "--ca", f"{tmp}/ca.pem"])
    finally:
        r.stop(graceful=True)
    raw = re.compile(r"Other\(|OtherError|CaUsedAsEndEntity|UnknownIssuer")
    said = text(without.stderr).strip() + " | " + text(ca_as_leaf.stderr).strip()
    ok = (with_ca.returncode == 0 and without.returncode == 1 and ca_as_leaf.returncode == 1
          and not raw.search(said) and "certificate" in said)
    return ok, (f"--ca exit {with_ca.returncode}; no --ca exit {without.returncode}; CA as the "
                f"server certificate exit {ca_as_leaf.returncode}; said: {said[:400]}")


def item4(tmp):
    """relay-bench: 2 for usage, 1 unreachable, 1 when a request failed, 0 when all succeed."""
    bench = BIN["relay-bench"]
    usage = run([bench, "--no-such-flag"])
    unreachable = run([bench, "--url", "http://127.0.0.1:9", "--items", "10"], timeout=60)
    r = start(f"{tmp}/s", ["--pushes-per-minute", "2"])
    try:
        failing = run([bench, "--url", r.url(), "--senders", "1", "--targets", "2",
                       "--items", "400", "--batch", "50"], timeout=300)
    finally:
        r.stop(graceful=True)
    r = start(f"{tmp}/s2")
    try:
        good = run([bench, "--url", r.url(), "--senders", "2", "--targets", "2",
                    "--items", "200", "--batch", "50"], timeout=300)
    finally:
        r.stop(graceful=True)
    ok = (usage.returncode == 2 and unreachable.returncode == 1 and failing.returncode == 1
          and good.returncode == 0)
    return ok, (f"usage {usage.returncode}, unreachable {unreachable.returncode}, a run with "
                f"refused pushes {failing.returncode}, a clean run {good.returncode}")


def closed_stdout(args, env=None):
    """Run with stdout a pipe nobody reads (as `| head -0`); (returncode, stderr)."""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        p = run(args, env=env, stdout=wr, timeout=120)
    finally:
        os.close(wr)
    return p.returncode, text(p.stderr)


def host(dir_, *args, env=None, timeout=120):
    return run([BIN["mbx-relay"], "host", "--dir", dir_, *args], env=env, timeout=timeout)


def two_hosts(tmp, relay):
    """alice and bob enrolled on `relay`, peers of each other; bob received one message."""
    url = relay.url()
    keys = {}
    for name in ("alice", "bob"):
        d = f"{tmp}/{name}"
        out = host(d, "init", "--name", name, "--json")
        keys[name] = json.loads(out.stdout)["pubkey"]
        host(d, "relay", "set", url)
    host(f"{tmp}/alice", "peer", "add", "bob", keys["bob"])
    host(f"{tmp}/bob", "peer", "add", "alice", keys["alice"])
    host(f"{tmp}/bob", "sync")
    host(f"{tmp}/alice", "send", "--to", "bob", "--subject", "hi", "--body", "hello")
    host(f"{tmp}/alice", "sync")
    host(f"{tmp}/bob", "sync")
    return f"{tmp}/alice", f"{tmp}/bob"


def item5(tmp):
    """Broken pipes end quietly (SIGPIPE, as cat), never a panic."""
    r = start(f"{tmp}/s")
    try:
        alice, bob = two_hosts(tmp, r)
        results = {
            "relay-tool stats": closed_stdout([BIN["relay-tool"], "stats", "--store-dir", f"{tmp}/s"]),
            "host status": closed_stdout([BIN["mbx-relay"], "host", "--dir", alice, "status"]),
            "host inbox": closed_stdout([BIN["mbx-relay"], "host", "--dir", bob, "inbox"]),
        }
        run([BIN["relay-tool"], "backup", "--store-dir", f"{tmp}/s", f"{tmp}/b.mbxbak"])
    finally:
        r.stop(graceful=True)
    results["relay-tool verify FILE"] = closed_stdout([BIN["relay-tool"], "verify", f"{tmp}/b.mbxbak"])
    bad = {k: v for k, v in results.items()
           if v[0] != -signal.SIGPIPE or "panicked" in v[1] or v[1].strip()}
    seen = ", ".join(f"{k}: {v[0]}" for k, v in results.items())
    return not bad, seen + (f"; wrong: {bad}" if bad else " (killed by SIGPIPE, nothing on stderr)")


def item6(tmp):
    """One exit-code scheme and one JSON error shape."""
    seen, ok = [], True
    r = start(f"{tmp}/s")
    try:
        in_use = run([BIN["mbx-relay"], "serve", "--store-dir", f"{tmp}/s", "--listen", "127.0.0.1:0"],
                     timeout=60)
    finally:
        r.stop(graceful=True)
    other = keygen()
    wrong_key = run([BIN["mbx-relay"], "serve", "--store-dir", f"{tmp}/s", "--listen", "127.0.0.1:0"],
                    env={"MBX_RELAY_KEY": other["seed"]}, timeout=60)
    revoke = run([BIN["relay-tool"], "revoke", "1", "--store-dir", f"{tmp}/s"])
    jerr = run([BIN["relay-tool"], "stats", "--store-dir", f"{tmp}/nope", "--json"])
    herr = host(f"{tmp}/nohost", "status", "--json")
    checks = [
        ("serve on a store in use", in_use.returncode, 4),
        ("serve with another key", wrong_key.returncode, 2),
        ("relay-tool revoke 1", revoke.returncode, 2),
    ]
    for name, got, want in checks:
        seen.append(f"{name}: {got}")
        ok &= got == want
    for name, p in (("relay-tool stats --json (no store)", jerr), ("host status --json (no dir)", herr)):
        try:
            v = json.loads(p.stdout)
            good = set(v) == {"error", "exit_code"} and v["exit_code"] == p.returncode != 0
        except ValueError:
            good = False
        seen.append(f"{name}: exit {p.returncode}, stdout {text(p.stdout).strip()[:120]}")
        ok &= good
    ok &= {"seed", "fingerprint"} <= set(other)
    seen.append(f"mbx-relay keygen --json: {sorted(other)}")
    return ok, "; ".join(seen)


def item7(tmp):
    """host doctor runs while host run is up; the daemon's log lines carry their time."""
    r = start(f"{tmp}/s")
    daemon = None
    try:
        alice, _bob = two_hosts(tmp, r)
        e = dict(CLEAN_ENV)
        daemon = subprocess.Popen([BIN["mbx-relay"], "host", "--dir", alice, "run"], env=e,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and not os.path.exists(f"{alice}/daemon.sock"):
            time.sleep(0.2)
        time.sleep(1)
        doctor = host(alice, "doctor")
    finally:
        if daemon:
            daemon.send_signal(signal.SIGTERM)
            try:
                _, err = daemon.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                _, err = daemon.communicate()
        r.stop(graceful=True)
    lines = [l for l in text(err).splitlines() if l.strip()]
    stamped = [l for l in lines if re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", l)]
    out = text(doctor.stdout) + text(doctor.stderr)
    ok = (doctor.returncode == 0 and "stop it" not in out and lines
          and len(stamped) == len(lines))
    return ok, (f"doctor exit {doctor.returncode} beside the daemon ({len(out.splitlines())} lines"
                f"{', refused' if 'stop it' in out else ''}); daemon log lines {len(lines)}, "
                f"timestamped {len(stamped)}: {lines[0][:80] if lines else ''}")


def item8(tmp):
    """backup - streams to stdout (no file named -), verifies, and counts as a backup."""
    store = f"{tmp}/s"
    r = start(store)
    try:
        with open(f"{tmp}/stream.mbxbak", "wb") as f:
            online = run([BIN["relay-tool"], "backup", "--store-dir", store, "-"], stdout=f, cwd=tmp)
        dash = os.path.exists(f"{tmp}/-")
        verify = run([BIN["relay-tool"], "verify", f"{tmp}/stream.mbxbak"])
        last = None
        deadline = time.time() + 40
        while time.time() < deadline:
            body = urllib.request.urlopen(f"http://{hostport(r.metrics)}/metrics", timeout=10).read().decode()
            m = re.search(r"^mbx_relay_last_backup_timestamp_seconds\S* (\S+)$", body, re.M)
            last = float(m.group(1)) if m else None
            if last:
                break
            time.sleep(2)
    finally:
        r.stop(graceful=True)
    with open(f"{tmp}/offline.mbxbak", "wb") as f:
        offline = run([BIN["relay-tool"], "backup", "--store-dir", store, "-"], stdout=f, cwd=tmp)
    verify2 = run([BIN["relay-tool"], "verify", f"{tmp}/offline.mbxbak"])
    ok = (online.returncode == 0 and not dash and verify.returncode == 0 and last
          and abs(last - time.time()) < 600 and offline.returncode == 0 and verify2.returncode == 0)
    return ok, (f"online backup - exit {online.returncode}, file named '-': {dash}, the stream "
                f"verifies: {verify.returncode == 0}, last-backup metric {last}; offline backup - "
                f"exit {offline.returncode}, verifies: {verify2.returncode == 0}; stderr: "
                f"{text(online.stderr).strip()[:120]}")


ITEMS = {1: item1, 2: item2, 3: item3, 4: item4, 5: item5, 6: item6, 7: item7, 8: item8}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("items", nargs="*", type=int)
    a = ap.parse_args()
    for b in ("mbx-relay", "relay-tool", "relay-bench"):
        BIN[b] = os.path.abspath(os.path.join(a.bin_dir, b))
    version = text(run([BIN["mbx-relay"], "--version"]).stdout).strip()
    print(f"{version}; {BIN['mbx-relay']}")
    failed = 0
    for n in a.items or sorted(ITEMS):
        with tempfile.TemporaryDirectory(prefix=f"issue39-{n}-") as tmp:
            started = time.time()
            try:
                ok, seen = ITEMS[n](tmp)
            except Exception as e:  # a probe that breaks is a failure, said as such
                ok, seen = False, f"probe error: {e!r}"
            failed += not ok
            print(f"item {n}: {'PASS' if ok else 'FAIL'} ({time.time() - started:.1f} s) {seen}",
                  flush=True)
    sys.exit(failed)


if __name__ == "__main__":
    main()
