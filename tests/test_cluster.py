"""Ray as the launcher, first slice (docs/cluster.md): the keys (verl's ray_init, Trinity-RFT's cluster.ray_address),
an address that does not answer as one line within the connect timeout, and, on a real two-node cluster on
127.0.0.1 (tests/ray_cluster.py), actors pinned to each node and the placement checked against the cluster."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest
from cli_helpers import rft_here
from ray_cluster import free_port, local_cluster
from rl_helpers import make_assets, rl_config

from rft.config.load import ConfigError
from rft.dialects.trinity import translate
from rft.errors import RftError
from rft.trainer.cluster import Group, Node, placement, reachable, shortfall


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("assets"))


# ------------------------------------------------------------------------------------------ no cluster
def test_the_placement_follows_the_mode(assets, tmp_path):
    cfg = rl_config(assets, tmp_path / "out", "trainer.nnodes=2", "trainer.n_gpus_per_node=2")
    assert placement(cfg, gpus=False) == [Group("trainer node 0", 2, 0), Group("trainer node 1", 2, 0)]
    cfg.synchronizer.sync_offset, cfg.trainer.explorer_num = 1, 2  # the explorer runs ahead, as its own processes
    assert placement(cfg, gpus=True)[2:] == [Group("explorer 0", 1, 1), Group("explorer 1", 1, 1)]
    cfg.trainer.mode = "explore"
    assert placement(cfg, gpus=False) == [Group("explorer", 1, 0)]


def test_a_placement_that_does_not_fit_names_what_it_needs_and_what_the_cluster_has():
    groups = [Group("trainer node 0", 2, 0), Group("explorer 0", 1, 0)]
    assert shortfall(groups, [Node("10.0.0.1", 2, 0), Node("10.0.0.2", 1, 0)]) is None
    assert shortfall(groups, [Node("10.0.0.1", 1, 0), Node("10.0.0.2", 1, 0)]) == (
        "the placement needs trainer node 0: 2 x (1 CPU) on one node, explorer 0: 1 x (1 CPU) on one node; "
        "the cluster has 2 nodes: 10.0.0.1 (1 CPU, 0 GPU), 10.0.0.2 (1 CPU, 0 GPU)")
    assert shortfall([Group("trainer node 0", 1, 1)], [Node("10.0.0.1", 8, 0)]) == (
        "the placement needs trainer node 0: 1 x (1 CPU + 1 GPU) on one node; the cluster has 1 node: "
        "10.0.0.1 (8 CPU, 0 GPU)")


def test_an_address_that_refuses_is_one_line_at_once():
    port = free_port()  # nothing listens there
    start = time.monotonic()
    with pytest.raises(RftError) as err:
        reachable(f"127.0.0.1:{port}", 5.0)
    assert time.monotonic() - start < 1.0
    assert str(err.value) == (
        f"the Ray cluster at 127.0.0.1:{port} did not answer within 5 s (Connection refused): start it with `ray "
        f"start --head --port {port}` or correct ray_init.address (Trinity-RFT: cluster.ray_address)")


def test_an_address_that_does_not_answer_is_one_line_after_the_connect_timeout():
    # a listener whose backlog is full: the kernel drops further connection requests unanswered
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        queued = []
        for _ in range(2):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            queued.append(s)
        time.sleep(0.2)
        start = time.monotonic()
        with pytest.raises(RftError) as err:
            reachable(f"127.0.0.1:{port}", 1.0)
        took = time.monotonic() - start
        for s in queued:
            s.close()
    assert 0.9 < took < 2.0
    assert str(err.value).startswith(f"the Ray cluster at 127.0.0.1:{port} did not answer within 1 s (no answer)")


def test_an_address_that_answers_but_not_as_grpc_is_one_line():
    import threading

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def http1() -> None:  # an HTTP/1 server's answer to HTTP/2's preface
            conn, _ = listener.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        server = threading.Thread(target=http1, daemon=True)
        server.start()
        with pytest.raises(RftError) as err:
            reachable(f"127.0.0.1:{port}", 5.0)
        server.join(5)
    assert str(err.value) == (
        f"127.0.0.1:{port} answers, but not as a Ray head's GCS port (no gRPC answer): give the port of `ray start "
        "--head --port PORT` in ray_init.address (Trinity-RFT: cluster.ray_address)")


def test_trinity_ray_address_is_verl_ray_init_address():
    from test_trinity import _with

    assert translate(_with({"cluster.ray_address": "10.0.0.1:6379"}), "t.yaml")["ray_init"] == {
        "address": "10.0.0.1:6379"}
    assert "ray_init" not in translate(_with({}), "t.yaml")  # Trinity's default `auto` is for a key left out


def test_ray_init_num_cpus_with_an_address_is_refused(assets, tmp_path):
    with pytest.raises(ConfigError) as err:
        rl_config(assets, tmp_path / "out", "ray_init.address=10.0.0.1:6379", "ray_init.num_cpus=4")
    assert str(err.value) == (
        "ray_init.num_cpus=4 starts a Ray instance of rft's own, but ray_init.address='10.0.0.1:6379' names a "
        "running cluster, whose CPUs are its `ray start --num-cpus`: set one of them")


# -------------------------------------------------------------------------------------- a real cluster
ON_A_CLUSTER = pytest.mark.heavy
"""The two nodes start in 20-45 s and stop in about 10 on the 2-core machine: make test-heavy runs these."""

@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> str:
    with local_cluster(tmp_path_factory.mktemp("ray")) as address:
        yield address


@ON_A_CLUSTER
def test_an_actor_pinned_to_each_node_runs_there(cluster):
    import ray

    ray.init(address=cluster, configure_logging=False, log_to_driver=False)
    try:
        @ray.remote(num_cpus=1)
        class Where:
            def node(self) -> str:
                return ray.get_runtime_context().get_node_id()

        by_resource = {name: next(n["NodeID"] for n in ray.nodes() if n["Alive"] and name in n["Resources"])
                       for name in ("node0", "node1")}
        actors = [Where.options(resources={name: 1}).remote() for name in by_resource]
        ran_on = ray.get([a.node.remote() for a in actors], timeout=60)
        assert ran_on == list(by_resource.values()) and ran_on[0] != ran_on[1]
    finally:
        ray.shutdown()


def _train(assets: Path, tmp_path: Path, *overrides: str):
    return rft_here("train", f"actor_rollout_ref.model.path={assets / 'model'}",
                    f"data.train_files={assets / 'data' / 'train.parquet'}",
                    f"custom_reward_function.path={assets / 'reward.py'}", "data.train_batch_size=4",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2",
                    "trainer.total_training_steps=1", "trainer.device=cpu", f"trainer.default_local_dir={tmp_path}",
                    *overrides, cwd=tmp_path, check=False)


@ON_A_CLUSTER
def test_rft_train_reserves_the_placement_then_says_the_launch_is_not_built(cluster, assets, tmp_path):
    run = _train(assets, tmp_path, f"ray_init.address={cluster}", "trainer.nnodes=2", "trainer.n_gpus_per_node=1")
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        f"rft: error: the Ray cluster at {cluster} grants the placement (trainer node 0: 1 x (1 CPU) on one node, "
        "trainer node 1: 1 x (1 CPU) on one node), but starting rft's processes on Ray is not built yet "
        "(docs/cluster.md); remove ray_init.address (Trinity-RFT: cluster.ray_address) to start them here"]
    assert not (tmp_path / "checkpoints").exists()


@ON_A_CLUSTER
def test_a_cluster_too_small_for_the_placement_says_what_is_missing(cluster, assets, tmp_path):
    run = _train(assets, tmp_path, f"ray_init.address={cluster}", "trainer.n_gpus_per_node=2")
    assert run.returncode == 2
    # the nodes' address is the one Ray records: this machine's, where --node-ip-address 127.0.0.1 was asked
    line = re.fullmatch(
        re.escape(f"rft: error: the Ray cluster at {cluster}: the placement needs trainer node 0: 2 x (1 CPU) on one "
                  "node; the cluster has 2 nodes: ") + r"(\S+) \(1 CPU, 0 GPU\), (\S+) \(1 CPU, 0 GPU\)"
        + re.escape(": add nodes or resources (`ray start --num-cpus / --num-gpus`), or lower trainer.nnodes / "
                    "trainer.n_gpus_per_node"), run.stderr.strip())
    assert line is not None and line[1] == line[2], run.stderr


@ON_A_CLUSTER
def test_verl_num_cpus_starts_a_ray_instance_for_the_run_and_stops_it(assets, tmp_path, monkeypatch):
    import ray

    monkeypatch.setenv("HOME", str(tmp_path))  # the token Ray writes for a new local instance (~/.ray/auth_token)
    run = _train(assets, tmp_path, "ray_init.num_cpus=2", "trainer.n_gpus_per_node=2")
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        "rft: error: the Ray instance rft started on this machine (ray_init.num_cpus=2) grants the placement (trainer "
        "node 0: 2 x (1 CPU) on one node), but starting rft's processes on Ray is not built yet (docs/cluster.md); "
        "remove ray_init.num_cpus to start them here"]
    assert not ray.is_initialized()


HOLD_NODE0 = """
import sys, time, ray
ray.init(address=sys.argv[1], configure_logging=False, log_to_driver=False)
@ray.remote(num_cpus=1, resources={"node0": 1})
class Holder:
    def ready(self):
        return True
holder = Holder.remote()
ray.get(holder.ready.remote(), timeout=60)
print("holding", flush=True)
time.sleep(600)
"""


@ON_A_CLUSTER
def test_a_placement_the_cluster_does_not_grant_in_time_says_what_is_free(cluster, assets, tmp_path):
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", HOLD_NODE0, cluster], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"  # node0's CPU is taken; the totals still fit
        run = _train(assets, tmp_path, f"ray_init.address={cluster}", "trainer.nnodes=2",
                     "trainer.ray_wait_register_center_timeout=2")
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        f"rft: error: the Ray cluster at {cluster} did not grant trainer node 0: 1 x (1 CPU) on one node, trainer "
        "node 1: 1 x (1 CPU) on one node within 2 s (trainer.ray_wait_register_center_timeout); free when asked: "
        "{'CPU': 1.0}"]
