"""The deployment files agree with the code: service names, ports, probe paths, GPU requests, the network
policy, and BentoCloud's schema, for the model services the example configuration needs."""

from __future__ import annotations

import copy
from pathlib import Path

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
# core/v1 field names of the objects the security settings use: the API server's strict field validation
# (kubectl's default) refuses any other, and a misspelt one would otherwise be dropped unnoticed.
FIELDS = {
    "PodSecurityContext": {
        "appArmorProfile",
        "fsGroup",
        "fsGroupChangePolicy",
        "runAsGroup",
        "runAsNonRoot",
        "runAsUser",
        "seLinuxChangePolicy",
        "seLinuxOptions",
        "seccompProfile",
        "supplementalGroups",
        "supplementalGroupsPolicy",
        "sysctls",
        "windowsOptions",
    },
    "SecurityContext": {
        "allowPrivilegeEscalation",
        "appArmorProfile",
        "capabilities",
        "privileged",
        "procMount",
        "readOnlyRootFilesystem",
        "runAsGroup",
        "runAsNonRoot",
        "runAsUser",
        "seLinuxOptions",
        "seccompProfile",
        "windowsOptions",
    },
    "Capabilities": {"add", "drop"},
    "SeccompProfile": {"type", "localhostProfile"},
    "VolumeMount": {"name", "mountPath", "readOnly", "recursiveReadOnly", "subPath", "subPathExpr", "mountPropagation"},
    "EmptyDirVolumeSource": {"medium", "sizeLimit"},
}


@pytest.fixture(scope="module")
def needed_services() -> set[str]:
    """The model services a Bento built with deploy/embento.yaml holds."""
    config = load_config({"EMBENTO_CONFIG": str(DEPLOY / "embento.yaml")})
    assert all(m.kind != "auto" for m in config.models)  # so this needs no checkpoint
    return {spec(m.kind).model_service for m in config.models}


@pytest.fixture(scope="module")
def manifests() -> list[dict]:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = sorted(p.name for p in KUBERNETES.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files
    assert kustomization["images"][0]["newTag"] == f"{project_version(ROOT)}-cuda"
    return [doc for name in files for doc in yaml.safe_load_all((KUBERNETES / name).read_text())]


def of_kind(manifests: list[dict], kind: str) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in manifests if doc["kind"] == kind}


def container(deployment: dict) -> dict:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def flag_values(args: list[str], flag: str) -> list[str]:
    return [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{flag}=")]


def restricted_violations(pod: dict) -> list[str]:
    """What in a pod spec the restricted Pod Security Standard refuses, and any unknown security field."""
    found = []
    pod_context = pod.get("securityContext", {})
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    contexts = [(c["name"], c.get("securityContext", {})) for c in containers]
    for kind, values in [("PodSecurityContext", pod_context), *(("SecurityContext", c) for _, c in contexts)]:
        found += [f"unknown {kind} field {key}" for key in set(values) - FIELDS[kind]]
        found += [
            f"unknown SeccompProfile field {key}"
            for key in set(values.get("seccompProfile", {})) - FIELDS["SeccompProfile"]
        ]
    found += [f"host namespace {key}" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    found += [f"sysctl {s['name']}" for s in pod_context.get("sysctls", [])]  # none is needed, none is allowed
    for volume in pod.get("volumes", []):
        (kind,) = set(volume) - {"name"}
        if kind not in RESTRICTED_VOLUME_TYPES:
            found.append(f"volume {volume['name']} of type {kind}")
        if kind == "emptyDir":
            found += [
                f"unknown EmptyDirVolumeSource field {key}"
                for key in set(volume[kind] or {}) - FIELDS["EmptyDirVolumeSource"]
            ]
    for name, context in contexts:
        container = next(c for c in containers if c["name"] == name)
        found += [f"{name}: host port" for port in container.get("ports", []) if port.get("hostPort")]
        found += [
            f"{name}: unknown VolumeMount field {key}"
            for mount in container.get("volumeMounts", [])
            for key in set(mount) - FIELDS["VolumeMount"]
        ]
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount")
        capabilities = context.get("capabilities", {})
        found += [f"{name}: unknown Capabilities field {key}" for key in set(capabilities) - FIELDS["Capabilities"]]
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
        (
            lambda pod: pod["containers"][0]["securityContext"].update(readOnlyRootFileSystem=True),
            "unknown SecurityContext field readOnlyRootFileSystem",
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
    from bento.container_image import WRITABLE_HOME

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
            from bento.placement import place_service
            from config.settings import ModelConfig

            assert place_service([ModelConfig()], len(model_services), 0, "cuda").gpus == gpus
        (service,) = [
            s for s in services.values() if s["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        ]
        assert service["spec"]["ports"] == [{"name": "http", "port": PORT, "targetPort": "http"}]


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
        "kubernetes/clip-embedder.yaml",
        "kubernetes/gateway.yaml",
        "kubernetes/kustomization.yaml",
        "kubernetes/network-policy.yaml",
        "kubernetes/reranker.yaml",
        "kubernetes/text-embedder.yaml",
        "prometheus/alerts.yaml",
    ]
