"""``anydev serve``: load a model on a backend and answer the OpenAI API over HTTP (uvicorn).

    anydev serve --device cpu                         # the embedded demo model, on 127.0.0.1:8000
    anydev serve --device nvidia --model /models/Llama-3.2-1B --tp 2 --api-key "$KEY"

Two kinds of process: the engine core (scheduler, executor, step loop; serving/engine_core.py) and
the front end (HTTP, tokenizing, detokenizing, stop strings, streaming; serving/app.py), which talk
over ZMQ. With ``--api-server-count 1`` (the default) this process is the front end; with N > 1 it
starts N front-end processes on the one port and watches them.

Ctrl-C or SIGTERM stops accepting connections, lets the requests in flight finish for up to
``--drain-seconds``, aborts the rest (their clients get an error, not a cut connection); the engine
core then says how many KV blocks are still in use (0: nothing leaked), frees the engine and exits 0.
If the engine core dies or fails, requests in flight end with an error, new ones get 503, and the
server exits non-zero within seconds, so that a supervisor can restart it.
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import ipaddress
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from anydev.core.errors import EngineConfigError
from anydev.core.process_timeline import phases_line


#: The modules ``anydev serve`` needs beyond anydev's own: the app's (fastapi, prometheus_client, uvicorn)
#: and the engine core's messages and socket (msgspec, zmq: pyzmq).
SERVE_MODULES = ("fastapi", "msgspec", "prometheus_client", "uvicorn", "zmq")

#: The start of the line that says the engine core's start-up, phase by phase (spawn to ready).
CORE_STARTUP_LINE = "anydev serve: engine core start-up "

#: ``--tool-call-parser``'s names: serving.tools.TOOL_PARSERS's keys (not imported here: the flags parse
#: without the serving extra installed).
TOOL_CALL_PARSERS = ("hermes", "llama3_json")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from anydev.core.engine_args import add_engine_arguments

    p.add_argument("model_tag", nargs="?", metavar="MODEL",
                   help="the model, as --model gives it: vLLM's form, anydev serve MODEL (default: --model's)")
    p.add_argument("--model", help="HF model directory or .gguf file, a local path (default: the embedded demo model)")
    p.add_argument("--served-model-name", help="the model id clients send (default: the model folder's name)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind; 127.0.0.1 is this machine only")
    p.add_argument("--port", type=int, default=8000, help="port to listen on; 0: any free one")
    p.add_argument("--api-key", default=os.environ.get("ANYDEV_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1/* (default: $ANYDEV_API_KEY; none: open)")
    p.add_argument("--metrics-need-key", action="store_true", help="/metrics needs the API key too")
    p.add_argument("--api-server-count", type=int, default=1,
                   help="HTTP front-end processes sharing the one engine core and the one port")
    p.add_argument("--tool-call-parser", choices=TOOL_CALL_PARSERS, default=None,
                   help="how answers' tool calls read: hermes (Qwen2.5/3, Hermes: <tool_call> blocks) or "
                        "llama3_json (Llama 3.x JSON); without it, chat requests with tools answer 400 (default: none)")
    add_engine_arguments(p.add_argument_group("engine"), defaults={"max_num_seqs": 64})
    logs = p.add_argument_group("logs")
    logs.add_argument("--disable-log-requests", "--disable-uvicorn-access-log", action="store_true",
                      help="no access line per request (method, path, status, seconds)")
    logs.add_argument("--disable-log-stats", action="store_true",
                      help="no stats line (running and waiting requests, tokens/s, KV cache use) every "
                           "--log-stats-interval")
    logs.add_argument("--log-stats-interval", type=float, default=10.0, help="seconds between stats lines")
    limits = p.add_argument_group("limits")
    limits.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body in bytes, 1 MiB by default; beyond: 413")
    limits.add_argument("--max-prompt-tokens", type=int, default=None, help="longest prompt in tokens (default: the context); beyond: 400")
    limits.add_argument("--max-tokens-limit", type=int, default=4096,
                        help="largest max_tokens a request may ask; beyond: 400")
    limits.add_argument("--max-waiting", type=int, default=256,
                        help="requests that may wait for admission; beyond: 429 with Retry-After")
    limits.add_argument("--request-timeout", type=float, default=600.0,
                        help="seconds a request may run; then it ends with finish reason 'timeout'")
    limits.add_argument("--engine-stall-timeout", type=float, default=60.0,
                        help="seconds requests wait for an engine core that has work but does not step (stopped, "
                             "deadlocked, stuck in a device call); then 503. /health says 503 after "
                             "5 s of that silence, and 200 again once the core steps")
    limits.add_argument("--drain-seconds", type=float, default=10.0,
                        help="at shutdown, how long requests in flight may finish, in seconds")
    limits.add_argument("--max-connections", type=int, default=None,
                        help="open connections a front end keeps, every accepted socket counted (default: half the "
                             f"open-file limit, at most {MAX_CONNECTIONS_CAP}); past it a new connection replaces the "
                             "one idle the longest, or is closed at once when none is idle")
    limits.add_argument("--first-request-timeout", type=float, default=5.0,
                        help="seconds a new connection has to start sending its first request; "
                             "then it is closed unanswered (idle sockets)")
    limits.add_argument("--timeout-keep-alive", type=float, default=5.0, help="seconds after which an idle keep-alive connection closes")
    limits.add_argument("--read-timeout", type=float, default=30.0,
                        help="seconds a client has to send a whole request, from connecting or from its previous "
                             "answer; then 408 and the connection closes (slow or idle clients)")
    limits.add_argument("--send-timeout", type=float, default=30.0,
                        help="seconds an answer may wait for a client that reads nothing; then the "
                             "connection is dropped and its request aborted")


#: The default connection cap's ceiling (see :func:`default_max_connections`).
MAX_CONNECTIONS_CAP = 4096


def default_max_connections() -> int:
    """Half the soft open-file limit (the other half for the engine's files and sockets), at most
    MAX_CONNECTIONS_CAP: past the limit accept() fails, and uvicorn logs a traceback per attempt."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, min(MAX_CONNECTIONS_CAP, soft // 2)) if soft != resource.RLIM_INFINITY else MAX_CONNECTIONS_CAP


def model_argument(args: argparse.Namespace) -> str | None:
    """The model of ``anydev serve MODEL`` (vLLM's form) or ``--model MODEL``; both: they must agree."""
    if args.model_tag is not None and args.model is not None and args.model_tag != args.model:
        raise EngineConfigError(f"two models given: {args.model_tag!r} and --model {args.model!r}; give one "
                                "(anydev serve MODEL or --model MODEL)")
    return args.model if args.model_tag is None else args.model_tag


def run(args: argparse.Namespace) -> int:
    args.model = model_argument(args)
    # Looked up, not imported: the front end imports them while the engine core starts.
    missing = [name for name in SERVE_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise EngineConfigError(f"anydev serve needs fastapi, uvicorn and prometheus-client, and pyzmq and msgspec for its "
                                f"engine core ({', '.join(missing)} not installed): "
                                "pip install fastapi uvicorn prometheus-client pyzmq msgspec")

    if args.max_connections is not None and args.max_connections < 1:
        raise EngineConfigError(f"--max-connections must be >= 1, got {args.max_connections}")
    for name in ("max_body_bytes", "max_tokens_limit", "max_waiting", "api_server_count"):
        if getattr(args, name) < 1:
            raise EngineConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not 0 <= args.port <= 65535:
        raise EngineConfigError(f"--port must be in 0..65535, got {args.port}")
    for name in ("request_timeout", "read_timeout", "send_timeout", "timeout_keep_alive", "first_request_timeout",
                 "engine_stall_timeout", "log_stats_interval"):
        if not getattr(args, name) > 0:
            raise EngineConfigError(f"--{name.replace('_', '-')} must be > 0 seconds, got {getattr(args, name)}")
    if args.drain_seconds < 0:
        raise EngineConfigError(f"--drain-seconds must be >= 0, got {args.drain_seconds}")
    if args.api_key is not None and not args.api_key.strip():
        raise EngineConfigError("--api-key (ANYDEV_API_KEY) is empty; give a key or leave it unset")
    warning = exposure_warning(args.host, args.api_key)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    from anydev.core.engine_args import engine_config_from_args
    from anydev.core.executors.registry import command_executor

    config = engine_config_from_args(args)
    executor = command_executor(args.executor, config.tp, config.pp)   # a torchrun rank other than 0 serves rank 0 from here on
    from .listening import listening_sockets

    listeners = listening_sockets(args.host, args.port)   # a port in use fails here, in one line, before any model work
    try:
        return _run_on(args, config, executor, listeners)
    finally:
        for listener in listeners:
            listener.close()


def _run_on(args: argparse.Namespace, config, executor: str, listeners: list[socket.socket]) -> int:
    """Start the engine core at once (it checks the device and opens the model: an unknown device or
    an unreadable model fails there, before any weights load) and the front end beside it."""
    from dataclasses import replace

    from .engine_core import EngineCoreProcess

    config = replace(config, executor=executor)
    core = EngineCoreProcess(args.model, config, num_clients=args.api_server_count)
    try:
        info = core.start(while_starting=_import_front_end)
        tokenizer = core.tokenizer
        model_name = _model_name(args)
        ranks = f"{config.tp}" if config.pp == 1 else f"{config.tp * config.pp} (tp {config.tp} x pp {config.pp})"
        print(f"anydev serve: model '{model_name}' on {info.device} x {ranks} ({executor}), {info.num_blocks} KV blocks of "
              f"{info.block_size} tokens, context {info.max_model_len}; engine core pid {core.process.pid}, "
              f"{args.api_server_count} front end{'s' if args.api_server_count > 1 else ''}", flush=True)
        for line in info.weights:
            print(f"anydev serve: {line}", flush=True)
        if info.startup:
            print(f"{CORE_STARTUP_LINE}{sum(info.startup.values()):.2f} s ({phases_line(info.startup)})", flush=True)
        if args.tool_call_parser is not None:
            print(f"anydev serve: {_tool_choice_line()}", flush=True)
        print(f"anydev serve: starting on http://{args.host}:{args.port}/v1", flush=True)
        if args.api_server_count == 1:
            serve_front_end(args, core.link(), 0, tokenizer, listeners)
        else:
            _supervise(args, core, listeners)
    finally:
        core.stop(timeout=30)
    return 0


def _tool_choice_line() -> str:
    """How ``tool_choice`` required and named are served: enforced by a grammar, or by the prompt only."""
    from .tools import grammar_enforced

    if grammar_enforced():
        return "tool_choice required and named are enforced by a grammar (llguidance)"
    return ("tool_choice required and named are asked through the prompt only, not enforced (llguidance is not "
            "installed: pip install 'anydev[structured]' to enforce them)")


def _model_name(args: argparse.Namespace) -> str:
    return args.served_model_name or ("anydev-demo" if args.model is None else Path(args.model).name)


def _import_front_end() -> None:
    """Import what :func:`serve_front_end` needs (the app, uvicorn), while the engine core starts."""
    import uvicorn  # noqa: F401

    from . import app, async_engine, connection, limits  # noqa: F401


def serve_front_end(args: argparse.Namespace, link, index: int, tokenizer, sockets: list[socket.socket] | None = None,
                    supervisor=None, on_started=None) -> None:
    """Serve HTTP in this process as front end ``index`` of the engine core at ``link`` (on the
    listening ``sockets`` when given, else binding ``--host``/``--port``) until SIGTERM or Ctrl-C, or until the engine core
    fails: then raises :class:`EngineCoreError` (the command exits non-zero). ``supervisor``: a
    connection whose end (the supervising process is gone) stops this front end; ``on_started()`` is
    called once it serves."""
    import uvicorn

    from .app import create_app
    from .async_engine import AsyncEngine
    from .connection import guarded_h11_protocol
    from .engine_core import EngineCoreError
    from .limits import ServerLimits
    from .listening import LISTEN_BACKLOG
    from .request_log import AccessLog, StatsLog

    limits = ServerLimits(max_body_bytes=args.max_body_bytes,
                          max_prompt_tokens=args.max_prompt_tokens or link.info.max_model_len,
                          max_tokens=args.max_tokens_limit, max_waiting=args.max_waiting,
                          request_timeout=args.request_timeout, metrics_need_key=args.metrics_need_key)
    client = AsyncEngine(link, client_index=index, stall_timeout=args.engine_stall_timeout)
    client.on_stall.append(_report_stall)
    app = create_app(client, _model_name(args), limits, args.api_key, tokenizer=tokenizer,
                     tool_call_parser=args.tool_call_parser)
    state = app.state.anydev
    if not args.disable_log_requests:
        app.add_middleware(AccessLog)        # outermost: it sees every answer, 413s included
    dropped = functools.lru_cache(maxsize=None)(state.metrics.dropped.labels)   # labels() costs as much as an accept
    protocol = guarded_h11_protocol(args.read_timeout, args.send_timeout, lambda reason: dropped(reason).inc(),
                                    max_connections=args.max_connections or default_max_connections(),
                                    first_request_timeout=args.first_request_timeout)
    # h11 (not httptools, even where installed): the gate, the timeouts and the 64 KiB limit on a
    # request head are set on it. uvicorn's limit_concurrency stays off: the gate bounds the
    # connections (and so the requests, one a connection) before uvicorn sees them. Past the drain,
    # uvicorn's own cancelling is only a backstop: the server aborts the requests itself first, so
    # that their handlers answer an error. asyncio's loop, not uvloop (uvicorn's choice where it is
    # installed): the gate's acceptor replaces the loop's accept, which on uvloop cannot be stopped.
    server = _server_class()(uvicorn.Config(
        app, host=args.host, port=args.port, log_level="warning", access_log=False, http=protocol, loop="asyncio",
        timeout_graceful_shutdown=args.drain_seconds + 5, timeout_keep_alive=args.timeout_keep_alive,
        h11_max_incomplete_event_size=64 * 1024, backlog=LISTEN_BACKLOG))
    server.drain_seconds, server.abort_in_flight = args.drain_seconds, client.abort_all
    server.on_started = on_started
    client.on_failure.append(server.engine_failed)
    if supervisor is not None:
        threading.Thread(target=_stop_when_closed, args=(supervisor, server), daemon=True).start()
    stats_log = None if args.disable_log_stats else StatsLog(client, state.metrics, args.log_stats_interval).start()
    try:
        server.run(sockets=sockets)
    finally:
        if stats_log is not None:
            stats_log.stop()
    if client.failure is not None:
        raise EngineCoreError(f"{client.failure}; the server stopped (exit non-zero: a supervisor may restart it)")


def _report_stall(stalled: bool, seconds: float) -> None:
    if stalled:
        print(f"anydev serve: the engine core has work but has not stepped for {seconds:.1f} s (stopped, deadlocked "
              "or stuck in a device call): /health says 503; requests still waiting get 503 after "
              "--engine-stall-timeout", file=sys.stderr, flush=True)
    else:
        print(f"anydev serve: the engine core steps again after {seconds:.1f} s", file=sys.stderr, flush=True)


def _stop_when_closed(connection, server) -> None:
    try:
        connection.recv()
    except (EOFError, OSError):
        pass
    server.should_exit = True


# ---- several front ends ----------------------------------------------------------------------------
def _supervise(args: argparse.Namespace, core, listeners: list[socket.socket]) -> None:
    """Run ``--api-server-count`` front-end processes on the same listening sockets (the kernel spreads
    the connections) until each has exited. SIGTERM and Ctrl-C are passed on to them (each drains). A
    front end that dies alone is reported; the others and the engine core serve on. Raises
    :class:`EngineCoreError` when the engine core died or a front end failed."""
    from .engine_core import EngineCoreError

    context = multiprocessing.get_context("spawn")
    supervisor_read, supervisor_write = context.Pipe(duplex=False)
    started_read, started_write = context.Pipe(duplex=False)
    procs = [context.Process(target=_front_end_main, name=f"anydev-front-end-{i}",
                             args=(args, core.link(describe=False), i, core.client_lifeline(i), listeners, supervisor_read,
                                   started_write))
             for i in range(args.api_server_count)]
    for proc in procs:
        proc.start()
        print(f"anydev serve: {proc.name} pid {proc.pid}", flush=True)
    for listener in listeners:
        listener.close()                     # the front ends hold them now; the port goes with the last of them
    supervisor_read.close()
    started_write.close()
    for i in range(len(procs)):
        core.client_lifeline(i).close()      # each front end holds its own

    def pass_on(signum, frame):
        for proc in procs:
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, pass_on) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        running = {proc.sentinel: proc for proc in procs}
        _wait_until_started(started_read, len(procs), running)
        while running:
            for ended in multiprocessing.connection.wait(list(running)):
                proc = running.pop(ended)
                proc.join()
                if proc.exitcode != 0 and core.process.is_alive():
                    print(f"anydev serve: {proc.name} exited with code {proc.exitcode}; the others serve on",
                          file=sys.stderr, flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        supervisor_write.close()
    if not core.process.is_alive() and core.process.exitcode != 0:
        raise EngineCoreError(f"{core.describe_exit()}; the server stopped (exit non-zero: a supervisor may restart it)")
    failed = [proc.name for proc in procs if proc.exitcode != 0]
    if failed:
        raise EngineCoreError(f"front ends {', '.join(failed)} exited with an error")


def _wait_until_started(started, count: int, running: dict) -> None:
    """Wait for ``count`` front ends to say they serve (or for one of them to end first)."""
    ready = 0
    while ready < count:
        waited = multiprocessing.connection.wait([started, *running])
        if started not in waited:
            return                            # a front end ended while starting: the caller reports it
        try:
            started.recv()
        except EOFError:
            return
        ready += 1
    print(f"anydev serve: {count} front ends serving", flush=True)


def _front_end_main(args, link, index, lifeline, listeners, supervisor, started) -> None:
    """A front-end process: serve on the inherited ``listeners``; ``lifeline`` is held until it ends
    (the engine core aborts its requests when it goes); ``started`` gets its index once it serves."""
    from anydev.core.exits import run_command

    tokenizer = link.info.tokenizer.build()
    code = run_command(serve_front_end, args, link, index, tokenizer, listeners, supervisor,
                       lambda: started.send(index))
    sys.exit(code or 0)


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """The warning for binding ``host`` without a key where more than this machine can reach it
    (None: a loopback address, or a key is set)."""
    if api_key is not None or _is_loopback(host):
        return None
    return f"warning: serving on {host} without --api-key: anyone who can reach this port can use the model"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False            # a host name: it may resolve to an address others can reach


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server without its re-raising of the stop signal after the graceful shutdown, so
        that ``anydev serve`` then frees the engine and exits 0 (a second Ctrl-C still forces it);
        ``drain_seconds`` into the shutdown it calls ``abort_in_flight()``."""

        drain_seconds: float = 0.0
        abort_in_flight = None
        on_started = None

        acceptor = None

        async def startup(self, sockets=None):
            await super().startup(sockets)
            if self.started:
                from .accepting import take_over_accepting   # the gate applied as sockets are accepted
                self.acceptor = take_over_accepting(self)
            if self.on_started is not None and self.started:
                self.on_started()

        def engine_failed(self, reason: str) -> None:
            """The engine core failed or died: its requests have ended with an error; stop serving
            (after a moment, so that those errors reach their clients)."""
            print("anydev serve: the engine core is gone; answering the requests in flight with an error, then "
                  "stopping", file=sys.stderr, flush=True)   # the reason: once, in the command's error line
            asyncio.get_running_loop().call_later(0.5, setattr, self, "should_exit", True)

        async def shutdown(self, sockets=None):
            if self.acceptor is not None:
                self.acceptor.close()
            timer = asyncio.get_running_loop().call_later(self.drain_seconds, self._drain_over)
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()

        def _drain_over(self) -> None:
            aborted = self.abort_in_flight() if self.abort_in_flight else 0
            if aborted:
                print(f"anydev serve: aborted {aborted} requests still running after --drain-seconds "
                      f"{self.drain_seconds:g}", flush=True)

        @contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return Server
