"""What `backend: auto` costs at start, and what a Bento saves: seconds from `bentoml serve` to /readyz.

    python bench/start_times.py [--model sentence-transformers/all-MiniLM-L6-v2] [--rounds 2]

Cases, each in a fresh process tree:
- torch: `backend: torch`, the former default;
- auto, cold: an empty export cache (export, then parity with torch, then serve);
- auto, warm: the cache the cold start left (export and verdict read back);
- Bento, empty cache: a Bento built here with `bentoml build` (which exports and checks), served with an
  empty cache, as a container starts: it adopts the export it carries.
The build's own time is printed too. Medians over `--rounds`.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import ROOT, free_port, wait_until_ready  # noqa: E402


def serve_seconds(target: str, env: dict[str, str], cwd: Path) -> float:
    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "bentoml", "serve", target, "--host", "127.0.0.1", "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_until_ready(process, f"http://127.0.0.1:{port}/readyz")
    seconds = time.perf_counter() - started
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=60)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="start-times-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith("EMBENTO_")}
    base.update(
        HF_HUB_OFFLINE="1",
        BENTOML_DO_NOT_TRACK="True",
        BENTOML_HOME=str(scratch / "bentoml"),
        EMBENTO_MODEL_ID=args.model,
    )
    times: dict[str, list[float]] = {"torch": [], "auto, cold": [], "auto, warm": [], "Bento, empty cache": []}
    build_seconds = []
    for round_ in range(args.rounds):
        cache = scratch / f"cache-{round_}"
        times["torch"].append(
            serve_seconds(
                "service:Gateway", {**base, "EMBENTO_BACKEND": "torch", "EMBENTO_CACHE_DIR": str(cache / "t")}, ROOT
            )
        )
        for case in ("auto, cold", "auto, warm"):
            times[case].append(serve_seconds("service:Gateway", {**base, "EMBENTO_CACHE_DIR": str(cache / "a")}, ROOT))
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "bentoml", "build", str(ROOT), "--version", f"start-{round_}"],
            cwd=ROOT,
            env={**base, "EMBENTO_CACHE_DIR": str(cache / "build")},
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        build_seconds.append(time.perf_counter() - started)
        elsewhere = scratch / f"elsewhere-{round_}"
        elsewhere.mkdir()
        bento_env = {k: v for k, v in base.items() if k != "EMBENTO_MODEL_ID"}  # the Bento carries its configuration
        times["Bento, empty cache"].append(
            serve_seconds(
                f"embento:start-{round_}", {**bento_env, "EMBENTO_CACHE_DIR": str(cache / "empty")}, elsewhere
            )
        )
        print(
            f"round {round_ + 1}: "
            + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items())
            + f", build {build_seconds[-1]:.1f} s",
            flush=True,
        )
    print(f"\n{args.model}, load average {os.getloadavg()[0]:.1f}")
    print("| start | seconds to ready (median) |\n|---|---|")
    for case, values in times.items():
        print(f"| {case} | {statistics.median(values):.1f} |")
    print(f"| `bentoml build` (export and parity included) | {statistics.median(build_seconds):.1f} |")


if __name__ == "__main__":
    main()
