"""What the black-box probes share (Python 3.11 stdlib only): a pure-Python Ed25519 (RFC 8032)
to sign hops and enrolments, canonical JSON, a release relay started on a temporary store, HTTP
from chosen loopback addresses, an enrolled host that signs its calls, and sealed push items."""

import base64
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time

# --------------------------------------------------------------------------------------------
# Ed25519 (RFC 8032, section 6), enough to sign hops and enrolments.
# --------------------------------------------------------------------------------------------

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _add(a, b):
    x1 = (a[1] - a[0]) * (b[1] - b[0]) % _P
    x2 = (a[1] + a[0]) * (b[1] + b[0]) % _P
    c = 2 * a[3] * b[3] * _D % _P
    d = 2 * a[2] * b[2] % _P
    e, f, g, h = x2 - x1, d - c, d + c, x2 + x1
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _mul(s, pt):
    q = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            q = _add(q, pt)
        pt = _add(pt, pt)
        s >>= 1
    return q


def _compress(pt):
    zinv = pow(pt[2], _P - 2, _P)
    x, y = pt[0] * zinv % _P, pt[1] * zinv % _P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")


def _recover_x(y, sign):
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * _SQRT_M1 % _P
    if (x & 1) != sign:
        x = _P - x
    return x


_GY = 4 * pow(5, _P - 2, _P) % _P
_GX = _recover_x(_GY, 0)
_G = (_GX, _GY, 1, _GX * _GY % _P)


class Key:
    """An Ed25519 host key."""

    def __init__(self):
        h = hashlib.sha512(secrets.token_bytes(32)).digest()
        self.a = (int.from_bytes(h[:32], "little") & ((1 << 254) - 8)) | (1 << 254)
        self.prefix = h[32:]
        self.public = _compress(_mul(self.a, _G))

    def b64(self):
        return base64.b64encode(self.public).decode()

    def sign(self, msg: bytes) -> str:
        r = int.from_bytes(hashlib.sha512(self.prefix + msg).digest(), "little") % _L
        big_r = _compress(_mul(r, _G))
        h = int.from_bytes(hashlib.sha512(big_r + self.public + msg).digest(), "little") % _L
        return base64.b64encode(big_r + int.to_bytes((r + h * self.a) % _L, 32, "little")).decode()


def canonical(v) -> str:
    """Canonical JSON as the relay writes it (sorted keys, JSON.stringify escapes; ASCII here)."""
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# The relay under probe, and HTTP from chosen loopback addresses.
# --------------------------------------------------------------------------------------------


class Relay:
    """A release relay on loopback with its metrics listener. `store`: a store directory of the
    caller's (kept after `stop`), else one in a temporary directory; `generous`: the push and
    enrolment windows opened wide (off to give those flags in `extra`); `env`: the relay's
    environment (default: the caller's)."""

    def __init__(self, binary, extra=(), enrol_per_minute=100000, store=None, env=None,
                 generous=True):
        self.dir = tempfile.mkdtemp(prefix="mbx-probe-")
        self.store = store or os.path.join(self.dir, "store")
        windows = ["--pushes-per-minute", "100000", "--enrol-per-minute", str(enrol_per_minute),
                   "--enrol-per-minute-v4-24", "100000"] if generous else []
        args = [binary, "serve", "--listen", "127.0.0.1:0", "--store-dir", self.store,
                "--metrics-listen", "127.0.0.1:0", *windows, *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)
        self.addr = self.metrics = None
        deadline = time.time() + 30
        while self.addr is None and time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("relay exited before listening")
            m = re.search(r"(\d+\.\d+\.\d+\.\d+):(\d+)", line)
            if m and line.startswith("metrics listening on"):
                self.metrics = (m.group(1), int(m.group(2)))
            elif m and line.startswith("listening on"):
                self.addr = (m.group(1), int(m.group(2)))
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def url(self, scheme="http"):
        return f"{scheme}://{self.addr[0]}:{self.addr[1]}"

    def mib(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) // 1024
        return 0

    def cpu_s(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, graceful=False):
        """Kill the relay (`graceful`: SIGTERM, as systemd stops it) and remove its temporary
        directory."""
        if graceful and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def request(at, method, path, body=b"", headers=(), src="127.0.0.1", timeout=30):
    """(status, body bytes, seconds) of one request from `src`."""
    t = time.monotonic()
    c = http.client.HTTPConnection(*at, timeout=timeout, source_address=(src, 0))
    try:
        hs = dict(headers)
        if body or method != "GET":
            hs.setdefault("content-type", "application/json")
        c.request(method, path, body=body, headers=hs)
        r = c.getresponse()
        data = r.read()
        return r.status, data, time.monotonic() - t
    finally:
        c.close()


class Host:
    def __init__(self, relay, name):
        self.relay, self.name, self.key = relay, name, Key()
        st, data, _ = request(relay.addr, "POST", "/v1/relay/challenge",
                              json.dumps({"host": name, "pubkey": self.key.b64()}).encode())
        assert st == 200, data
        stmt = {"v": 1, "challenge": json.loads(data)["challenge"], "host": name,
                "pubkey": self.key.b64(), "owner_fp": ""}
        body = {"host": name, "pubkey": self.key.b64(), "owner_fp": "",
                "sig": self.key.sign(canonical(stmt).encode())}
        st, data, _ = request(relay.addr, "POST", "/v1/relay/enrol", json.dumps(body).encode())
        assert st == 200, data

    def hop(self, method, path, body: bytes):
        ts = str(int(time.time() * 1000))
        signed = path if path.startswith("/v2/") else path.split("?")[0]
        text = body.decode()
        payload = canonical({"method": method, "path": signed, "ts": ts,
                             "body": f"{method}:{signed}:{ts}:{text}"})
        return [("x-mbx-host", self.name), ("x-mbx-key", self.key.b64()), ("x-mbx-ts", ts),
                ("x-mbx-sig", self.key.sign(payload.encode()))]

    def call(self, method, path, body=b"", src="127.0.0.1", timeout=30):
        return request(self.relay.addr, method, path, body, self.hop(method, path, body), src,
                       timeout)


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid():
    v = (int(time.time() * 1000) << 80) | int.from_bytes(secrets.token_bytes(10), "big")
    return "".join(_CROCKFORD[(v >> (5 * i)) & 31] for i in reversed(range(26)))


def envelope(sender, targets, size=None):
    """(id, wire text) of a sealed envelope from `sender` to `targets`, its keys in the order a
    JavaScript host writes them (not sorted), padded to `size` bytes when given."""
    iid = ulid()
    b = lambda n: base64.b64encode(secrets.token_bytes(n)).decode()
    cipher = b(48)
    ms = time.time()
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms)) + f".{int(ms * 1000) % 1000:03d}Z"
    env = {"v": 3, "id": iid, "ts": ts, "from": f"agent@{sender.name}",
           "to": [f"agent@{t.name}" for t in targets], "thread": iid, "reply_to": None,
           "kind": "message", "subject": "hello", "body": cipher, "needs_reply": False,
           "refs": [], "meta": {"mentions": [], "directives": [], "tags": [], "task_refs": []},
           "authority": None,
           "enc": {"v": 1, "alg": "x25519+xchacha20poly1305", "epk": b(32), "nonce": b(24),
                   "body": cipher}}
    wire = json.dumps(env, separators=(",", ":"))
    if size:
        env["pad"] = ""
        base = len(json.dumps(env, separators=(",", ":")))
        env["pad"] = "x" * (size - base)
        wire = json.dumps(env, separators=(",", ":"))
    return iid, wire


def push_item(item_id, targets, wire):
    """A v2 push item of kind envelope carrying `wire` to every target."""
    w64 = base64.b64encode(wire.encode()).decode()
    return {"kind": "envelope", "item_id": item_id,
            "targets": [{"host_pubkey": t.key.b64(), "wire_b64": w64} for t in targets]}


def envelope_item(sender, targets, size=None):
    """A sealed-envelope push item from `sender` to `targets` (wire padded to `size` bytes)."""
    iid, wire = envelope(sender, targets, size)
    return push_item(iid, targets, wire)
