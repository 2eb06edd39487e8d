"""Ray as the launcher (docs/cluster.md). With `ray_init.address` (Trinity-RFT: `cluster.ray_address`) or
`ray_init.num_cpus` set, `rft train` is a driver that loads no model: it reaches the cluster within
`ray_init.connect_timeout` (`connect`), works out the bundles its processes need (`placement`), checks them against
the cluster's nodes (`shortfall`), has Ray grant them within `trainer.ray_wait_register_center_timeout` (`reserve`),
then starts one actor per bundle, each running `python -m rft <the same arguments>` as its child with the
environment torchrun would give a rank (`run_on_ray`), and supervises them: the first process that fails or dies
ends the run with one line naming it, as does a head (its GCS) silent for `ray_init.connect_timeout`. Inside each
placed process the code path is the one of rft's own launch, so the same seeds give the same metrics and weights.
A Ray instance of rft's own listens on 127.0.0.1 only. Ray is imported here only, and only when those keys are set."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from rft.errors import RftError

PLACED_ENV = "RFT_RAY_PLACED"
"""Set to 1 in every process the Ray driver starts: it runs its part of the run and never asks Ray again; mode
both's trainer does not start explorer processes (the driver placed them)."""
NODE_ENV = ("CUDA_VISIBLE_DEVICES", "HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_")
"""The driver's environment reaches every placed process (the run's own settings: OMP_NUM_THREADS, HF_*, RFT_*,
PYTHONPATH...), except these, which are each node's own."""

ADDRESS_KEYS = "ray_init.address (Trinity-RFT: cluster.ray_address)"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch between a node address other machines reach and 127.0.0.1 (its default on macOS and Windows), read
into `ray._private.ray_constants.ENABLE_RAY_CLUSTER` when Ray is imported: off, every process of a Ray instance
(GCS, raylet, agents, driver, workers) listens on 127.0.0.1 only. Measured, Ray 2.60: on, they listen on `::` and
the host's address, and ray.init's `_node_ip_address='127.0.0.1'` is turned back into the host's address."""
RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
"""How long a driver waits for a silent GCS before Ray ends its process with exit 1 and a line of its own (60 s by
default); the driver keeps it above ray_init.connect_timeout, after which it stops with rft's own line."""
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS_FRAME = 0x04


@dataclass(frozen=True)
class Group:
    """Bundles that must share one node (a STRICT_PACK placement group): one node's trainer processes, one
    explorer, the bench."""

    role: str
    bundles: int
    gpus: int
    """GPUs per bundle (0 or 1); each bundle takes 1 CPU."""


@dataclass(frozen=True)
class Node:
    ip: str
    cpus: float
    gpus: float


def ray_requested(cfg) -> bool:
    """True when the config asks for Ray (an address, or verl's num_cpus for a Ray instance of rft's own); SFT and
    DPO configs have no ray_init section."""
    r = getattr(cfg, "ray_init", None)
    return r is not None and (r.address is not None or r.num_cpus is not None)


def placement(cfg, gpus: bool) -> list[Group]:
    """The groups of bundles the processes of `cfg`'s mode need: trainer.nnodes groups of n_gpus_per_node bundles
    (mode both, train); trainer.explorer_num single explorer bundles beside them when the explorer runs apart from
    the trainer (mode both not on-policy); one bundle for mode explore (this command's explorer) or bench. `gpus`:
    each bundle takes a GPU too."""
    from rft.sync.schedule import is_synchronous

    t, gpu = cfg.trainer, int(gpus)
    if t.mode in ("explore", "bench"):
        return [Group("explorer" if t.mode == "explore" else "bench", 1, gpu)]
    trainers = [Group(f"trainer node {i}", t.n_gpus_per_node, gpu) for i in range(t.nnodes)]
    if t.mode == "both" and not is_synchronous(cfg):
        return trainers + [Group(f"explorer {i}", 1, gpu) for i in range(t.explorer_num)]
    return trainers


def shortfall(groups: list[Group], nodes: list[Node]) -> str | None:
    """None when every group fits on one node of `nodes` (first fit, largest group first, each bundle 1 CPU and
    its GPUs), else what the placement needs beside what the cluster has, for the one-line error. Ray's own grant
    (`reserve`) decides in the end: the resources others hold are not known here."""
    free = [[n.cpus, n.gpus] for n in nodes]
    for g in sorted(groups, key=lambda g: -g.bundles):
        node = next((f for f in free if f[0] >= g.bundles and f[1] >= g.bundles * g.gpus), None)
        if node is None:
            return f"the placement needs {_need(groups)}; the cluster has {_have(nodes)}"
        node[0] -= g.bundles
        node[1] -= g.bundles * g.gpus
    return None


def _need(groups: list[Group]) -> str:
    def one(g: Group) -> str:
        each = "1 CPU" + (f" + {g.gpus} GPU" if g.gpus else "")
        return f"{g.role}: {g.bundles} x ({each}) on one node"

    return ", ".join(one(g) for g in groups)


def _have(nodes: list[Node]) -> str:
    listed = ", ".join(f"{n.ip} ({n.cpus:g} CPU, {n.gpus:g} GPU)" for n in nodes)
    return f"{len(nodes)} node{'s' * (len(nodes) != 1)}: {listed}" if nodes else "no live node"


# ------------------------------------------------------------------------------------------------- Ray
def import_ray():
    """Ray, or the one line that says how to install it. The placed processes' lines reach the driver's console
    each once (Ray would fold lines that several processes print alike into one, "[repeated 2x across
    cluster]"), uncoloured when the console is not a terminal (a log file)."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # read when Ray is imported
    if not sys.stdout.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    try:
        import ray
    except ImportError:
        raise RftError(f"{ADDRESS_KEYS} / ray_init.num_cpus ask for Ray, which is not installed: "
                       "pip install 'rft[ray]'") from None
    return ray


def reachable(address: str, timeout_s: float) -> None:
    """Raise the one line for a HOST:PORT that refuses, does not answer within `timeout_s`, or answers but not as
    a gRPC server (the head's GCS is one: it answers HTTP/2's client preface with a SETTINGS frame). ray.init has no
    timeout of its own: it retries such an address for about 160 s, then raises or exits (measured, Ray 2.60)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RftError(f"{ADDRESS_KEYS}={address!r} is not `auto` or HOST:PORT (the head's GCS port, "
                       "`ray start --head --port PORT`)")
    answer = _grpc_answer(host, int(port), timeout_s)
    if isinstance(answer, str):
        raise RftError(f"the Ray cluster at {address} did not answer within {timeout_s:g} s ({answer}): start it "
                       f"with `ray start --head --port {port}` or correct {ADDRESS_KEYS}")
    if len(answer) < 4 or answer[3] != SETTINGS_FRAME:
        raise RftError(f"{address} answers, but not as a Ray head's GCS port (no gRPC answer): give the port of "
                       f"`ray start --head --port PORT` in {ADDRESS_KEYS}")


def _grpc_answer(host: str, port: int, timeout_s: float) -> bytes | str:
    """The first bytes a gRPC server at host:port sends back to HTTP/2's client preface (a SETTINGS frame's
    header), or why nothing answered within `timeout_s` ("no answer", "Connection refused", ...)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.sendall(HTTP2_PREFACE)
            return conn.recv(9)  # a frame header: length (3 bytes), type, flags, stream id
    except OSError as e:
        return "no answer" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)


@contextlib.contextmanager
def on_loopback():
    """A Ray instance started within the block listens on 127.0.0.1 only: LOOPBACK_ENV for the processes it starts,
    and the constant Ray read from it when imported (Ray may be imported already); both restored after, since a
    driver that later joins a cluster must give the address its node's raylet has."""
    from ray._private import ray_constants

    env, constant = os.environ.get(LOOPBACK_ENV), getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[LOOPBACK_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if env is None:
            os.environ.pop(LOOPBACK_ENV, None)
        else:
            os.environ[LOOPBACK_ENV] = env
        ray_constants.ENABLE_RAY_CLUSTER = constant


def connect(cfg) -> str:
    """Join the cluster `cfg.ray_init` names (or start a Ray instance of num_cpus CPUs on this machine);
    returns how to name it in messages."""
    r = cfg.ray_init
    ray = import_ray()
    # Ray's own warnings (its connection retries, "token authentication is enabled") would surround rft's one line
    logging.getLogger("ray").setLevel(logging.ERROR)
    os.environ.setdefault(RECONNECT_ENV, str(int(max(60, r.connect_timeout + 30))))  # read by ray.init
    if r.address is None:
        with on_loopback():
            ray.init(num_cpus=r.num_cpus, include_dashboard=False, configure_logging=False)
        where = f"the Ray instance rft started on this machine (ray_init.num_cpus={r.num_cpus})"
        ip = ray.util.get_node_ip_address()
        if ip != "127.0.0.1":  # a Ray without the switch of `on_loopback`
            ray.shutdown()
            raise RftError(f"{where} would listen on {ip}, beyond 127.0.0.1 (this Ray has no switch to keep it on "
                           "loopback): start a cluster of your own (`ray start --head`) and give its address in "
                           f"{ADDRESS_KEYS}")
        return where
    if r.address != "auto":
        reachable(r.address, r.connect_timeout)
    try:
        ray.init(address=r.address, configure_logging=False)
    except ConnectionError as e:
        if r.address == "auto":  # Ray says so at once
            raise RftError(f"{ADDRESS_KEYS}='auto', but no Ray cluster runs on this machine and RAY_ADDRESS is not "
                           "set: start one with `ray start --head`, or give HOST:PORT") from None
        raise RftError(f"the Ray cluster at {r.address}: {str(e).splitlines()[0]}") from None
    return f"the Ray cluster at {r.address}"


def live_nodes() -> list[Node]:
    import ray

    return [Node(n["NodeManagerAddress"], n["Resources"].get("CPU", 0.0), n["Resources"].get("GPU", 0.0))
            for n in ray.nodes() if n["Alive"]]


def reserve(groups: list[Group], timeout_s: float, where: str) -> list:
    """One STRICT_PACK placement group per group, granted by Ray within `timeout_s`, else the one line with what
    the cluster had free when asked (other jobs hold the rest)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    free = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
    pgs = [placement_group([{"CPU": 1, **({"GPU": g.gpus} if g.gpus else {})}] * g.bundles, strategy="STRICT_PACK")
           for g in groups]
    ready, _ = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=timeout_s)
    if len(ready) < len(pgs):
        for pg in pgs:
            remove_placement_group(pg)
        raise RftError(f"{where} did not grant {_need(groups)} within {timeout_s:g} s "
                       f"(trainer.ray_wait_register_center_timeout); free when asked: {free or 'nothing'}")
    return pgs


class _Console:
    """The placed processes' lines reach the driver through Ray's log monitor, which tails each worker's files and
    publishes what it read some time later: a driver that kills the actors and disconnects as soon as they have
    returned can lose their last lines (a run's "model written to", a failure's one line; seen under load). Each
    actor therefore ends its output with a mark on stdout and on stderr once its child has exited; this driver takes
    the marks out of what it prints and, before it lets the actors go, waits (at most `wait_s`) for the marks of
    those that returned. Ray (2.60) offers no public hook for the driver's printing: without one (another Ray), no
    marks are written and the wait is a short pause."""

    def __init__(self, wait_s: float = 30.0):
        import threading
        import uuid

        self.mark, self.wait_s = f"rft-ray-end-{uuid.uuid4().hex}:", wait_s
        self.seen: set[str] = set()
        self.arrived = threading.Condition()
        try:
            from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

            with dispatcher._lock:
                (i, (name, printer)), = [(i, h) for i, h in enumerate(dispatcher.handlers) if h[0] == "ray_print_logs"]
                dispatcher.handlers[i] = (name, lambda data: self._take(printer, data))
            self.hooked = True
        except (ImportError, AttributeError, ValueError):
            self.hooked = False

    def _take(self, printer, data) -> None:
        lines = data.get("lines") or []
        marks = [line for line in lines if line.startswith(self.mark)]
        if marks:
            with self.arrived:
                self.seen.update(f"{m}:{'err' if data.get('is_err') else 'out'}" for m in marks)
                self.arrived.notify_all()
            data = {**data, "lines": [line for line in lines if not line.startswith(self.mark)]}
        if data.get("lines"):
            printer(data)

    def drain(self, roles: list[str]) -> None:
        """Wait until every line `roles` wrote has been printed here."""
        if not self.hooked:
            time.sleep(1.0)
            return
        want = {f"{self.mark}{role}:{stream}" for role in roles for stream in ("out", "err")}
        with self.arrived:
            self.arrived.wait_for(lambda: want <= self.seen, timeout=self.wait_s)


def placed_by_ray() -> bool:
    """This process was started by rft's Ray driver."""
    return os.environ.get(PLACED_ENV) == "1"


@dataclass
class Placed:
    """One process of the run on a granted bundle: its actor, the environment of its child, and where it is."""

    role: str  # "trainer rank 1", "explorer 0", "bench"
    actor: object
    ip: str = ""
    port: int = 0
    sync_port: int = 0
    gpus: tuple[str, ...] = ()
    env: dict | None = None


def _actor_class(ray):
    @ray.remote(num_cpus=1, max_concurrency=2)
    class RftProcess:
        """One placed process: `run` starts `python -m rft ...` as its child and returns its exit code; `signal`
        (a second concurrent call) passes Ctrl-C / SIGTERM on to it. The child ends itself when this actor dies
        (`rft.runtime.exit_with_parent`)."""

        def __init__(self, role: str):
            self.role, self.child = role, None

        def __repr__(self) -> str:  # the prefix of the child's lines on the driver's console
            return self.role.replace(" ", "_")

        def where(self) -> tuple[str, int, int, tuple[str, ...]]:
            """This node's IP, two ports free on it (the rendezvous, the weight broadcast), its GPUs."""
            import ray

            ports = []
            for _ in range(2):
                with socket.socket() as s:
                    s.bind(("", 0))
                    ports.append(s.getsockname()[1])
            return ray.util.get_node_ip_address(), *ports, tuple(str(g) for g in ray.get_gpu_ids())

        def run(self, args: list[str], env: dict, cwd: str, mark: str | None) -> int:
            self.child = subprocess.Popen([sys.executable, "-u", "-m", "rft", *args], cwd=cwd,
                                          env={**os.environ, **env})
            code = self.child.wait()
            if mark is not None:  # the last line of each stream (_Console)
                print(f"{mark}{self.role}", flush=True)
                print(f"{mark}{self.role}", file=sys.stderr, flush=True)
            return code

        def signal(self, signum: int) -> None:
            if self.child is not None and self.child.poll() is None:
                self.child.send_signal(signum)

    return RftProcess


def _place(ray, cfg, groups: list[Group], pgs: list) -> list[Placed]:
    """One actor per bundle, each told where it is: trainer ranks in group order (rank g x n_gpus_per_node + b),
    then the explorers (or this mode's one process)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    actor = _actor_class(ray)
    placed = []
    rank = 0
    for group, pg in zip(groups, pgs):
        for b in range(group.bundles):
            if group.role.startswith("trainer"):
                role, rank = f"trainer rank {rank}", rank + 1
            else:
                role = group.role
            strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=b)
            placed.append(Placed(role, actor.options(scheduling_strategy=strategy, num_gpus=group.gpus).remote(role)))
    answers = ray.get([p.actor.where.remote() for p in placed], timeout=cfg.trainer.ray_wait_register_center_timeout)
    for p, (ip, port, sync_port, gpus) in zip(placed, answers):
        p.ip, p.port, p.sync_port, p.gpus = ip, port, sync_port, gpus
    return placed


def _environments(cfg, placed: list[Placed]) -> None:
    """Each placed process's environment: the driver's (less each node's own), PLACED_ENV, and for the trainer
    ranks torchrun's variables with rank 0's node as the rendezvous; the explorers reach the trainer's weight
    broadcast at rank 0's node too. On GPUs, CUDA_VISIBLE_DEVICES of a trainer node's ranks lists the GPUs Ray gave
    them in bundle order, so that LOCAL_RANK indexes its own (Ray narrows each actor to its one GPU)."""
    from rft.interrupts import LAUNCHER_ENV
    from rft.orchestration.roles import EXPLORER_RANK_ENV, ROLE_ENV
    from rft.sync.process_group import ADDR_ENV, PORT_ENV

    base = {k: v for k, v in os.environ.items() if k not in NODE_ENV}
    base[PLACED_ENV] = "1"
    trainers = [p for p in placed if p.role.startswith("trainer")]
    head = trainers[0] if trainers else placed[0]
    base[ADDR_ENV], base[PORT_ENV] = head.ip, str(head.sync_port)
    t, world = cfg.trainer, len(trainers)
    for i, p in enumerate(trainers):
        node, local = divmod(i, t.n_gpus_per_node)
        p.env = {**base, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        if world > 1:
            p.env.update({"RANK": str(i), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                          "LOCAL_WORLD_SIZE": str(t.n_gpus_per_node), "GROUP_RANK": str(node),
                          "GROUP_WORLD_SIZE": str(t.nnodes), "MASTER_ADDR": head.ip, "MASTER_PORT": str(head.port),
                          LAUNCHER_ENV: "1"})
        group = trainers[node * t.n_gpus_per_node:(node + 1) * t.n_gpus_per_node]
        if all(q.gpus for q in group):
            p.env["CUDA_VISIBLE_DEVICES"] = ",".join(q.gpus[0] for q in group)
    explorers = [p for p in placed if p.role.startswith("explorer ")]
    for i, p in enumerate(explorers):
        p.env = {**base, ROLE_ENV: "explorer", EXPLORER_RANK_ENV: str(i)}
    for p in placed:
        if p.env is None:  # mode explore or bench: this command's one process
            p.env = dict(base)
    ips = {p.ip for p in placed}
    shared = t.mode in ("explore", "train") or explorers
    if len(ips) > 1 and shared:
        from rft.buffer import buffer_url

        url = buffer_url(cfg, shared=True)
        if url is not None and url.startswith("sqlite"):
            raise RftError(f"the run is placed on {len(ips)} nodes ({', '.join(sorted(ips))}), but its experience "
                           f"buffer is SQLite ({url}), whose locks do not hold across machines: give a PostgreSQL "
                           "experience_buffer.path every node reaches")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _ended(ray, ref) -> str | None:
    """None when the process behind `ref` exited 0; else how it ended."""
    from rft.distributed import _ended as exit_text

    try:
        code = ray.get(ref)
    except ray.exceptions.RayActorError as e:  # how Ray words it (Ray 2.60)
        text = str(e)
        for cause, said in (("because its node has died", "its node was lost"),
                            ("because its worker process has died", "its Ray worker process died"),
                            ("ray.kill", "killed with ray.kill")):
            if cause in text:
                return f"died ({said})"
        return f"died ({_first_line(e)})"
    except ray.exceptions.RayError as e:
        return f"failed in Ray ({type(e).__name__})"
    return None if code == 0 else f"ended with {exit_text(code)}"


class _Head:
    """The cluster's head as the driver sees it during the run: whether its GCS answers (the gRPC check of
    `reachable`), and the run's one line once it is lost. A driver whose GCS stays silent is ended by Ray itself
    (exit 1 and a line of Ray's, RECONNECT_ENV), and every call that needs the GCS (removing a placement group)
    blocks until then, so the driver stops on its own line first and makes no such call once the head is lost."""

    def __init__(self, ray, where: str, limit_s: float, own_instance: bool):
        self.where, self.limit_s, self.own_instance = where, limit_s, own_instance
        self.address = ray.get_runtime_context().gcs_address
        self.silent_since: float | None = None
        self.lost = False

    def answers(self, timeout_s: float = 1.0) -> bool:
        host, _, port = self.address.rpartition(":")
        if isinstance(_grpc_answer(host, int(port), timeout_s), str):
            self.silent_since = self.silent_since or time.monotonic()
            return False
        self.silent_since = None
        return True

    def check(self) -> None:
        """Raise the run's one line once the head has been silent for ray_init.connect_timeout."""
        if not self.answers() and time.monotonic() - self.silent_since >= self.limit_s:
            raise self.error(f"has not answered for {self.limit_s:g} s (ray_init.connect_timeout)")

    def error(self, how: str) -> RftError:
        self.lost = True
        again = "" if self.own_instance else "start the cluster again, then "
        return RftError(f"{self.where} lost its head: its GCS at {self.address} {how}; the run's processes end with "
                        f"their nodes; {again}run the same command again to resume")


def _supervise(ray, placed: list[Placed], args: list[str], console: _Console, head: _Head) -> int:
    """Run every placed process and wait for them; the first that fails or dies ends the run (the others are
    killed: their children follow) with the one line naming it, or naming the head when it does not answer then;
    a head silent for ray_init.connect_timeout ends it too (`_Head`). Ctrl-C / SIGTERM here is passed on to every
    process, which stops at the next step as one process does (the run then stops with rft's `stopped by` line);
    a second one kills them at once. The wait returns every second so that Python sees a signal. Before the
    actors go, the lines of those that returned are all printed (`_Console`)."""
    import signal

    from rft import interrupts

    mark = console.mark if console.hooked else None
    refs = {p.actor.run.remote(args, p.env, os.getcwd(), mark): p for p in placed}
    pending, stopping, finished, returned = list(refs), None, True, []
    try:
        while pending:
            try:
                ready, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            except KeyboardInterrupt as e:
                if stopping is not None:
                    raise
                stopping = getattr(e, "signal_name", "SIGINT")
                print(f"rft: {stopping} received: passed on to the {len(placed)} processes, which stop at their next "
                      "step (send it again to stop them at once)", file=sys.stderr, flush=True)
                for p in placed:
                    p.actor.signal.remote(getattr(signal, stopping))
                continue
            head.check()
            for ref in ready:
                how = _ended(ray, ref)
                if how is None or how.startswith("ended with"):
                    returned.append(refs[ref].role)
                finished = finished and how is None
                if how is not None and not (stopping and how.startswith("ended with")):
                    if not head.answers():  # the process went with the head (its node, or Ray's hold on it)
                        raise head.error(f"does not answer (the {refs[ref].role} on {refs[ref].ip} {how})")
                    p = refs[ref]
                    raise RftError(f"the {p.role} on {p.ip} {how}; run the same command again to resume")
    finally:
        try:
            console.drain(returned)
        finally:  # a second Ctrl-C during the wait still kills them
            for p in placed:
                ray.kill(p.actor)
    if stopping is not None and not finished:
        raise interrupts.Interrupted(stopping, f"stopped by {stopping} ({len(placed)} processes on Ray)")
    if stopping is not None:
        print(f"rft: the {stopping} came during the last phase; the command finished", file=sys.stderr, flush=True)
    return 0


def run_on_ray(cfg, module_args: list[str]) -> int:
    """The run `cfg` on Ray: connect, check and reserve the placement, hold the output folder for the processes
    (as rft's own launcher does), start them and supervise them. Always leaves the cluster as it found it."""
    from rft.orchestration.roles import explorer_role
    from rft.trainer.run_folder import run_folder

    ray = import_ray()
    where = connect(cfg)
    head = _Head(ray, where, cfg.ray_init.connect_timeout, own_instance=cfg.ray_init.address is None)
    try:
        console = _Console()
        nodes = live_nodes()
        gpus = cfg.trainer.device == "cuda" or (cfg.trainer.device == "auto" and any(n.gpus for n in nodes))
        groups = placement(cfg, gpus)
        missing = shortfall(groups, nodes)
        if missing is not None:
            raise RftError(f"{where}: {missing}: add nodes or resources (`ray start --num-cpus / --num-gpus`), or "
                           "lower trainer.nnodes / trainer.n_gpus_per_node")
        pgs = reserve(groups, cfg.trainer.ray_wait_register_center_timeout, where)
        try:
            placed = _place(ray, cfg, groups, pgs)
            mode = cfg.trainer.mode
            role = {"bench": "bench", "explore": explorer_role(cfg)}.get(mode, "trainer")
            with run_folder(cfg, for_children=True, role=role):
                _environments(cfg, placed)
                print(f"rft: {len(placed)} process{'es' * (len(placed) > 1)} on {where}: "
                      + ", ".join(f"{p.role} on {p.ip}" for p in placed), flush=True)
                return _supervise(ray, placed, module_args, console, head)
        finally:
            from ray.util.placement_group import remove_placement_group

            if not head.lost and head.answers():  # else the call would block until Ray ends this process
                for pg in pgs:
                    remove_placement_group(pg)
    except ray.exceptions.RayError as e:  # any other failure of Ray's: the run resumes from its checkpoints
        if not head.lost and not head.answers():
            raise head.error(f"does not answer ({type(e).__name__})") from None
        raise RftError(f"{where}: Ray failed ({type(e).__name__}: {_first_line(e)}); run the same command again to "
                       "resume") from None
    finally:
        ray.shutdown()

