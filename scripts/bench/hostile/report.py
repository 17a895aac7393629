"""Running one case with its monitors, and the Markdown table of the results."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from hostile.cases import CASES
from hostile.common import NORMAL_DELAY_S, NORMAL_TIMEOUT_S, CaseReport, Outcome, Reply, fmt_s
from hostile.server import Ctx, Monitor, NormalRequest, ProbeSampler, RssSampler, ensure_server, read_rss_mb

# ----------------------------------------------------------------------------------------------- running


def pick_snippet(replies: list[Reply]) -> str:
    """The body of the first non-200 answer that has one, else of the first answer."""
    for reply in replies:
        if reply.status != "200" and reply.body:
            return reply.body
    return replies[0].body if replies else ""


def run_case(ctx: Ctx, name: str) -> CaseReport:
    """Run one case with the RSS sampler, the probes and one normal request alongside."""
    restart_note = ensure_server(ctx)
    pid = ctx.server.pid
    before = read_rss_mb(pid)
    monitors: list[Monitor] = [RssSampler(pid), ProbeSampler(ctx)]
    normal = NormalRequest(ctx)
    for thread in [*monitors, normal]:
        thread.start()
    started = time.monotonic()
    try:
        outcome = CASES[name](ctx)
    except Exception as exc:  # the bench must report, not crash
        outcome = Outcome("(bench error)", [Reply(f"bench-error:{type(exc).__name__}: {exc}", 0.0)], None)
        outcome.seconds = time.monotonic() - started
    normal.join(timeout=NORMAL_DELAY_S + NORMAL_TIMEOUT_S + 5)
    for monitor in monitors:
        monitor.stop()
    rss, probes = monitors[0], monitors[1]
    assert isinstance(rss, RssSampler) and isinstance(probes, ProbeSampler)
    time.sleep(outcome.after_delay_s)
    return CaseReport(
        name=name,
        sent=outcome.sent,
        statuses=dict(Counter(r.status for r in outcome.replies)),
        snippet=pick_snippet(outcome.replies),
        note="; ".join(n for n in (restart_note, outcome.note) if n),
        case_s=outcome.seconds,
        normal=normal.reply,
        probe_ready_max_s=probes.max_s("ready"),
        probe_live_max_s=probes.max_s("live"),
        probe_statuses=probes.statuses(),
        rss_before_mb=before,
        rss_peak_mb=rss.peak,
        rss_after_mb=read_rss_mb(pid),
        replies=outcome.replies if name != "overload" else [],
        extra=outcome.extra,
    )


# ---------------------------------------------------------------------------------------------- printing


def fmt_mb(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def fmt_probes(report: CaseReport) -> str:
    text = f"ready {fmt_s(report.probe_ready_max_s)} / live {fmt_s(report.probe_live_max_s)}"
    bad = {
        name: {status: n for status, n in counts.items() if status != "200"}
        for name, counts in report.probe_statuses.items()
    }
    failures = ", ".join(
        f"{name} {status} x{n}" for name, counts in bad.items() for status, n in counts.items()
    )
    return f"{text} ({failures})" if failures else text


def table_row(report: CaseReport) -> str:
    statuses = ", ".join(f"{status} x{n}" for status, n in sorted(report.statuses.items()))
    if report.snippet:
        statuses += f": `{report.snippet[:110]}`"
    if report.note:
        statuses += f" — {report.note}"
    normal = "–" if report.normal is None else f"{report.normal.status} in {fmt_s(report.normal.seconds)}"
    rss = " / ".join(fmt_mb(v) for v in (report.rss_before_mb, report.rss_peak_mb, report.rss_after_mb))
    cells = [report.name, report.sent, statuses, fmt_s(report.case_s), normal, fmt_probes(report), rss]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def overload_line(summary: dict[str, Any]) -> str:
    statuses = ", ".join(f"{status} x{n}" for status, n in sorted(summary["statuses"].items()))
    ok_rate = summary["ok_per_s"]
    return (
        f"**overload**: {summary['clients']} clients for {summary['seconds']:.1f} s: {statuses}; "
        f"200s {'–' if ok_rate is None else f'{ok_rate:.2f}'}/s, p50 {fmt_s(summary['ok_p50_s'])}, "
        f"p99 {fmt_s(summary['ok_p99_s'])}; 429 max {fmt_s(summary['r429_max_s'])}, "
        f"p99 {fmt_s(summary['r429_p99_s'])}; Retry-After on "
        f"{summary['r429_with_retry_after']}/{summary['r429_count']} 429s"
    )


def print_table(reports: list[CaseReport]) -> None:
    print(
        "| case | sent | status (counts) | case latency | normal request meanwhile | probes max "
        "| RSS before / peak / after (MB) |"
    )
    print("|---|---|---|---|---|---|---|")
    for report in reports:
        print(table_row(report))
    for report in reports:
        if report.name == "overload" and "summary" in report.extra:
            print()
            print(overload_line(report.extra["summary"]))
