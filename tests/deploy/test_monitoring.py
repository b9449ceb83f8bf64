"""deploy/monitoring holds a Grafana dashboard and Prometheus alert rules that work on `tollgate serve`'s /metrics.

* Every expression parses as Prometheus parses it: `promtool check rules`
  on the alert rules, and on the dashboard's queries written as recording
  rules (Grafana's `$__rate_interval` and `$job` filled in).
* Every metric either names is a sample a running `tollgate serve` exposes:
  the test starts the real binary with a real Redis and limits that take
  the exact, quick-deny, lease and shares paths, scrapes /metrics and
  compares names as Prometheus stores them (a histogram's `_bucket`,
  `_sum`, `_count`; an OpenMetrics counter's `_total`).
* The dashboard shows what an operator needs (decisions, over-limit by
  rule, fallbacks, store health, leases, shares, bounds, config loads) and
  the rules alert on the store being down, running open on a fallback,
  bounds near full and config load errors.

Run by scripts/test.sh with the deployment tests (TOLLGATE_BIN names the binary).
"""

import json
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

import yaml

import running

MONITORING = running.ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "tollgate-dashboard.json"
ALERTS = MONITORING / "tollgate-alerts.yaml"

# PromQL's words that are neither functions (those are followed by `(`) nor
# metrics: its aggregations (which may be followed by `by (…)`), operators
# and modifiers.
KEYWORDS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
            "bottomk", "topk", "quantile", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan", "atan2"}


def metric_names(expression):
    """The metric names a PromQL expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expression)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    # Label lists of aggregations and vector matching.
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        if match.group(0) in KEYWORDS or text[match.end():].lstrip().startswith("("):
            continue
        names.add(match.group(0))
    return names


def dashboard():
    return json.loads(DASHBOARD.read_text())


def dashboard_expressions():
    """(panel title, expr) of every query, Grafana's variables filled in as a query would have them."""
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "5m").replace("$job", ".*")
            yield panel["title"], expr


def templating_metrics():
    """The metrics the dashboard's `label_values(metric, label)` variables read."""
    found = set()
    for variable in dashboard()["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found |= set(re.findall(r"label_values\((\w+)\s*,", query["query"]))
    return found


def alert_rules():
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def promtool_check_rules(groups):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as rules:
        yaml.safe_dump({"groups": groups}, rules)
        rules.flush()
        return subprocess.run(["promtool", "check", "rules", rules.name], capture_output=True, text=True)


# Limits that take every path /metrics reports: exact (/login), quick-deny
# (/login once over), a lease (api_key) and shares (tenant).
LIMITS = """\
domain: edge
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api_key
    lease: 1s
    rate_limit: {unit: minute, requests_per_unit: 100000}
  - key: tenant
    shares: true
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
"""


def request(key, value):
    return json.dumps({"domain": "edge", "descriptors": [{"entries": [{"key": key, "value": value}]}]})


class Expressions(unittest.TestCase):
    def test_promtool_checks_the_alert_rules(self):
        checked = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        self.assertIn(f"SUCCESS: {len(alert_rules())} rules found", checked.stdout)

    def test_promtool_refuses_a_broken_expression(self):
        # The check above can fail.
        checked = promtool_check_rules([{"name": "broken", "rules": [
            {"alert": "Broken", "expr": "sum by (job (ratelimit_store_up"}]}])
        self.assertNotEqual(checked.returncode, 0)
        self.assertIn("parse error", checked.stdout + checked.stderr)

    def test_every_dashboard_query_parses(self):
        expressions = list(dashboard_expressions())
        self.assertGreaterEqual(len(expressions), 20)
        rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, (_, expr) in enumerate(expressions)]
        checked = promtool_check_rules([{"name": "dashboard", "rules": rules}])
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)

    def test_the_name_scanner_finds_metrics_and_nothing_else(self):
        expression = ('sum by (path, le) (rate(ratelimit_a_total{job=~"$job",x="b c(d)"}[5m])) '
                      '/ on(instance) group_left(kind) ratelimit_b_limit > 0.9 or histogram_quantile(0.5, c_bucket) '
                      'and count by (job) (count without (hash) (d))')
        self.assertEqual(metric_names(expression), {"ratelimit_a_total", "ratelimit_b_limit", "c_bucket", "d"})


class Content(unittest.TestCase):
    def test_the_dashboard_shows_what_an_operator_needs(self):
        board = dashboard()
        self.assertEqual(board["uid"], "tollgate")
        named = set()
        for title, expr in dashboard_expressions():
            named |= metric_names(expr)
        for needed in [
            "ratelimit_store_decisions_total",  # decisions by path
            "ratelimit_service_rate_limit_over_limit",  # over-limit by rule
            "ratelimit_store_fallbacks_total",  # fallbacks by on_store_error
            "ratelimit_store_up", "ratelimit_store_errors_total",  # store health
            "ratelimit_request_duration_seconds_bucket",  # latency, the store call included
            "ratelimit_store_lease_granted_units_total", "ratelimit_store_lease_outstanding_units",  # leases
            "ratelimit_store_shares_decided_total", "ratelimit_store_shares_keys",  # quota shares
            "ratelimit_memory_keys_limit", "ratelimit_quick_deny_keys_limit", "ratelimit_connections_limit",  # bounds
            "ratelimit_store_lease_keys_limit", "ratelimit_store_shares_keys_limit",  # bounds of leases and shares
            "ratelimit_store_shares_starter_slots_owned", "ratelimit_store_shares_starter_slots_limit",
            "ratelimit_service_config_load_error",  # config loads
        ]:
            self.assertIn(needed, named)
        for panel in board["panels"]:
            with self.subTest(panel=panel["title"]):
                if panel["type"] == "row":
                    continue
                self.assertEqual(panel["datasource"]["uid"], "${datasource}")
                refs = [t["refId"] for t in panel["targets"]]
                self.assertEqual(len(refs), len(set(refs)))
                for target in panel["targets"]:
                    self.assertIn('job=~"$job"', target["expr"])

    def test_the_rules_alert_on_store_down_fallbacks_bounds_and_config_errors(self):
        rules = {rule["alert"]: rule for rule in alert_rules()}
        for alert, metric in [
            ("TollgateStoreDown", "ratelimit_store_up"),
            ("TollgateRunningOpenOnFallback", "ratelimit_store_fallbacks_total"),
            ("TollgateBoundNearFull", "ratelimit_memory_keys_limit"),
            ("TollgateBoundNearFull", "ratelimit_store_shares_keys_limit"),
            ("TollgateBoundNearFull", "ratelimit_store_shares_starter_slots_limit"),
            ("TollgateConfigLoadErrors", "ratelimit_service_config_load_error"),
        ]:
            with self.subTest(alert=alert):
                self.assertIn(metric, metric_names(rules[alert]["expr"]))
                self.assertIn(rules[alert]["labels"]["severity"], {"warning", "critical"})
                self.assertTrue(rules[alert]["annotations"]["summary"])
        self.assertIn('policy="allow"', rules["TollgateRunningOpenOnFallback"]["expr"])


class AgainstServe(unittest.TestCase):
    def test_every_metric_named_is_exposed_by_a_running_serve(self):
        with tempfile.TemporaryDirectory() as limits:
            Path(limits, "limits.yaml").write_text(LIMITS)
            with running.Redis() as redis, running.Serve(
                    [f"--config={limits}", f"--store=redis://127.0.0.1:{redis.port}"]) as serve:
                answers = [serve.check(request("path", "/login")) for _ in range(4)]
                self.assertEqual(answers, [200, 200, 429, 429])
                for key, value in [("api_key", "k"), ("tenant", "t"), ("shadow", "s"), ("shadow", "s")]:
                    self.assertEqual(serve.check(request(key, value)), 200)
                # One call over gRPC, as Envoy asks (upstream's gRPC series).
                subprocess.run([running.tollgate_binary(), "check", f"--addr=http://127.0.0.1:{serve.grpc_port}",
                                "--domain=edge", "api_key=k"], check=True, capture_output=True, timeout=30)
                exposed = serve.metric_names()
        named = {}
        for title, expr in dashboard_expressions():
            for name in metric_names(expr):
                named.setdefault(name, f"dashboard panel {title!r}")
        for name in templating_metrics():
            named.setdefault(name, "dashboard variable")
        for rule in alert_rules():
            for name in metric_names(rule["expr"]):
                named.setdefault(name, f"alert {rule['alert']}")
        self.assertGreaterEqual(len(named), 30)
        missing = {name: where for name, where in named.items() if name not in exposed}
        self.assertEqual(missing, {}, f"named but not on /metrics; exposed: {sorted(exposed)}")
        # The comparison can fail: a name serve does not expose is missing.
        self.assertNotIn("ratelimit_store_latency_seconds_bucket", exposed)


if __name__ == "__main__":
    unittest.main()
