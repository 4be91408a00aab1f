"""The deployment files agree with the code: service names, ports, probe paths, GPU requests, the network
policy, autoscaling and disruption budgets, and BentoCloud's schema, for the model services the example
configuration needs. Every Kubernetes object is checked against the Kubernetes API's own types (the official
Python client's models): a field the API server's strict validation would refuse fails here."""

from __future__ import annotations

import copy
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from commands.build import project_version
from config.settings import load_config
from models.kinds import spec
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
PORT = 3000
# Kubernetes' restricted Pod Security Standard, the rules its admission controller applies to a pod
# (https://kubernetes.io/docs/concepts/security/pod-security-standards/: baseline's and restricted's).
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
RESTRICTED_ADDED_CAPABILITIES = {"NET_BIND_SERVICE"}
ALLOWED_SECCOMP_TYPES = {"RuntimeDefault", "Localhost"}
ALLOWED_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
IMAGE_TEMP_DIR = Path("/tmp")  # Python's temporary folder in the image, which sets no TMPDIR


@pytest.fixture(scope="module")
def needed_services() -> set[str]:
    """The model services a Bento built with deploy/embento.yaml holds."""
    config = load_config({"EMBENTO_CONFIG": str(DEPLOY / "embento.yaml")})
    assert all(m.kind != "auto" for m in config.models)  # so this needs no checkpoint
    return {spec(m.kind).model_service for m in config.models}


# Files beside the kustomization that it does not list: KEDA's alternative to autoscaling.yaml, and the rules
# for prometheus-adapter, which runs apart.
NOT_KUSTOMIZED = {"keda.yaml", "prometheus-adapter-values.yaml"}
# The Kubernetes client's model of each kind the manifests hold.
API_TYPES = {
    ("apps/v1", "Deployment"): "V1Deployment",
    ("v1", "Service"): "V1Service",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
}
# KEDA's ScaledObject (keda.sh/v1alpha1, KEDA 2.x): the fields of its spec and of a Prometheus trigger's metadata.
SCALED_OBJECT_FIELDS = {
    "spec": {
        "scaleTargetRef",
        "pollingInterval",
        "initialCooldownPeriod",
        "cooldownPeriod",
        "idleReplicaCount",
        "minReplicaCount",
        "maxReplicaCount",
        "advanced",
        "fallback",
        "triggers",
    },
    "scaleTargetRef": {"apiVersion", "kind", "name", "envSourceContainerName"},
    "advanced": {"horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount", "scalingModifiers"},
    "horizontalPodAutoscalerConfig": {"name", "behavior"},
    "trigger": {"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"},
    "prometheus": {
        "serverAddress",
        "query",
        "threshold",
        "activationThreshold",
        "namespace",
        "customHeaders",
        "ignoreNullValues",
        "queryParameters",
        "unsafeSsl",
    },
}


def load_documents(*names: str) -> list[dict]:
    return [doc for name in names for doc in yaml.safe_load_all((KUBERNETES / name).read_text())]


@pytest.fixture(scope="module")
def manifests() -> list[dict]:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = sorted(p.name for p in KUBERNETES.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(set(files) - NOT_KUSTOMIZED)
    assert kustomization["images"][0]["newTag"] == f"{project_version(ROOT)}-cuda"
    return load_documents(*kustomization["resources"])


def api_problems(value: object, annotation: Any, path: str) -> list[str]:
    """The fields of `value` that the Kubernetes type `annotation` (a client model, or a field's annotation of
    one) has not, and the required ones it lacks, at any depth. (The client's own `from_dict` drops unknown
    fields, and types quantities as strings where the API server also takes numbers: neither serves here.)"""
    from pydantic import BaseModel

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return api_problems(value, args[0], path)
    if origin in (typing.Union, types.UnionType):  # optional, or int-or-string (no model either way)
        members = [arg for arg in args if arg is not type(None)]
        return api_problems(value, members[0], path) if len(members) == 1 else []
    if origin is list:
        assert isinstance(value, list), f"{path}: a list"
        return [p for i, item in enumerate(value) for p in api_problems(item, args[0], f"{path}[{i}]")]
    if origin is dict:
        assert isinstance(value, dict), f"{path}: an object"
        return [p for key, item in value.items() for p in api_problems(item, args[1], f"{path}.{key}")]
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return []  # a string, a number, a boolean, a quantity, an int-or-string
    assert isinstance(value, dict), f"{path}: {annotation.__name__} is an object"
    fields = {
        field.serialization_alias or annotation.attribute_map[name]: field
        for name, field in annotation.model_fields.items()
    }
    found = [f"{path}.{key}: no such field" for key in value if key not in fields]
    found += [f"{path}.{key}: required" for key, field in fields.items() if field.is_required() and key not in value]
    for key, item in value.items():
        if key in fields:
            found += api_problems(item, fields[key].annotation, f"{path}.{key}")
    return found


def api_violations(document: dict) -> list[str]:
    """What the Kubernetes API would refuse in `document`: an unknown kind, an unknown field (strict field
    validation) or a missing required one."""
    from kubernetes import client

    type_name = API_TYPES.get((document.get("apiVersion"), document.get("kind")))
    if type_name is None:
        return [f"no Kubernetes type for {document.get('apiVersion')} {document.get('kind')}"]
    return api_problems(document, getattr(client, type_name), f"{document['kind']} {document['metadata']['name']}")


def test_every_object_is_one_the_kubernetes_api_accepts(manifests):
    assert [problem for document in manifests for problem in api_violations(document)] == []


@pytest.mark.parametrize(
    "kind, name, change",
    [
        ("HorizontalPodAutoscaler", "embento", lambda d: d["spec"].__setitem__("minReplica", 2)),  # misspelt
        (
            "HorizontalPodAutoscaler",
            "embento",
            lambda d: d["spec"]["metrics"][0]["pods"]["target"].__setitem__("averageValues", "48"),
        ),
        ("HorizontalPodAutoscaler", "embento", lambda d: d["spec"].pop("scaleTargetRef")),  # required
        (  # required, deep
            "HorizontalPodAutoscaler",
            "embento",
            lambda d: d["spec"]["behavior"]["scaleDown"]["policies"][0].pop("periodSeconds"),
        ),
        (  # a misspelt security setting would be dropped unnoticed by a lenient server
            "Deployment",
            "embento",
            lambda d: container(d)["securityContext"].__setitem__("readOnlyRootFileSystem", True),
        ),
        ("Deployment", "embento", lambda d: d["spec"]["template"]["spec"]["volumes"][0]["emptyDir"].update(size="1Gi")),
    ],
)
def test_the_api_check_catches_a_wrong_field(manifests, kind, name, change):
    document = copy.deepcopy(of_kind(manifests, kind)[name])
    change(document)
    assert api_violations(document)


def of_kind(manifests: list[dict], kind: str) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in manifests if doc["kind"] == kind}


def container(deployment: dict) -> dict:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def flag_values(args: list[str], flag: str) -> list[str]:
    return [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{flag}=")]


def restricted_violations(pod: dict) -> list[str]:
    """What in a pod spec the restricted Pod Security Standard refuses (`api_violations` finds unknown fields)."""
    found = []
    pod_context = pod.get("securityContext", {})
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    contexts = [(c["name"], c.get("securityContext", {})) for c in containers]
    found += [f"host namespace {key}" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    found += [f"sysctl {s['name']}" for s in pod_context.get("sysctls", [])]  # none is needed, none is allowed
    for volume in pod.get("volumes", []):
        (kind,) = set(volume) - {"name"}
        if kind not in RESTRICTED_VOLUME_TYPES:
            found.append(f"volume {volume['name']} of type {kind}")
    for name, context in contexts:
        container = next(c for c in containers if c["name"] == name)
        found += [f"{name}: host port" for port in container.get("ports", []) if port.get("hostPort")]
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities do not drop ALL")
        found += [
            f"{name}: adds capability {cap}" for cap in set(capabilities.get("add", [])) - RESTRICTED_ADDED_CAPABILITIES
        ]
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot is not true")
        if 0 in (context.get("runAsUser"), pod_context.get("runAsUser")):
            found.append(f"{name}: runs as uid 0")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {})).get("type")
        if seccomp not in ALLOWED_SECCOMP_TYPES:
            found.append(f"{name}: seccompProfile {seccomp}")
        for options in (pod_context.get("seLinuxOptions", {}), context.get("seLinuxOptions", {})):
            if set(options) - {"type", "level"} or options.get("type", "") not in ALLOWED_SELINUX_TYPES:
                found.append(f"{name}: seLinuxOptions {options}")
        for profile in (pod_context.get("appArmorProfile", {}), context.get("appArmorProfile", {})):
            if profile.get("type") == "Unconfined":
                found.append(f"{name}: appArmorProfile Unconfined")
    return found


def test_every_pod_meets_the_restricted_pod_security_standard(manifests):
    for name, deployment in of_kind(manifests, "Deployment").items():
        assert restricted_violations(deployment["spec"]["template"]["spec"]) == [], name


@pytest.mark.parametrize(
    "change, violation",
    [
        (lambda pod: pod["securityContext"].pop("seccompProfile"), "seccompProfile None"),
        (
            lambda pod: pod["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
            "adds capability SYS_ADMIN",
        ),
        (
            lambda pod: pod["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
            "capabilities do not drop ALL",
        ),
        (
            lambda pod: pod["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
            "allowPrivilegeEscalation is not false",
        ),
        (lambda pod: pod["securityContext"].pop("runAsNonRoot"), "runAsNonRoot is not true"),
        (
            lambda pod: pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
            "volume host of type hostPath",
        ),
    ],
)
def test_the_pod_security_check_catches_each_kind_of_violation(manifests, change, violation):
    pod = copy.deepcopy(of_kind(manifests, "Deployment")["embento"]["spec"]["template"]["spec"])
    change(pod)
    assert any(found.endswith(violation) for found in restricted_violations(pod)), restricted_violations(pod)


def test_every_container_writes_only_to_an_emptydir_that_holds_the_images_home(manifests):
    """A read-only root: the image's HOME (BentoML's home, the caches, cache_dir) and the temporary folder lie
    under an emptyDir mounted writable."""
    from bento.packaging.container_image import WRITABLE_HOME

    for name, deployment in of_kind(manifests, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        empty_dirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        main = container(deployment)
        assert main["securityContext"]["readOnlyRootFilesystem"] is True, name
        writable = [
            Path(m["mountPath"])
            for m in main.get("volumeMounts", [])
            if m["name"] in empty_dirs and not m.get("readOnly")
        ]
        for path in (Path(WRITABLE_HOME), IMAGE_TEMP_DIR):
            assert any(path.is_relative_to(mount) for mount in writable), (name, path)
        assert "HOME" not in {item["name"] for item in main.get("env", [])}, name  # the image's HOME stands


def test_one_deployment_and_service_per_model_service(manifests, needed_services):
    deployments, services = of_kind(manifests, "Deployment"), of_kind(manifests, "Service")
    model_services = {name: d for name, d in deployments.items() if flag_values(container(d)["args"], "--service-name")}
    assert {flag_values(container(d)["args"], "--service-name")[0] for d in model_services.values()} == needed_services
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        main = container(deployment)
        assert main["args"][0] == "start-http-server"  # the image's entrypoint runs BentoML's server with it
        assert main["ports"] == [{"name": "http", "containerPort": PORT}]
        assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert main["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
        assert pod["spec"]["securityContext"]["runAsUser"] == 1034
        gpus = main["resources"].get("limits", {}).get("nvidia.com/gpu")
        assert gpus == (1 if name in model_services else None)
        if name in model_services:  # what the CUDA Bento, built where no GPU is, declares as BentoML `resources`
            from bento.serving.placement import place_service
            from config.settings import ModelConfig

            assert place_service([ModelConfig()], len(model_services), 0, "cuda").gpus == gpus
        (service,) = [
            s for s in services.values() if s["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        ]
        assert service["spec"]["ports"] == [{"name": "http", "port": PORT, "targetPort": "http"}]


def model_service_of(deployment: dict) -> str | None:
    """The BentoML service a model-service Deployment runs; None for the gateway."""
    names = flag_values(container(deployment)["args"], "--service-name")
    return names[0] if names else None


def adapter_rules() -> dict[str, dict]:
    """prometheus-adapter's rules by the metric name each serves."""
    values = yaml.safe_load((KUBERNETES / "prometheus-adapter-values.yaml").read_text())["rules"]
    return {rule["name"]["as"]: rule for rule in (*values["custom"], *values["external"])}


def test_every_deployment_has_an_autoscaler_and_a_disruption_budget(manifests):
    deployments = of_kind(manifests, "Deployment")
    autoscalers = {
        h["spec"]["scaleTargetRef"]["name"]: h for h in of_kind(manifests, "HorizontalPodAutoscaler").values()
    }
    assert set(autoscalers) == set(deployments)
    for name, deployment in deployments.items():
        assert "replicas" not in deployment["spec"], f"{name}: its HPA sets replicas; `kubectl apply` would reset them"
        assert autoscalers[name]["spec"]["scaleTargetRef"]["kind"] == "Deployment"
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"].items()
        budgets = [
            b
            for b in of_kind(manifests, "PodDisruptionBudget").values()
            if b["spec"]["selector"]["matchLabels"].items() <= pod_labels
        ]
        assert len(budgets) == 1, name
    assert autoscalers["embento"]["spec"]["minReplicas"] >= 2  # one lost gateway pod leaves one serving


def test_the_gateway_scales_on_requests_in_flight_and_each_model_service_on_its_queue(manifests, needed_services):
    rules = adapter_rules()
    served = set()
    for name, deployment in of_kind(manifests, "Deployment").items():
        (hpa,) = [
            h
            for h in of_kind(manifests, "HorizontalPodAutoscaler").values()
            if h["spec"]["scaleTargetRef"]["name"] == name
        ]
        (metric,) = hpa["spec"]["metrics"]
        service = model_service_of(deployment)
        if service is None:
            assert metric["type"] == "Pods"
            rule = rules[metric["pods"]["metric"]["name"]]
            assert rule["name"]["matches"] == "^bentoml_service_request_in_progress$"
            assert 'service_name="Embento"' in rule["metricsQuery"]
        else:
            assert metric["type"] == "External"
            assert metric["external"]["metric"]["selector"]["matchLabels"] == {"model_service": service}
            rule = rules[metric["external"]["metric"]["name"]]
            assert rule["name"]["matches"] == "^embento_queued_items$"
            assert "by (model_service)" in rule["metricsQuery"]  # the selector's label
            served.add(service)
    assert served == needed_services


def test_keda_holds_the_same_signals_and_targets_as_the_autoscalers(manifests):
    from kubernetes import client

    hpas = {
        h["spec"]["scaleTargetRef"]["name"]: h["spec"] for h in of_kind(manifests, "HorizontalPodAutoscaler").values()
    }
    rules = adapter_rules()
    scaled = {doc["spec"]["scaleTargetRef"]["name"]: doc for doc in load_documents("keda.yaml")}
    assert set(scaled) == set(hpas)
    for name, document in scaled.items():
        assert (document["apiVersion"], document["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
        scaled_spec, hpa = document["spec"], hpas[name]
        assert set(scaled_spec) <= SCALED_OBJECT_FIELDS["spec"]
        assert set(scaled_spec["scaleTargetRef"]) <= SCALED_OBJECT_FIELDS["scaleTargetRef"]
        assert set(scaled_spec["advanced"]) <= SCALED_OBJECT_FIELDS["advanced"]
        config = scaled_spec["advanced"]["horizontalPodAutoscalerConfig"]
        assert set(config) <= SCALED_OBJECT_FIELDS["horizontalPodAutoscalerConfig"]
        assert api_problems(config["behavior"], client.V2HorizontalPodAutoscalerBehavior, name) == []
        assert config["behavior"] == hpa["behavior"]
        replicas = (scaled_spec["minReplicaCount"], scaled_spec["maxReplicaCount"])
        assert replicas == (hpa["minReplicas"], hpa["maxReplicas"])
        (trigger,) = scaled_spec["triggers"]
        assert set(trigger) <= SCALED_OBJECT_FIELDS["trigger"] and trigger["type"] == "prometheus"
        assert set(trigger["metadata"]) <= SCALED_OBJECT_FIELDS["prometheus"]
        assert trigger["metricType"] == "AverageValue"  # divided by the replicas, as the HPA's AverageValue
        (metric,) = hpa["metrics"]
        source = metric["pods"] if metric["type"] == "Pods" else metric["external"]
        assert trigger["metadata"]["threshold"] == source["target"]["averageValue"]
        series = rules[source["metric"]["name"]]["name"]["matches"].strip("^$")
        assert series in trigger["metadata"]["query"]
        for label, value in source["metric"].get("selector", {}).get("matchLabels", {}).items():
            assert f'{label}="{value}"' in trigger["metadata"]["query"]


def test_gateway_depends_on_each_model_service_by_its_kubernetes_service(manifests, needed_services):
    deployments, services = of_kind(manifests, "Deployment"), of_kind(manifests, "Service")
    (gateway,) = [d for d in deployments.values() if not flag_values(container(d)["args"], "--service-name")]
    depends = dict(value.split("=", 1) for value in flag_values(container(gateway)["args"], "--depends"))
    assert set(depends) == needed_services
    for service_name, url in depends.items():
        host, port = url.removeprefix("http://").split(":")
        target = services[host]["spec"]["selector"]
        runner = next(d for d in deployments.values() if d["spec"]["selector"]["matchLabels"] == target)
        assert flag_values(container(runner)["args"], "--service-name") == [service_name]
        assert int(port) == services[host]["spec"]["ports"][0]["port"]
    # A gateway pod runs no model: one gateway worker per core it requests, a number the config accepts.
    env = {item["name"]: item.get("value") for item in container(gateway)["env"]}
    from config.settings import EmbentoConfig

    workers = EmbentoConfig(gateway_workers=env["EMBENTO_GATEWAY_WORKERS"]).gateway_workers
    assert workers == int(container(gateway)["resources"]["requests"]["cpu"])


def test_model_services_take_traffic_only_from_the_gateway(manifests):
    (policy,) = of_kind(manifests, "NetworkPolicy").values()
    selects = policy["spec"]["podSelector"]["matchLabels"].items()
    (rule,) = policy["spec"]["ingress"]
    (source,) = rule["from"]
    for deployment in of_kind(manifests, "Deployment").values():
        labels = deployment["spec"]["template"]["metadata"]["labels"].items()
        is_runner = bool(flag_values(container(deployment)["args"], "--service-name"))
        assert (selects <= labels) == is_runner
        assert (source["podSelector"]["matchLabels"].items() <= labels) == (not is_runner)
    assert rule["ports"] == [{"protocol": "TCP", "port": PORT}]
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_bentocloud_file_follows_bentomls_schema_and_the_code(needed_services):
    from bentoml._internal.cloud.schemas.schemasv2 import DeploymentConfigSchema
    from bentoml._internal.utils.cattr import bentoml_cattr

    from service import Gateway

    config = yaml.safe_load((DEPLOY / "bentocloud.yaml").read_text())
    assert config["bento"] == f"embento:{project_version(ROOT)}-cuda"
    schema = bentoml_cattr.structure(
        {k: v for k, v in config.items() if k not in ("name", "bento")}, DeploymentConfigSchema
    )
    assert set(schema.services) == needed_services | {Gateway.name}
    assert all(s.scaling.max_replicas >= (s.scaling.min_replicas or 0) for s in schema.services.values())
    assert schema.services[Gateway.name].instance_type.startswith("cpu")
    assert all(schema.services[name].instance_type.startswith("gpu") for name in needed_services)
    for name, service in schema.services.items():  # scaling: a policy, and the concurrency BentoCloud scales on
        assert service.scaling.policy.scale_down_stabilization_window > 0, name
        assert service.config_overrides["traffic"]["concurrency"] > 0, name


def test_bentocloud_scales_on_the_same_targets_as_kubernetes(manifests):
    from gateway.queue.model_calls import GPU_CALLS_IN_FLIGHT
    from service import Gateway

    services = yaml.safe_load((DEPLOY / "bentocloud.yaml").read_text())["services"]
    hpas = {
        h["spec"]["scaleTargetRef"]["name"]: h["spec"] for h in of_kind(manifests, "HorizontalPodAutoscaler").values()
    }
    (gateway_metric,) = hpas["embento"]["metrics"]
    gateway = services[Gateway.name]
    assert gateway["config_overrides"]["traffic"]["concurrency"] == int(
        gateway_metric["pods"]["target"]["averageValue"]
    )
    assert gateway["scaling"]["min_replicas"] == hpas["embento"]["minReplicas"]
    for name, service in services.items():
        if name != Gateway.name:  # a replica takes at least one gateway worker's calls before another is added
            assert service["config_overrides"]["traffic"]["concurrency"] >= GPU_CALLS_IN_FLIGHT


@pytest.mark.server
def test_probe_paths_and_port_are_bentomls(client):
    from bentoml._internal.configuration.containers import BentoMLContainer

    assert BentoMLContainer.http.port.get() == PORT
    for path in ("/livez", "/readyz"):
        assert client.get(path).status_code == 200


def test_deploy_folder_has_nothing_unchecked():
    # image/base-image.sh: tests/packaging/test_container.py builds its base with it; grafana/ and prometheus/:
    # tests/server/test_observability.py.
    assert sorted(p.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("*") if p.is_file()) == [
        "bentocloud.yaml",
        "embento.yaml",
        "grafana/embento.json",
        "image/base-image.sh",
        "kubernetes/autoscaling.yaml",
        "kubernetes/clip-embedder.yaml",
        "kubernetes/disruption-budgets.yaml",
        "kubernetes/gateway.yaml",
        "kubernetes/keda.yaml",
        "kubernetes/kustomization.yaml",
        "kubernetes/network-policy.yaml",
        "kubernetes/prometheus-adapter-values.yaml",
        "kubernetes/reranker.yaml",
        "kubernetes/text-embedder.yaml",
        "prometheus/alerts.yaml",
    ]
