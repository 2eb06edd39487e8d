"""Ray as the launcher, first slice (docs/cluster.md). With `ray_init.address` (Trinity-RFT: `cluster.ray_address`)
or `ray_init.num_cpus` set, `rft train` reaches the cluster within `ray_init.connect_timeout` (`connect`), works out
the bundles its processes need (`placement`), checks them against the cluster's nodes (`shortfall`) and has Ray
grant them within `trainer.ray_wait_register_center_timeout` (`reserve`): each failure is one line before any model
loads. Starting the processes on the granted bundles is the design of docs/cluster.md, not built yet, so the run
then stops with one line saying so. Ray is imported here only, and only when those keys are set."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import NoReturn

from rft.errors import RftError

ADDRESS_KEYS = "ray_init.address (Trinity-RFT: cluster.ray_address)"
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
    """Ray, or the one line that says how to install it."""
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
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
            conn.sendall(HTTP2_PREFACE)
            answer = conn.recv(9)  # a frame header: length (3 bytes), type, flags, stream id
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise RftError(f"the Ray cluster at {address} did not answer within {timeout_s:g} s ({why}): start it "
                       f"with `ray start --head --port {port}` or correct {ADDRESS_KEYS}") from None
    if len(answer) < 4 or answer[3] != SETTINGS_FRAME:
        raise RftError(f"{address} answers, but not as a Ray head's GCS port (no gRPC answer): give the port of "
                       f"`ray start --head --port PORT` in {ADDRESS_KEYS}")


def connect(cfg) -> str:
    """Join the cluster `cfg.ray_init` names (or start a Ray instance of num_cpus CPUs on this machine);
    returns how to name it in messages."""
    r = cfg.ray_init
    ray = import_ray()
    # Ray's own warnings (its connection retries, "token authentication is enabled") would surround rft's one line
    logging.getLogger("ray").setLevel(logging.ERROR)
    if r.address is None:
        ray.init(num_cpus=r.num_cpus, include_dashboard=False, configure_logging=False)
        return f"the Ray instance rft started on this machine (ray_init.num_cpus={r.num_cpus})"
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


def run_on_ray(cfg) -> NoReturn:
    """The slice that is built: connect, check, reserve, release; then the line that placing the processes is
    not built yet (docs/cluster.md). Always leaves the cluster as it found it."""
    ray = import_ray()
    where = connect(cfg)
    try:
        nodes = live_nodes()
        gpus = cfg.trainer.device == "cuda" or (cfg.trainer.device == "auto" and any(n.gpus for n in nodes))
        groups = placement(cfg, gpus)
        missing = shortfall(groups, nodes)
        if missing is not None:
            raise RftError(f"{where}: {missing}: add nodes or resources (`ray start --num-cpus / --num-gpus`), or "
                           "lower trainer.nnodes / trainer.n_gpus_per_node")
        from ray.util.placement_group import remove_placement_group

        for pg in reserve(groups, cfg.trainer.ray_wait_register_center_timeout, where):
            remove_placement_group(pg)
    finally:
        ray.shutdown()
    key = ADDRESS_KEYS if cfg.ray_init.address is not None else "ray_init.num_cpus"
    raise RftError(f"{where} grants the placement ({_need(groups)}), but starting rft's processes on Ray is not "
                   f"built yet (docs/cluster.md); remove {key} to start them here")
