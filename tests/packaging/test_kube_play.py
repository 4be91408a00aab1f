"""The Kubernetes manifests run as written: `kubectl kustomize deploy/kubernetes`, played by `podman kube play`
(Debian's podman 4.3) with the CPU image container_image.py builds; the pods pass the probes their manifests
declare, and the gateway pod answers through the model-service pods with what the host computes.

Where podman's play differs from a cluster, the test bridges it, in `playable` and `cluster`, and nowhere else:
- The image: the kustomization names a registry's; the test sets the local one (what `kustomize edit set
  image` does). The GPU limit goes: a CPU image, no device plugin.
- The test's Bento serves MiniLM and a reranker, no CLIP model: the ClipEmbedder Deployment, its Service and
  the gateway's `--depends` on it go, as in a deployment of such a Bento.
- The `embento` Secret's keys are optional and there is no Secret: a cluster leaves those variables unset;
  podman 4.3 ignores `optional` and stops, so the test drops them.
- Services, DNS: podman 4.3 plays Pods and Deployments, not Services (nor HorizontalPodAutoscalers,
  PodDisruptionBudgets or NetworkPolicies: with no `replicas` and no HPA each Deployment is one pod, and no
  policy is enforced). The model-service pods start first; the gateway pod then gets `hostAliases` naming
  each Service after the IP of the one pod its selector matches, which is where a cluster's DNS and Service
  IP lead with one replica. The pods share an internal network: they reach each other, nothing outside.
- Ports: podman 4.3 publishes each containerPort on the host at the same number, so three pods on port 3000
  clash; each pod gets a free hostPort instead. Nothing here uses them.
- emptyDir: podman 4.3 makes a named volume of the volume's name, which every pod naming it `tmp` would
  share; each Deployment's emptyDir gets a name of its own, as each pod has its own in a cluster.
- Probes: podman 4.3 runs no readiness or startup probes, and runs the liveness probe as `curl` from a
  systemd timer (the image has no curl; these machines no systemd). The test runs every httpGet probe the
  manifests declare itself, inside its pod, as the kubelet would against the pod's port.
- Pod-level securityContext (runAsUser, runAsNonRoot, seccompProfile) is not played by podman 4.3: the test
  checks that the image's user, which the pods run as, is the manifests' runAsUser. Container-level
  readOnlyRootFilesystem, dropped capabilities and memory limits are played.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testkit.apt import apt_install
from testkit.ports import free_port
from tests.conftest import ROOT
from tests.packaging.container_image import IMAGE, SENTENCES, assert_serves_what_the_host_computes, probe, run

pytestmark = pytest.mark.container

# The model services of the Bento container_image.build_image makes (MiniLM: TextEmbedder; the reranker).
SERVED = ("TextEmbedder", "Reranker")
NETWORK = "embento-kube"
COMPONENT = "app.kubernetes.io/component"
PROBE_KINDS = ("startupProbe", "readinessProbe", "livenessProbe")
# Runs inside a pod's container: each (path, port) until it answers 200, as the kubelet's probes do.
RUN_PROBES = """
import json, sys, time, urllib.request
deadline = time.monotonic() + 300
answered = {}
for path, port in json.loads(sys.argv[1]):
    while True:
        try:
            answered[path] = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).status
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                answered[path] = str(exc)
                break
            time.sleep(1)
print(json.dumps(answered))
"""
REACH_OUT = "import socket; socket.create_connection(('pypi.org', 443), timeout=5)"
METRICS = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:3000/metrics').read().decode())"
ANSWERED = re.compile(
    r'^bentoml_service_request_duration_seconds_count\{endpoint="([^"]+)",http_response_code="200".*\} (\S+)$', re.M
)


def attempt(command: list[str], engine: dict[str, str]) -> subprocess.CompletedProcess:
    """A command that may fail, its output kept."""
    return subprocess.run(command, env=engine, capture_output=True, text=True, check=False)


def kubectl() -> str:
    """The kubectl on PATH, else Debian's (kubernetes-client): either reads the kustomization."""
    if shutil.which("kubectl") is None:
        result = apt_install(("kubernetes-client",))
        assert result.returncode == 0, f"apt-get: {result.stdout[-4000:]}{result.stderr[-4000:]}"
    return "kubectl"


def kustomized() -> list[dict]:
    output = run([kubectl(), "kustomize", str(ROOT / "deploy" / "kubernetes")], dict(os.environ)).stdout
    return [document for document in yaml.safe_load_all(output) if document]


def container_of(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def names_a_served_service(arg: str) -> bool:
    """Whether an argument naming a model service (`--service-name=X`, `--depends=X=url`) names one the test's
    Bento has; other arguments pass."""
    option, _, value = arg.partition("=")
    return option not in ("--service-name", "--depends") or value.split("=")[0] in SERVED


def serves(deployment: dict) -> bool:
    """Whether the test's Bento has the model service a Deployment runs (the gateway, with no --service-name,
    always runs)."""
    args = container_of(deployment)["args"]
    return all(names_a_served_service(arg) for arg in args if arg.startswith("--service-name="))


def playable(documents: list[dict]) -> list[dict]:
    """The Deployments, bridged for podman 4.3 and the test's Bento (the module's docstring says why)."""
    deployments = [d for d in documents if d["kind"] == "Deployment" and serves(d)]
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        container = container_of(deployment)
        container["image"] = IMAGE
        container["resources"]["limits"].pop("nvidia.com/gpu", None)
        container["args"] = [arg for arg in container["args"] if names_a_served_service(arg)]
        container["env"] = [e for e in container.get("env", []) if "secretKeyRef" not in e.get("valueFrom", {})]
        for port in container["ports"]:
            port["hostPort"] = free_port()
        volumes = {volume["name"]: f"{deployment['metadata']['name']}-{volume['name']}" for volume in pod["volumes"]}
        for volume in [*pod["volumes"], *container["volumeMounts"]]:
            volume["name"] = volumes[volume["name"]]
    return deployments


def component(deployment: dict) -> str:
    return deployment["spec"]["template"]["metadata"]["labels"][COMPONENT]


def play(engine: dict[str, str], folder: Path, name: str, deployments: list[dict]) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(deployments))
    run(["podman", "kube", "play", "--network", NETWORK, str(path)], engine)
    return path


def pod_of(engine: dict[str, str], deployment: dict) -> str:
    """The pod podman made of a Deployment: `<name>-pod-0` in podman 4.3, `<name>-pod` later."""
    names = run(["podman", "pod", "ps", "--format", "{{.Name}}"], engine).stdout.split()
    (pod,) = [name for name in names if name.startswith(f"{deployment['metadata']['name']}-pod")]
    return pod


def pod_ip(engine: dict[str, str], pod: str) -> str:
    infra = run(["podman", "pod", "inspect", pod, "--format", "{{.InfraContainerID}}"], engine).stdout.strip()
    networks = run(["podman", "inspect", infra, "--format", "{{json .NetworkSettings.Networks}}"], engine).stdout
    return json.loads(networks)[NETWORK]["IPAddress"]


def host_aliases(documents: list[dict], deployments: list[dict], ips: dict[str, str]) -> list[dict]:
    """Each Service's name on the IP of the one played pod its selector matches."""
    aliases = []
    for service in (d for d in documents if d["kind"] == "Service"):
        selector = service["spec"]["selector"].items()
        matched = [d for d in deployments if selector <= d["spec"]["template"]["metadata"]["labels"].items()]
        if matched and matched[0]["metadata"]["name"] in ips:
            aliases.append({"ip": ips[matched[0]["metadata"]["name"]], "hostnames": [service["metadata"]["name"]]})
    return aliases


@pytest.fixture(scope="module")
def cluster(engine: dict[str, str], image: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict]]:
    """The played Deployments, by name: each with its manifest and its container's name."""
    folder = tmp_path_factory.mktemp("kube")
    documents = kustomized()
    deployments = playable(documents)
    model_services = [d for d in deployments if component(d) == "model-service"]
    gateways = [d for d in deployments if component(d) == "gateway"]
    assert len(model_services) == len(SERVED) and len(gateways) == 1, [d["metadata"]["name"] for d in deployments]
    run(["podman", "network", "create", "--internal", NETWORK], engine)
    played = [play(engine, folder, "model-services", model_services)]
    try:
        ips = {d["metadata"]["name"]: pod_ip(engine, pod_of(engine, d)) for d in model_services}
        gateways[0]["spec"]["template"]["spec"]["hostAliases"] = host_aliases(documents, deployments, ips)
        played.append(play(engine, folder, "gateway", gateways))
        yield {
            d["metadata"]["name"]: {"manifest": d, "container": f"{pod_of(engine, d)}-{container_of(d)['name']}"}
            for d in deployments
        }
    finally:
        for path in played:
            attempt(["podman", "kube", "play", "--down", str(path)], engine)
        attempt(["podman", "network", "rm", "--force", NETWORK], engine)


def declared_probes(container: dict) -> list[tuple[str, int]]:
    """(path, port number) of each httpGet probe, its named port resolved as the kubelet does."""
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    probes = [container[kind]["httpGet"] for kind in PROBE_KINDS if kind in container]
    return [(probe["path"], ports.get(probe["port"], probe["port"])) for probe in probes]


def test_every_pod_passes_the_probes_its_manifest_declares(engine, cluster):
    for name, pod in cluster.items():
        probes = declared_probes(container_of(pod["manifest"]))
        assert {path for path, _ in probes} >= {"/readyz", "/livez"}, (name, probes)
        answered = run(["podman", "exec", pod["container"], "python", "-c", RUN_PROBES, json.dumps(probes)], engine)
        assert json.loads(answered.stdout) == {path: 200 for path, _ in probes}, name


def answered_requests(engine: dict[str, str], container: str) -> float:
    """The requests a server answered 200 to, its probes' apart (BentoML's own metrics)."""
    metrics = run(["podman", "exec", container, "python", "-c", METRICS], engine).stdout
    return sum(float(count) for endpoint, count in ANSWERED.findall(metrics) if endpoint not in ("/readyz", "/livez"))


def test_the_gateway_pod_answers_through_the_model_service_pods_with_the_hosts_vectors(engine, cluster, host_results):
    (gateway,) = [pod for pod in cluster.values() if component(pod["manifest"]) == "gateway"]
    model_services = [pod["container"] for pod in cluster.values() if component(pod["manifest"]) == "model-service"]
    before = {container: answered_requests(engine, container) for container in model_services}
    assert_serves_what_the_host_computes(probe(engine, gateway["container"], SENTENCES), host_results)
    for container in model_services:  # the embeddings from one pod, the scores from the other
        assert answered_requests(engine, container) > before[container], container


def test_pods_run_as_the_manifests_user_on_a_read_only_root_and_reach_nothing_outside(engine, cluster):
    for pod in cluster.values():
        manifest, container = pod["manifest"], pod["container"]
        user = manifest["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        assert run(["podman", "exec", container, "id", "-u"], engine).stdout.strip() == str(user)
        assert container_of(manifest)["securityContext"]["readOnlyRootFilesystem"] is True
        write = attempt(["podman", "exec", container, "touch", "/written"], engine)
        assert "Read-only file system" in write.stderr, write
        reach = attempt(["podman", "exec", container, "python", "-c", REACH_OUT], engine)
        assert reach.returncode != 0 and "unreachable" in reach.stderr, reach
