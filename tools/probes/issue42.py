#!/usr/bin/env python3
"""Black-box check of issue 42's reference behaviours against a running mbx-relay (Python 3.11
stdlib only): each case sends what a host would and compares status and whole answer with the
reference relay's, as ../shared/PROTOCOL.md (corrected 2026-12-03) and docs/protocol.md state it.

    cargo build --release -p mbx-relay
    python3 tools/probes/issue42.py --relay-bin target/release/mbx-relay

Cases: 1 epoch codes (ack EPOCH / BAD_ACK, pull 409), 2 rotation refusal texts, 3 an unsigned
sender list, 4 v1 envelopes stored as sent, 5 item_id "" for a non-string id, 6 the enrolment
rate text, 7 lenient after/limit/cursor, and the two deliberate differences (unknown routes 404,
a non-integer ack 400). Prints PASS or FAIL per check; the exit status is the number that failed.
"""

import argparse
import base64
import json
import sys
import time

from probelib import Host, Key, Relay, canonical, envelope, push_item, request

EPOCH_TEXT = "relay epoch changed: pull again from 0"
failed = 0


def check(name, got, want):
    """PASS when `got` equals `want`; prints both on a failure."""
    global failed
    ok = got == want
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok else f": got {got!r}, want {want!r}"),
          flush=True)


def call(host, method, path, body=None):
    """(status, parsed answer) of a signed call."""
    raw = b"" if body is None else json.dumps(body).encode()
    st, data, _ = host.call(method, path, raw)
    return st, json.loads(data)


def push(sender, items):
    st, ans = call(sender, "POST", "/v2/relay/items", {"items": items})
    assert st == 200, ans
    return ans["results"]


def epoch_and_head(host):
    st, page = call(host, "GET", "/v2/relay/items?after=0")
    assert st == 200, page
    return page["epoch"], page["head_seq"]


def epoch_codes(relay):
    s, t = Host(relay, "sender1"), Host(relay, "target1")
    push(s, [_item(s, t)])
    epoch, head = epoch_and_head(t)
    for q in ("epoch=stale", "epoch="):
        check(f"1 pull ?{q} answers 409 with the reference text, no code",
              call(t, "GET", f"/v2/relay/items?after=0&{q}"),
              (409, {"error": EPOCH_TEXT, "epoch": epoch}))
    want = (409, {"error": EPOCH_TEXT, "code": "EPOCH", "epoch": epoch, "head_seq": head})
    check("1 ack without epoch answers 409 EPOCH with head_seq",
          call(t, "POST", "/v2/relay/ack", {"through": 0}), want)
    check("1 ack with a wrong epoch answers 409 EPOCH with head_seq",
          call(t, "POST", "/v2/relay/ack", {"epoch": "stale", "through": 0}), want)
    check("1 ack beyond head_seq answers 400 BAD_ACK with the reference text",
          call(t, "POST", "/v2/relay/ack", {"epoch": epoch, "through": head + 5}),
          (400, {"error": "ack beyond the last allocated seq: treat as an epoch change",
                 "code": "BAD_ACK", "epoch": epoch, "head_seq": head}))
    st, ans = call(t, "POST", "/v2/relay/ack", {"epoch": epoch, "through": 0.5})
    check("deliberate: a non-integer through answers 400 BAD_ACK and deletes nothing",
          (st, ans.get("code"), epoch_and_head(t)[1], len(pull_page(t, "after=0")["items"])),
          (400, "BAD_ACK", head, 1))


def _item(sender, target):
    iid, wire = envelope(sender, [target])
    return push_item(iid, [target], wire)


def pull_page(host, query):
    st, page = call(host, "GET", f"/v2/relay/items?{query}")
    assert st == 200, page
    return page


def rotation(old, new, host=None, drop=None, bad_old=False, bad_new=False):
    rec = {"v": 1, "type": "host-rotation", "host": host or old.name, "old_pub": old.key.b64(),
           "new_pub": new.b64(), "new_enc_pub": base64.b64encode(bytes(32)).decode(),
           "iat": str(int(time.time() * 1000))}
    if drop:
        del rec[drop]
    text = canonical(rec).encode()
    return {"rotation": {"rec": rec,
                         "old_sig": (Key() if bad_old else old.key).sign(text),
                         "new_sig": (Key() if bad_new else new).sign(text)}}


def rotate(relay, body):
    st, data, _ = request(relay.addr, "POST", "/v2/relay/rotate", json.dumps(body).encode())
    return st, json.loads(data)


def rotation_texts(relay):
    a, c = Host(relay, "rotor-a"), Host(relay, "rotor-c")
    fresh = Key()
    check("2 a body without rotation answers 404",
          rotate(relay, {}), (404, {"error": "the rotated key is not enrolled here"}))
    check("2 a record missing new_enc_pub answers 400 not a rotation record",
          rotate(relay, rotation(a, fresh, drop="new_enc_pub")),
          (400, {"error": "not a rotation record"}))
    check("2 the same key answers 400",
          rotate(relay, rotation(a, a.key)), (400, {"error": "rotation keeps the same host key"}))
    check("2 a bad old_sig answers 400",
          rotate(relay, rotation(a, fresh, bad_old=True)),
          (400, {"error": "rotation is not signed by the pinned host key"}))
    check("2 a bad new_sig answers 400",
          rotate(relay, rotation(a, fresh, bad_new=True)),
          (400, {"error": "rotation is not signed by the new host key"}))
    check("2 another host's name answers 400",
          rotate(relay, rotation(a, fresh, host="someone-else")),
          (400, {"error": "rotation names another host"}))
    check("2 a good rotation answers 200 moved",
          rotate(relay, rotation(a, fresh)), (200, {"moved": 0}))
    check("2 rotating the now revoked old key answers 404",
          rotate(relay, rotation(a, Key())), (404, {"error": "the rotated key is not enrolled here"}))
    check("2 rotating onto a revoked key answers 409",
          rotate(relay, rotation(c, a.key)), (409, {"error": "the new key was revoked here"}))


def unsigned_sender_list(relay):
    t = Host(relay, "listed")
    lst = {"v": 1, "type": "relay-senders", "host_pubkey": t.key.b64(), "senders": [Key().b64()],
           "iat": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())}
    check("3 a sender list without sig answers 401",
          call(t, "POST", "/v2/relay/senders", {"list": lst}),
          (401, {"error": "sender list is not signed by the target"}))


def v1_as_sent(relay):
    s, t = Host(relay, "v1-sender"), Host(relay, "v1-target")
    iid, wire = envelope(s, [t])
    body = '{"envelopes":[' + wire + "]}"
    st, data, _ = s.call("POST", "/v1/relay/messages", body.encode())
    check("4 a v1 push stores its envelope", (st, json.loads(data)), (200, {"stored": 1}))
    page = pull_page(t, "after=0")
    check("4 a v2 pull serves the v1 envelope's bytes as sent",
          [base64.b64decode(i["wire_b64"]).decode() for i in page["items"]], [wire])
    res = push(s, [push_item(iid, [t], wire)])[0]
    check("4 a v2 push of those bytes is a duplicate at the v1 seq",
          (res["status"], [x["seq"] for x in res["targets"]]),
          ("duplicate", [page["items"][0]["seq"]]))


def non_string_item_ids(relay):
    s, t = Host(relay, "ids-sender"), Host(relay, "ids-target")
    item = _item(s, t)
    item["item_id"] = 5
    res = push(s, [None, item])
    check("5 a null item and a numeric item_id answer item_id \"\"",
          [(r["item_id"], r["status"]) for r in res],
          [("", "rejected:bad item id"), ("", "rejected:bad item id")])


def enrol_rate(binary):
    relay = Relay(binary, enrol_per_minute=2)
    try:
        answers = []
        for _ in range(3):
            body = json.dumps({"host": "rate", "pubkey": Key().b64()}).encode()
            st, data, _ = request(relay.addr, "POST", "/v1/relay/challenge", body, src="127.0.0.9")
            answers.append((st, json.loads(data) if st != 200 else None))
        check("6 the enrolment rate refusal answers 429 with the reference text",
              answers[2], (429, {"error": "too many enrolment calls; retry in a minute"}))
    finally:
        relay.stop()


def lenient_cursors(relay):
    s, t = Host(relay, "len-sender"), Host(relay, "len-target")
    push(s, [_item(s, t) for _ in range(3)])
    seqs = lambda q: [i["seq"] for i in pull_page(t, q)["items"]]
    all3 = seqs("after=0")
    b = all3[0]
    check("7 limit=1.9 is floored to 1", seqs("after=0&limit=1.9"), all3[:1])
    check("7 a non-numeric after means 0", seqs("after=abc"), all3)
    check("7 after=<seq>.5 starts at the next seq", seqs(f"after={b}.5"), all3[1:])
    st, data, _ = t.call("POST", "/v1/relay/ack", b'{"cursor":"abc"}')
    check("7 a non-numeric v1 cursor answers ok and deletes nothing",
          (st, json.loads(data), seqs("after=0")), (200, {"ok": True}, all3))
    st, data, _ = t.call("POST", "/v1/relay/ack", json.dumps({"cursor": all3[-1] + 1000}).encode())
    check("7 a v1 cursor beyond head_seq is clamped (acks everything)",
          (st, json.loads(data), seqs("after=0")), (200, {"ok": True}, []))


def unknown_route(relay):
    st, data, _ = request(relay.addr, "GET", "/v2/relay/nowhere")
    check("deliberate: an unsigned unknown route answers 404 not found",
          (st, json.loads(data)), (404, {"error": "not found"}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--relay-bin", required=True)
    binary = ap.parse_args().relay_bin
    relay = Relay(binary)
    try:
        for case in (epoch_codes, rotation_texts, unsigned_sender_list, v1_as_sent,
                     non_string_item_ids, lenient_cursors, unknown_route):
            case(relay)
    finally:
        relay.stop()
    enrol_rate(binary)
    print(f"{failed} failed", flush=True)
    sys.exit(failed)


if __name__ == "__main__":
    main()
