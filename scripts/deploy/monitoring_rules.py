"""Write k8s/monitoring/prometheusrule.yaml from k8s/monitoring/detect-rules.yaml (the one source of truth).

    .venv/bin/python scripts/deploy/monitoring_rules.py            # regenerate after editing the rules
    .venv/bin/python scripts/deploy/monitoring_rules.py --check    # exit 1 if the PrometheusRule is stale

The PrometheusRule (monitoring.coreos.com/v1) holds the plain rules file's groups unchanged under
``spec.groups``; tests/deploy/test_monitoring.py checks that the committed file is this script's output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

MONITORING = Path(__file__).resolve().parents[2] / "k8s" / "monitoring"
RULES = MONITORING / "detect-rules.yaml"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"

HEADER = """\
# GENERATED from detect-rules.yaml by scripts/deploy/monitoring_rules.py: edit that file, then run the script.
# The detect server's alerting and recording rules for the Prometheus Operator (applied by
# `kubectl apply -k k8s/monitoring`). kube-prometheus-stack selects PrometheusRules by its Helm release
# label by default: add `release: <your release>` to metadata.labels in an overlay if yours does.
# Runbook per alert: docs/operations.md, "Alerts".
"""


class _BlockStrings(yaml.SafeDumper):
    """Multi-line strings (the PromQL) as literal blocks, so the generated file reads like its source."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockStrings.add_representer(str, _str)


def prometheus_rule(rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "detect",
            "labels": {"app.kubernetes.io/name": "detect", "app.kubernetes.io/component": "server"},
        },
        "spec": {"groups": rules["groups"]},
    }


def render() -> str:
    rules = yaml.safe_load(RULES.read_text())
    body = yaml.dump(prometheus_rule(rules), Dumper=_BlockStrings, sort_keys=False, width=110)
    return HEADER + body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if prometheusrule.yaml is not up to date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not PROMETHEUS_RULE.is_file() or PROMETHEUS_RULE.read_text() != text:
            print(
                f"{PROMETHEUS_RULE} is stale: run python scripts/deploy/monitoring_rules.py", file=sys.stderr
            )
            return 1
        return 0
    PROMETHEUS_RULE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
