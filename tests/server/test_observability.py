"""The Grafana dashboard, the alert rules and the autoscalers' queries read only series a running server
exports; promtool accepts the rules; the series they rely on say what they should."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from testkit.apt import apt_install
from tests.conftest import MINILM, ROOT, SAMPLE, TINY_RERANKER, metric

pytestmark = pytest.mark.server

DASHBOARD = ROOT / "deploy" / "grafana" / "embento.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
KUBERNETES = ROOT / "deploy" / "kubernetes"
CACHE_SERIES = "embento_cache_"
# Only a server with limited API keys (throttled) or a limits Redis (store errors) has these: test_tenants.py.
TENANT_LIMIT_SERIES = ("embento_tenant_throttled", "embento_limit_store_errors")
PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}
# What the dashboard must show (the list), by the series that show it.
COVERED = {
    "request rate and status": "embento_requests_total",
    "latency per stage": "embento_stage_seconds_bucket",
    "queue depth": "embento_queued_items",
    "rejections": "embento_rejected_requests_total",
    "batch sizes": "embento_model_batch_size_bucket",
    "forward seconds": "embento_model_forward_seconds_bucket",
    "failed inputs": "embento_model_failed_inputs_total",
    "dropped inputs": "embento_dropped_inputs_total",
    "process memory": "embento_process_resident_memory_bytes",
    "model loads": "embento_model_loads_total",
    "model unloads and evictions": "embento_model_unloads_total",
    "model load seconds": "embento_model_load_seconds_bucket",
    "queue wait by class": "embento_queue_wait_seconds_bucket",
}


def metric_names(expression: str) -> set[str]:
    """The series a PromQL expression reads: its identifiers less functions, keywords and label names."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", text)  # label matchers, ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    return {
        match.group()
        for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text)
        if match.group() not in PROMQL_KEYWORDS and not text[match.end() :].lstrip().startswith("(")
    }


def shared_server_series(names: set[str]) -> set[str]:
    """The series the shared server exports: all but the cache's, which only a model with `cache: true` has
    (tests/server/test_cache.py checks those against a cached server), and the tenants' limits'."""
    return {name for name in names if not name.startswith((CACHE_SERIES, *TENANT_LIMIT_SERIES))}


def dashboard_expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def alert_expressions() -> dict[str, str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


@pytest.fixture(scope="module")
def exported(client) -> str:
    """The server's /metrics after an embedding and a rerank (histograms have samples once observed)."""
    assert client.post("/v1/embeddings", json={"input": ["a metric"], "model": MINILM}).status_code == 200
    assert client.post("/v1/rerank", json={"query": "q", "documents": ["d"], "model": TINY_RERANKER}).status_code == 200
    return client.get("/metrics").text


def test_the_query_parser_finds_the_series():
    expression = (
        'histogram_quantile(0.95, sum by (le, stage) (rate(embento_stage_seconds_bucket{model=~"$m"}'
        "[$__rate_interval]))) / on (instance) group_left max(embento_max_queued_items) or vector(0)"
    )
    assert metric_names(expression) == {"embento_stage_seconds_bucket", "embento_max_queued_items"}


def test_every_series_the_dashboard_reads_is_exported(exported):
    names = {sample["name"] for sample in SAMPLE.finditer(exported)}
    used = set().union(*map(metric_names, dashboard_expressions()))
    assert shared_server_series(used) - names == set(), "the dashboard reads series the server does not export"
    missing = {topic for topic, series in COVERED.items() if series not in used}
    assert not missing, f"the dashboard shows nothing of {missing}"


def test_every_series_the_alerts_read_is_exported(exported):
    names = {sample["name"] for sample in SAMPLE.finditer(exported)}
    rules = alert_expressions()
    assert set(rules) == {
        "EmbentoNotReady",
        "EmbentoHigh5xxRatio",
        "EmbentoSustained429s",
        "EmbentoQueueNearBound",
        "EmbentoRedisCacheFailing",
        "EmbentoTenantThrottled",
        "EmbentoModelServiceSilent",
        "EmbentoModelLoadFailed",
        "EmbentoLiveQueriesWaiting",
    }
    for alert, expression in rules.items():
        assert shared_server_series(metric_names(expression)) - names == set(), alert


def autoscaler_queries() -> list[str]:
    """The PromQL the autoscalers run: prometheus-adapter's rules (their series queries, and their metrics
    queries with the series filled in) and KEDA's triggers."""
    rules = yaml.safe_load((KUBERNETES / "prometheus-adapter-values.yaml").read_text())["rules"]
    queries = []
    for rule in (*rules["custom"], *rules["external"]):
        series = rule["name"]["matches"].strip("^$")
        filled = rule["metricsQuery"].replace("<<.Series>>", series).replace("<<.LabelMatchers>>,", "")
        queries += [rule["seriesQuery"], filled.replace("{<<.LabelMatchers>>}", "").replace("<<.GroupBy>>", "pod")]
    keda = yaml.safe_load_all((KUBERNETES / "keda.yaml").read_text())
    return queries + [trigger["metadata"]["query"] for doc in keda for trigger in doc["spec"]["triggers"]]


def test_every_series_and_label_the_autoscalers_read_is_exported(exported):
    """The series, and each label value a query selects on (`service_name="Embento"`, `model_service="…"`)."""
    from runners import MODEL_SERVICES

    samples = [(sample["name"], sample["labels"] or "") for sample in SAMPLE.finditer(exported)]
    queues = " ".join(labels for name, labels in samples if name == "embento_queued_items")
    served = set(re.findall(r'model_service="(\w+)"', queues))  # the model services of this server
    for query in autoscaler_queries():
        for name in metric_names(query):
            matchers = re.findall(rf"{name}\{{([^}}]*)\}}", query)
            wanted = {m for group in matchers for m in re.findall(r'\w+="[^"]+"', group)}
            others = {f'model_service="{s}"' for s in set(MODEL_SERVICES) - served}  # not served by this server
            assert any(n == name and wanted - others <= set(labels.split(",")) for n, labels in samples), (query, name)


def test_the_series_alerts_rely_on_hold_what_they_say(exported, client):
    assert metric(exported, "embento_ready") == 1  # the server passed /readyz before the tests began
    assert metric(exported, "embento_max_queued_items") == 8192  # the server's max_queued_items (the default)
    # At zero before any refusal, so that a rate over them has a series from the start.
    assert 'embento_rejected_requests_total{model_service="TextEmbedder",reason="queue_full"}' in exported
    assert f'embento_model_failed_inputs_total{{model="{MINILM}"}}' in exported
    for service in ("Embento", "TextEmbedder", "Reranker"):
        rss = metric(exported, "embento_process_resident_memory_bytes", service=service)
        assert 20 * 2**20 < rss < 16 * 2**30, (service, rss)  # a live Python process, in bytes


# `promtool test rules` input: a sick server and a well one; each alert fires for the sick one only.
SERIES = {
    "embento_ready": ("0x20", "1x20"),
    'embento_requests_total{model="m",status="200"}': ("0+60x20", "0+60x20"),
    'embento_requests_total{model="m",status="500"}': ("0+10x20", "0x20"),
    'embento_rejected_requests_total{model_service="TextEmbedder",reason="queue_full"}': ("0+5x20", "0x20"),
    'embento_queued_items{model_service="TextEmbedder",pid="1"}': ("7000x20", "100x20"),
    'embento_queued_tokens{model_service="TextEmbedder",pid="1"}': ("1000x20", "1000x20"),
    "embento_max_queued_items": ("8192x20", "8192x20"),
    "embento_max_queued_tokens": ("2000000x20", "2000000x20"),
    'embento_cache_errors_total{model="m",tier="redis"}': ("0+5x20", "0x20"),
    'embento_tenant_throttled_total{tenant="acme",limit="tokens"}': ("0+5x20", "0x20"),
    'embento_model_call_resends_total{model_service="TextEmbedder"}': ("0x5 3+3x14", "0x20"),
    'embento_model_loads_total{model="m",outcome="failed"}': ("0x7 1x13", "0x20"),
    # Live waits: the sick server's under 100 ms one time in ten, the well one's always.
    **{
        f'embento_queue_wait_seconds_bucket{{model_service="TextEmbedder",job_class="live",le="{le}"}}': values
        for le, values in (("0.1", ("0+1x20", "0+10x20")), ("0.25", ("0+10x20",) * 2), ("+Inf", ("0+10x20",) * 2))
    },
}
FIRES = {  # alert -> (minutes in, the labels it fires with besides instance and severity)
    "EmbentoNotReady": (6, {}),
    "EmbentoQueueNearBound": (6, {"model_service": "TextEmbedder"}),
    "EmbentoHigh5xxRatio": (16, {}),
    "EmbentoSustained429s": (18, {"model_service": "TextEmbedder", "reason": "queue_full"}),
    "EmbentoRedisCacheFailing": (12, {}),
    "EmbentoTenantThrottled": (12, {"tenant": "acme", "limit": "tokens"}),
    "EmbentoModelServiceSilent": (10, {"model_service": "TextEmbedder"}),
    "EmbentoModelLoadFailed": (8, {"model": "m"}),
    "EmbentoLiveQueriesWaiting": (12, {"model_service": "TextEmbedder"}),
}


def with_instance(series: str, instance: str) -> str:
    name, _, labels = series.partition("{")
    return f'{name}{{instance="{instance}"{"," + labels if labels else "}"}'


def rendered(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda match: labels[match.group(1)], template)


def rules_unit_test() -> dict:
    rules = {rule["alert"]: rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]}
    cases = []
    for alert, (minute, extra) in FIRES.items():
        labels = {"instance": "sick", **extra}
        annotations = {key: rendered(text, labels) for key, text in rules[alert]["annotations"].items()}
        expected = {"exp_labels": {**labels, **rules[alert]["labels"]}, "exp_annotations": annotations}
        cases += [
            {"eval_time": f"{minute}m", "alertname": alert, "exp_alerts": [expected]},
            {"eval_time": "2m", "alertname": alert, "exp_alerts": []},
        ]  # not for long enough yet
    inputs = [
        {"series": with_instance(series, instance), "values": values}
        for series, per_instance in SERIES.items()
        for instance, values in zip(("sick", "well"), per_instance)
    ]
    return {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": inputs, "alert_rule_test": cases}],
    }


def test_promtool_accepts_the_rules_and_each_alert_fires_when_it_should(tmp_path):
    if shutil.which("promtool") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        apt_install(["prometheus"], recommends=False, timeout_s=600)  # Debian's package carries promtool
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed and Debian's prometheus package could not be installed")
    result = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "SUCCESS: 9 rules found" in result.stdout, result.stdout + result.stderr
    unit_test = tmp_path / "alerts_test.yaml"
    unit_test.write_text(yaml.safe_dump(rules_unit_test()))
    result = subprocess.run(["promtool", "test", "rules", str(unit_test)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
