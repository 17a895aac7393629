"""Rolling a candidate version of a model out beside the serving one: canary split and shadow share.

A `RolloutPlan` names, for one model, the version that serves (``serving``), the ``candidate``, the share
of real traffic the candidate answers (``canary_percent``, as KServe's ``canaryTrafficPercent``) and the
share of the serving version's requests that are also sent, as a copy, to the candidate
(``shadow_percent``; the copy's answer is compared, never returned: `service.pipeline.shadow`). While a
plan stands, a request that names no version gets ``serving``, or ``candidate`` for its canary share; a
request that names a version gets that version. `ModelControl.start_rollout` loads the candidate and sets
the plan; `ModelControl.end_rollout` undoes both in one call.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Per-image agreement between the serving and the candidate version: matched detections / the larger count.
AGREEMENT_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.999, 1.0)
SHADOW_RESULTS = ("compared", "busy", "not_ready", "input_mismatch", "failed")


@dataclass(frozen=True)
class RolloutPlan:
    """One model's rollout: which version serves, which is the candidate, and the two shares (0..100)."""

    serving: str
    candidate: str
    canary_percent: float = 0.0
    shadow_percent: float = 0.0


class RolloutMetrics:
    """``detect_rollout_canary_percent`` / ``detect_rollout_shadow_percent`` {model} (the plan; 0 without
    one), ``detect_rollout_routed_total`` {model, version, role} (requests that named no version, by the
    version they got), ``detect_shadow_requests_total`` {model, result}, ``detect_shadow_agreement``
    {model} (a histogram of per-image agreement) and ``detect_shadow_detections_total`` {model, role}
    (``serving``, ``candidate``, ``matched``: agreement over a window is ``2 * matched / (serving +
    candidate)`` of their rates)."""

    def __init__(self, registry: CollectorRegistry):
        self.canary_percent = Gauge(
            "detect_rollout_canary_percent",
            "Share of requests naming no version that the candidate answers (0..100)",
            ["model"],
            registry=registry,
        )
        self.shadow_percent = Gauge(
            "detect_rollout_shadow_percent",
            "Share of the serving version's requests copied to the candidate (0..100)",
            ["model"],
            registry=registry,
        )
        self.routed = Counter(
            "detect_rollout_routed",
            "Requests naming no version during a rollout, by the version that answered",
            ["model", "version", "role"],
            registry=registry,
        )
        self.shadow = Counter(
            "detect_shadow_requests",
            "Requests copied to the candidate, by result (compared, or why dropped)",
            ["model", "result"],
            registry=registry,
        )
        self.agreement = Histogram(
            "detect_shadow_agreement",
            "Per-image agreement of the candidate with the serving version (matched at IoU 0.5 / the "
            "larger count of detections above each version's display threshold)",
            ["model"],
            buckets=AGREEMENT_BUCKETS,
            registry=registry,
        )
        self.detections = Counter(
            "detect_shadow_detections",
            "Detections above the display threshold in shadowed images: serving, candidate, matched",
            ["model", "role"],
            registry=registry,
        )

    def plan(self, model: str, plan: RolloutPlan | None) -> None:
        self.canary_percent.labels(model=model).set(plan.canary_percent if plan else 0)
        self.shadow_percent.labels(model=model).set(plan.shadow_percent if plan else 0)
        for result in SHADOW_RESULTS:
            self.shadow.labels(model=model, result=result)
        for role in ("serving", "candidate", "matched"):
            self.detections.labels(model=model, role=role)


class Rollouts:
    """The standing rollout plans, by model name; draws the canary and shadow shares."""

    def __init__(self, registry: CollectorRegistry, seed: int | None = None):
        self.plans: dict[str, RolloutPlan] = {}
        self.metrics = RolloutMetrics(registry)
        self._random = random.Random(seed)

    def set(self, model: str, plan: RolloutPlan) -> None:
        for share in (plan.canary_percent, plan.shadow_percent):
            if not 0.0 <= share <= 100.0:
                raise ValueError(f"a rollout share must be within 0..100, got {share}")
        self.plans[model] = plan
        self.metrics.plan(model, plan)

    def clear(self, model: str) -> RolloutPlan | None:
        plan = self.plans.pop(model, None)
        if plan is not None:
            self.metrics.plan(model, None)
        return plan

    def version_for(self, model: str, canary: bool) -> str | None:
        """The version a request naming none gets (None: no plan); ``canary``: draw the canary share
        (inference requests), else the serving version (metadata)."""
        plan = self.plans.get(model)
        if plan is None:
            return None
        if not canary:
            return plan.serving
        chosen = plan.candidate if self._random.random() * 100.0 < plan.canary_percent else plan.serving
        role = "candidate" if chosen == plan.candidate else "serving"
        self.metrics.routed.labels(model=model, version=chosen, role=role).inc()
        return chosen

    def shadow_for(self, model: str, version: str) -> RolloutPlan | None:
        """The plan when a request answered by ``version`` of ``model`` is to be copied to its candidate."""
        plan = self.plans.get(model)
        if plan is None or version != plan.serving or plan.shadow_percent <= 0.0:
            return None
        return plan if self._random.random() * 100.0 < plan.shadow_percent else None
