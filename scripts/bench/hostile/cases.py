"""The hostile cases, one function each, and the overload run."""

from __future__ import annotations

import math
import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import httpx

from hostile.common import (
    EXIT_TIMEOUT_S,
    HOST,
    NORMAL_TIMEOUT_S,
    PROBE_TIMEOUT_S,
    Outcome,
    Reply,
    fmt_s,
    many_parts_body,
)
from hostile.server import Ctx
from hostile.transport import classify, close_all, http_call, open_raw, read_reply, replies_of

# ------------------------------------------------------------------------------------------------- cases


def post(ctx: Ctx, path: str, timeout: float, **kwargs: Any) -> Reply:
    headers = {**kwargs.pop("headers", {}), **ctx.auth}
    return http_call("POST", ctx.url(path), timeout=timeout, headers=headers, **kwargs)


def case_lying_jpeg(ctx: Ctx) -> Outcome:
    data = ctx.payloads.lying[0]
    reply = post(ctx, "/detect", 60.0, content=data, headers={"Content-Type": "image/jpeg"})
    return Outcome(f"1 JPEG, SOF 6000x6000, 64x64 scan ({len(data)} B)", [reply], reply.seconds)


def _multipart(ctx: Ctx, images: list[bytes], name: str, media_type: str, sent: str) -> Outcome:
    files = [("images", (f"{i}.{name}", data, media_type)) for i, data in enumerate(images)]
    reply = post(ctx, "/detect", 120.0, files=files)
    return Outcome(f"{sent} ({sum(map(len, images)) / 1e6:.2f} MB)", [reply], reply.seconds)


def case_png_16(ctx: Ctx) -> Outcome:
    images = [ctx.payloads.png_40mpx] * 16
    return _multipart(ctx, images, "png", "image/png", "16 single-colour 6324x6324 PNGs, multipart")


def case_lying_jpeg_16(ctx: Ctx) -> Outcome:
    return _multipart(
        ctx, ctx.payloads.lying, "jpg", "image/jpeg", "16 lying JPEGs (6000x6000 SOF), multipart"
    )


def case_many_parts(ctx: Ctx) -> Outcome:
    body, count = many_parts_body(19_900_000)
    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    reply = post(ctx, "/detect", 120.0, content=body, headers=headers)
    sent = f"multipart, {count:,} one-byte parts ({len(body) / 1e6:.2f} MB)"
    return Outcome(sent, [reply], reply.seconds, extra={"parts": count, "body_bytes": len(body)})


def case_stalled_body(ctx: Ctx) -> Outcome:
    sent = "Content-Length 20,000,000; 1 MB sent, then silence (wait 20 s)"
    sock: socket.socket | None = None
    try:
        sock = open_raw(ctx.server.port)
        sock.settimeout(20.0)
        sock.sendall(ctx.post_head("/detect", 20_000_000, "image/jpeg") + b"\0" * 1_000_000)
        reply = read_reply(sock, 20.0)
    except OSError as exc:
        reply = Reply(f"send-{classify(exc)}", 0.0)
    finally:
        close_all([sock])
    return Outcome(sent, [reply], reply.seconds, note="latency: from the last byte sent")


def _send_held(
    ctx: Ctx, payload: bytes, index: int, socks: list[socket.socket | None], errors: list[str | None]
) -> None:
    """Open connection ``index``, send headers declaring 20 MB and then ``payload``; store socket or error."""
    try:
        sock = open_raw(ctx.server.port)
    except OSError as exc:
        errors[index] = classify(exc)
        return
    socks[index] = sock
    try:
        sock.settimeout(30.0)  # the total for sendall (Python >= 3.5), not per chunk
        sock.sendall(ctx.post_head("/detect", 20_000_000, "image/jpeg"))
        sock.sendall(payload)
    except OSError as exc:
        errors[index] = classify(exc)


def case_held_bodies(ctx: Ctx) -> Outcome:
    payload = b"\0" * 19_500_000
    socks: list[socket.socket | None] = [None] * 20
    errors: list[str | None] = [None] * 20
    started = time.monotonic()
    threads = [
        threading.Thread(target=_send_held, args=(ctx, payload, i, socks, errors), daemon=True)
        for i in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=45.0)
    sent_s = time.monotonic() - started
    time.sleep(2.0)  # hold them
    replies = replies_of(list(socks), list(errors), 1.0)
    close_all(socks)
    sent = "20 conns x 19.5 MB of a declared 20 MB body, held 2 s, then closed"
    return Outcome(sent, replies, sent_s, after_delay_s=3.0, note="latency: until all bodies were sent")


def read_in_flight(ctx: Ctx) -> tuple[float | None, Reply]:
    """``detect_in_flight_requests`` from /metrics (None if unreadable) and how that read went."""
    port = ctx.metrics_port or ctx.server.port
    started = time.monotonic()
    try:
        response = httpx.get(f"http://{HOST}:{port}/metrics", timeout=PROBE_TIMEOUT_S, headers=ctx.auth)
    except httpx.HTTPError as exc:
        return None, Reply(classify(exc), time.monotonic() - started)
    reply = Reply(str(response.status_code), time.monotonic() - started)
    match = re.search(r"^detect_in_flight_requests(?:\{[^}]*\})?\s+(\S+)$", response.text, re.MULTILINE)
    try:
        return (float(match.group(1)) if match else None), reply
    except ValueError:
        return None, reply


def case_no_body_connections(ctx: Ctx) -> Outcome:
    started = time.monotonic()
    socks: list[socket.socket | None] = [None] * 50
    errors: list[str | None] = [None] * 50
    for index in range(50):
        try:
            sock = socks[index] = open_raw(ctx.server.port)
            sock.sendall(ctx.post_head("/detect", 1000, "image/jpeg"))
        except OSError as exc:
            errors[index] = classify(exc)
    time.sleep(1.0)
    in_flight, metrics_reply = read_in_flight(ctx)
    elapsed = time.monotonic() - started
    replies = replies_of(socks, errors, 1.0)
    close_all(socks)
    sent = "50 conns: POST /detect headers (Content-Length 1000), no body; held ~1 s"
    shown = "?" if in_flight is None else f"{in_flight:g}"
    read = f"/metrics {metrics_reply.status} in {fmt_s(metrics_reply.seconds)}"
    note = f"detect_in_flight_requests={shown} ({read})"
    extra = {"in_flight_requests": in_flight, "metrics": asdict(metrics_reply)}
    return Outcome(sent, replies, elapsed, extra=extra, note=note)


def case_empty_classes(ctx: Ctx) -> Outcome:
    data = ctx.payloads.normal_jpeg
    reply = post(ctx, "/detect?classes=,,,", 30.0, content=data, headers={"Content-Type": "image/jpeg"})
    return Outcome("valid JPEG to /detect?classes=,,,", [reply], reply.seconds)


def _overload_client(ctx: Ctx, end: float, out: list[Reply], seed: int) -> None:
    """One closed-loop client: post, wait for the answer, post again, until ``end`` (bounded count)."""
    jpegs = ctx.payloads.overload_jpegs
    headers = {"Content-Type": "image/jpeg", **ctx.auth}
    with httpx.Client(timeout=NORMAL_TIMEOUT_S) as client:
        for i in range(200_000):
            if time.monotonic() >= end:
                return
            data = jpegs[(seed + i) % len(jpegs)]
            reply = http_call(
                "POST",
                ctx.url("/detect"),
                timeout=NORMAL_TIMEOUT_S,
                client=client,
                content=data,
                headers=headers,
            )
            reply.body = reply.body if not reply.status.startswith("2") else ""
            out.append(reply)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def summarize_overload(replies: list[Reply], clients: int, seconds: float) -> dict[str, Any]:
    ok = [r.seconds for r in replies if r.status == "200"]
    rejected = [r for r in replies if r.status == "429"]
    rejected_s = [r.seconds for r in rejected]
    return {
        "clients": clients,
        "seconds": seconds,
        "statuses": dict(Counter(r.status for r in replies)),
        "ok_per_s": len(ok) / seconds if seconds else None,
        "ok_p50_s": percentile(ok, 50),
        "ok_p99_s": percentile(ok, 99),
        "r429_max_s": max(rejected_s, default=None),
        "r429_p99_s": percentile(rejected_s, 99),
        "r429_with_retry_after": sum(1 for r in rejected if r.retry_after is not None),
        "r429_count": len(rejected),
    }


def case_overload(ctx: Ctx) -> Outcome:
    clients, duration = ctx.args.overload_clients, ctx.args.overload_seconds
    outs: list[list[Reply]] = [[] for _ in range(clients)]
    started = time.monotonic()
    end = started + duration
    threads = [
        threading.Thread(target=_overload_client, args=(ctx, end, outs[i], i), daemon=True)
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, end - time.monotonic()) + NORMAL_TIMEOUT_S + 5)
    elapsed = time.monotonic() - started
    replies = [reply for out in outs for reply in list(out)]
    summary = summarize_overload(replies, clients, elapsed)
    sent = f"{clients} closed-loop clients x {duration:g} s, 320x320 JPEGs"
    raw = [[r.status, round(r.seconds, 4), r.retry_after] for r in replies]
    return Outcome(sent, replies, elapsed, extra={"summary": summary, "raw": raw})


def case_sigterm(ctx: Ctx) -> Outcome:
    """Stall an upload mid-body, SIGTERM the server, time its exit and read what the stalled client got."""
    sent = "upload stalls (Content-Length 1,000,000; 1000 B sent), then SIGTERM"
    holder: list[Reply] = []
    try:
        sock = open_raw(ctx.server.port)
        sock.sendall(ctx.post_head("/detect", 1_000_000, "image/jpeg") + b"\xff" * 1000)
    except OSError as exc:
        return Outcome(sent, [Reply(f"send-{classify(exc)}", 0.0)], None, after_delay_s=0.0)
    time.sleep(0.2)
    reader = threading.Thread(target=lambda: holder.append(read_reply(sock, EXIT_TIMEOUT_S + 5)), daemon=True)
    reader.start()
    assert ctx.server.process is not None
    ctx.server.process.send_signal(signal.SIGTERM)
    exit_s = ctx.server.wait_exit(EXIT_TIMEOUT_S)
    note = f"exit {ctx.server.process.returncode} after {exit_s:.2f} s" if exit_s is not None else ""
    if exit_s is None:
        ctx.server.process.kill()
        ctx.server.process.wait(timeout=10)
        note = f"still running {EXIT_TIMEOUT_S:g} s after SIGTERM: killed"
    reader.join(timeout=10.0)
    close_all([sock])
    reply = holder[0] if holder else Reply("no-reply", 0.0)
    extra = {"exit_s": exit_s, "exit_code": ctx.server.process.returncode, "stalled_client": asdict(reply)}
    got = f"{reply.status} {reply.content_type or '(no content-type)'}"
    note += f"; stalled client got {got} after {fmt_s(reply.seconds)}"
    return Outcome(sent, [reply], exit_s, extra=extra, after_delay_s=0.0, note=note)


CASES: dict[str, Callable[[Ctx], Outcome]] = {
    "lying-jpeg": case_lying_jpeg,
    "png-16x40mpx": case_png_16,
    "lying-jpeg-16": case_lying_jpeg_16,
    "many-parts": case_many_parts,
    "stalled-body": case_stalled_body,
    "held-bodies": case_held_bodies,
    "no-body-connections": case_no_body_connections,
    "empty-classes": case_empty_classes,
    "overload": case_overload,
    "sigterm-stalled-upload": case_sigterm,
}
STOPS_SERVER = "sigterm-stalled-upload"
