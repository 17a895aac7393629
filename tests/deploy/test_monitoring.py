"""k8s/monitoring: the dashboard's and the rules' PromQL is valid and names only metrics a live server serves;
the alert rules pass their `promtool test rules` unit tests; the PrometheusRule is generated from the plain
rules file. promtool comes from Debian's `prometheus` package (scripts/dev/install-system-deps.sh)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from deploy_testkit import K8S, ROOT
from prometheus_client.parser import text_string_to_metric_families
from service_testkit import (
    add_toy_model,
    encode,
    frames_processed,
    make_settings,
    solid_image,
    start_client,
    wait_until,
)

from bench.streams.sources import SourceServer
from contract.manifest import Manifest
from contract.quality import QualityCounts, class_names
from service.app import create_app

MONITORING = K8S / "monitoring"
RULES = MONITORING / "detect-rules.yaml"
RULE_TESTS = MONITORING / "tests" / "detect-rules.test.yaml"
DASHBOARD = MONITORING / "dashboard.json"
# Grafana's variables, replaced by values a query would get (every namespace and model).
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$namespace": ".*", "$model": ".*"}

_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
_KEYWORDS |= {"offset", "inf", "nan"}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(
            "promtool not installed (Debian package 'prometheus'; "
            "scripts/dev/install-system-deps.sh installs it)"
        )
    return path


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels and durations left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals: label values
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = re.findall(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()", text)
    return {name for name in names if name not in _KEYWORDS}


def test_metric_names_finds_selectors_only():
    expr = (
        'histogram_quantile(0.99, sum by (model, le) (rate(detect_request_seconds_bucket{model=~"a|b"}[5m])))'
        " / on (pod) group_left detect_memory_bound_bytes > 1e9 or x:y:z offset 15m and bool 2"
    )
    assert metric_names(expr) == {"detect_request_seconds_bucket", "detect_memory_bound_bytes", "x:y:z"}


# ---------------------------------------------------------------------------------------------- the PromQL
def rules_file() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return data


def rule_expressions() -> dict[str, str]:
    """{alert or record name: expr} of k8s/monitoring/detect-rules.yaml."""
    return {
        rule.get("alert") or rule["record"]: rule["expr"]
        for group in rules_file()["groups"]
        for rule in group["rules"]
    }


def _dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _dashboard_panels(panel.get("panels", []))


def dashboard_expressions() -> dict[str, str]:
    """{where: expr} of every panel target and query variable of the dashboard, its variables filled in."""
    dashboard = json.loads(DASHBOARD.read_text())
    found: dict[str, str] = {}
    for panel in _dashboard_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            found[f"{panel['title']} / {target['refId']}"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert match, f"variable {variable['name']}: expected label_values(<selector>, <label>): {query}"
            found[f"${variable['name']}"] = match.group(1)
    for where, expr in found.items():
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"{where}: a Grafana variable this test does not know: {expr}"
        found[where] = expr
    return found


def test_dashboard_has_the_operators_panels():
    titles = {p["title"] for p in _dashboard_panels(json.loads(DASHBOARD.read_text())["panels"])}
    for needed in ("Request rate by model", "Requests by status", "Refused and timed out: 429 / 503 / 504"):
        assert needed in titles
    for needed in ("In flight", "End-to-end latency p50 / p99 by model", "Stage latency p99", "Queue wait"):
        assert any(title.startswith(needed) for title in titles), needed
    for needed in ("Mean batch size by model", "Memory against the bound", "Model loads and failures"):
        assert needed in titles


def test_dashboard_expressions_parse(tmp_path: Path):
    """Each expression as a recording rule: `promtool check rules` parses it."""
    exprs = dashboard_expressions()
    assert len(exprs) > 20
    rules = [{"record": f"dashboard:expr_{i}", "expr": expr} for i, expr in enumerate(exprs.values())]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_rules_pass_promtool_check():
    result = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def served_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every sample name of a live server's /metrics, after one request (so histograms have samples) and
    with one camera stream running (so the per-stream series exist), served on 127.0.0.1 by the test."""
    repo = tmp_path_factory.mktemp("monitoring_repo")
    version_dir = add_toy_model(repo, "toy")
    manifest = Manifest.read(version_dir)  # with a quality baseline, as `detect-export eval --write` records
    counts = QualityCounts(
        class_names(tuple(label.name for label in manifest.labels)), manifest.default_threshold
    )
    counts.add_image(np.array([0.9]), np.array([0]), 64, 64)
    manifest.model_copy(update={"quality": counts.baseline("synth", "val", "cpu")}).write(version_dir)
    with SourceServer(fps=15, frames=[np.full((48, 64, 3), 255, np.uint8)]) as camera:
        client = start_client(create_app(make_settings(repo, stream_sources=camera.base_url)))
        try:
            png = encode(solid_image(200))
            assert (
                client.post("/detect", content=png, headers={"content-type": "image/png"}).status_code == 200
            )
            stream_id = client.post("/v1/streams", json={"url": camera.url("mjpeg/m")}).json()["id"]
            wait_until(lambda: frames_processed(client, stream_id) >= 3, what="3 answered stream frames")
            time.sleep(1.2)  # the session reports its rates once a second
            text = client.get("/metrics").text
        finally:
            client.__exit__(None, None, None)
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_every_metric_the_dashboard_and_rules_use_is_served(served_names: set[str]):
    recorded = {name for name in rule_expressions() if ":" in name}  # recording rules name level:metric:ops
    for where, expr in {**dashboard_expressions(), **rule_expressions()}.items():
        names = metric_names(expr)
        assert names, f"{where}: no metric name found in {expr}"
        missing = names - served_names - recorded
        assert not missing, f"{where} uses {sorted(missing)}, which a live server's /metrics lacks"


# ---------------------------------------------------------------------------------------------- the rules
def test_alert_rule_unit_tests_pass():
    result = subprocess.run(
        [promtool(), "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_tested_firing_and_not_firing():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    for alert in (name for name, _ in rule_expressions().items() if ":" not in name):
        fires = [c for c in cases if c["alertname"] == alert and c.get("exp_alerts")]
        quiet = [c for c in cases if c["alertname"] == alert and not c.get("exp_alerts")]
        assert fires and quiet, f"{alert}: test it firing ({len(fires)} cases) and not firing ({len(quiet)})"


def test_prometheus_rule_is_generated_from_the_rules_file(rendered: dict[str, list[dict[str, Any]]]):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "deploy" / "monitoring_rules.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (rule,) = [obj for obj in rendered["monitoring"] if obj["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"] == rules_file()["groups"]


def test_dashboard_config_map_carries_the_sidecar_label(rendered: dict[str, list[dict[str, Any]]]):
    (config_map,) = [obj for obj in rendered["monitoring"] if obj["kind"] == "ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["dashboard.json"]) == json.loads(DASHBOARD.read_text())


# ---------------------------------------------------------------------------------------------- the runbook
OPERATIONS = ROOT / "docs" / "operations.md"


def test_every_alert_has_a_runbook_section():
    text = OPERATIONS.read_text()
    headings = set(re.findall(r"^### (\w+)$", text, flags=re.MULTILINE))
    for group in rules_file()["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["alert"] in headings, f"docs/operations.md has no section for {rule['alert']}"
                anchor = rule["alert"].lower()
                assert rule["annotations"]["runbook"] == f"docs/operations.md#{anchor}"


def test_operations_doc_names_only_real_metrics_and_settings(
    metric_families: dict[str, str], settings_env_names: set[str]
):
    text = OPERATIONS.read_text()
    suffixes = ("_bucket", "_sum", "_count", "_total")
    for name in set(re.findall(r"(?<![:\w])(?:detect|process)_[a-z0-9_]+\b", text)):
        stems = [name[: -len(s)] for s in suffixes if name.endswith(s)]
        family = next((stem for stem in stems if stem in metric_families), name)
        assert family in metric_families, f"docs/operations.md names metric {name}, which the service lacks"
    unknown = set(re.findall(r"\bDETECT_[A-Z0-9_]+\b", text)) - settings_env_names
    assert not unknown, f"docs/operations.md names {sorted(unknown)}, which are not settings"
