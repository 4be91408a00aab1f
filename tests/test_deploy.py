"""The deployment files agree with the code: service names, ports, probe paths, GPU requests, the network
policy, and BentoCloud's schema, for the model services the example configuration needs."""

from __future__ import annotations

import pytest
import yaml

from cli import project_version
from models.config import load_config
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
PORT = 3000


@pytest.fixture(scope="module")
def needed_services() -> set[str]:
    """The model services a Bento built with deploy/embento.yaml holds."""
    from service import RUNNERS

    config = load_config({"EMBENTO_CONFIG": str(DEPLOY / "embento.yaml")})
    assert all(m.kind != "auto" for m in config.models)  # so this needs no checkpoint
    return {RUNNERS[m.kind][1].name for m in config.models}


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


def test_one_deployment_and_service_per_model_service(manifests, needed_services):
    deployments, services = of_kind(manifests, "Deployment"), of_kind(manifests, "Service")
    runners = {name: d for name, d in deployments.items() if flag_values(container(d)["args"], "--service-name")}
    assert {flag_values(container(d)["args"], "--service-name")[0] for d in runners.values()} == needed_services
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
        assert gpus == (1 if name in runners else None)
        if name in runners:  # what the CUDA Bento, built where no GPU is, declares as BentoML `resources`
            from models.config import ModelConfig
            from runners.placement import place_service

            assert place_service([ModelConfig()], len(runners), 0, "cuda").gpus == gpus
        (service,) = [s for s in services.values() if s["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]]
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
    from models.config import EmbentoConfig

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
    schema = bentoml_cattr.structure({k: v for k, v in config.items() if k not in ("name", "bento")},
                                     DeploymentConfigSchema)
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
    # image/base-image.sh: tests/test_container.py builds its base with it; grafana/ and prometheus/:
    # tests/test_observability.py.
    assert sorted(p.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("*") if p.is_file()) == [
        "bentocloud.yaml", "embento.yaml", "grafana/embento.json", "image/base-image.sh",
        "kubernetes/clip-embedder.yaml", "kubernetes/gateway.yaml",
        "kubernetes/kustomization.yaml", "kubernetes/network-policy.yaml", "kubernetes/reranker.yaml",
        "kubernetes/text-embedder.yaml", "prometheus/alerts.yaml",
    ]
