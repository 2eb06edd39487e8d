"""Ray as the launcher (docs/cluster.md): the keys (verl's ray_init, Trinity-RFT's cluster.ray_address), an address
that does not answer as one line within the connect timeout, and, on a real two-node cluster on 127.0.0.1
(tests/ray_cluster.py): actors pinned to each node, the placement checked against the cluster, mode both with 2
trainer processes and 2 explorers placed on it equal to rft's own launch, a killed actor as the run's one line and
its rerun resuming."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import rft_here
from ray_cluster import free_port, local_cluster
from rl_helpers import SHAPED_REWARD, make_assets, rl_config
from test_modes import (
    ENV,
    TWO_TRAINERS,
    assert_each_read_once,
    assert_same_training,
    checkpointed,
    finish,
    lines,
    overrides,
    start,
    wait_for,
)

from rft.buffer import database_url
from rft.config.load import ConfigError
from rft.dialects.trinity import translate
from rft.errors import RftError
from rft.orchestration.cluster import Group, Node, placement, reachable, shortfall


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("assets"))


# the rewards of an explorer whose working directory holds a file `hold` wait, once the trainer's first checkpoint is
# committed (out/checkpoints/latest), until the file goes (bounded: 300 s)
GATED_REWARD = SHAPED_REWARD + """
import time
from pathlib import Path

_score = compute_score


def compute_score(*args, **kwargs):
    deadline = time.monotonic() + 300
    while Path("hold").exists() and Path("out/checkpoints/latest").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return _score(*args, **kwargs)
"""


@pytest.fixture(scope="module")
def gated_assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("gated"), GATED_REWARD)


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
        reachable(f"127.0.0.1:{port}", 120.0)
    assert time.monotonic() - start < 60  # at once: not the 120 s an address that does not answer gets
    assert str(err.value) == (
        f"the Ray cluster at 127.0.0.1:{port} did not answer within 120 s (Connection refused): start it with `ray "
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
    assert 0.9 < took < 60  # the connect timeout, not a hang
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



def test_a_head_silent_for_the_connect_timeout_is_the_runs_one_line():
    """The driver's watch on the head (`_Head`): a GCS address that refuses is lost once it has been silent for
    ray_init.connect_timeout, not at the first probe."""
    from types import SimpleNamespace

    from rft.orchestration.cluster import _Head

    port = free_port()  # nothing listens there
    ray = SimpleNamespace(get_runtime_context=lambda: SimpleNamespace(gcs_address=f"127.0.0.1:{port}"))
    head = _Head(ray, "the Ray cluster at 127.0.0.1:6379", 1.0, own_instance=False)
    head.check()  # silent since now
    assert not head.lost
    time.sleep(1.1)
    with pytest.raises(RftError) as err:
        head.check()
    assert head.lost and str(err.value) == (
        f"the Ray cluster at 127.0.0.1:6379 lost its head: its GCS at 127.0.0.1:{port} has not answered for 1 s "
        "(ray_init.connect_timeout); the run's processes end with their nodes; start the cluster again, then run the "
        "same command again to resume")

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


def test_the_driver_prints_every_line_of_the_returned_processes_before_it_lets_them_go():
    """Ray's log monitor delivers a process's last lines some time after the process has returned: the driver
    waits for the mark each placed process writes last on stdout and stderr, prints the lines and not the marks."""
    import threading

    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    from rft.orchestration.cluster import _Console

    printed, handlers = [], list(dispatcher.handlers)
    dispatcher.add_handler("ray_print_logs", lambda data: printed.append((data["is_err"], data["lines"])))
    try:
        console = _Console(wait_s=20)
        assert console.hooked

        def late(role: str, delay: float) -> None:
            time.sleep(delay)
            dispatcher.emit({"is_err": False, "lines": [f"{role}: model written to x", f"{console.mark}{role}"]})
            dispatcher.emit({"is_err": True, "lines": [f"{console.mark}{role}"]})

        threads = [threading.Thread(target=late, args=args) for args in (("trainer_rank_0", 1.0), ("explorer_0", 0.5))]
        start = time.monotonic()
        for t in threads:
            t.start()
        console.drain(["trainer_rank_0", "explorer_0"])
        waited = time.monotonic() - start
        assert 0.9 < waited < 60, waited  # for both to return (the later one after 1 s), not the 20 s wait_s
        assert sorted(printed) == [(False, ["explorer_0: model written to x"]),
                                   (False, ["trainer_rank_0: model written to x"])]
        start = time.monotonic()
        console.drain([])  # nothing returned (killed, lost): nothing to wait for
        assert time.monotonic() - start < 10  # not the 20 s wait_s
    finally:
        dispatcher.handlers = handlers



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


TWO_AND_TWO = (*TWO_TRAINERS, "trainer.explorer_num=2")
"""Mode both with 2 trainer processes (FSDP) and 2 explorers taking turns at the steps (sync files)."""


@pytest.fixture(scope="module")
def launched_by_rft(assets, tmp_path_factory) -> Path:
    """TWO_AND_TWO for 4 steps, the processes started by rft itself."""
    out = tmp_path_factory.mktemp("by_rft") / "out"
    finish(start("train", *overrides(assets, out, 4, *TWO_AND_TWO), cwd=out.parent))
    return out


@ON_A_CLUSTER
def test_mode_both_on_ray_trains_as_the_processes_rft_starts_itself(cluster, assets, launched_by_rft, tmp_path):
    """2 trainer processes and 2 explorers, placed by the driver on the two-node cluster: the same metrics step by
    step and the same final weights as rft's own launch, a log file per process, each console line once."""
    out = tmp_path / "out"
    log = finish(start("train", *overrides(assets, out, 4, *TWO_AND_TWO, f"ray_init.address={cluster}"),
                       cwd=tmp_path))
    first = log.splitlines()[0]
    assert re.fullmatch(re.escape(f"rft: 4 processes on the Ray cluster at {cluster}: ") + r"trainer rank 0 on \S+, "
                        r"trainer rank 1 on \S+, explorer 0 on \S+, explorer 1 on \S+", first), log
    assert log.count("rft: model written to") == 1 and "(trainer_rank_0 pid=" in log, log
    assert "rft-ray-end" not in log, log  # the marks that end each process's output are not printed
    assert_same_training(out, launched_by_rft)
    steps = lambda path: [(x["step"], x["rollout/model_version"]) for x in lines(path / "metrics.jsonl")]
    for explorer in ("explorer", "explorer_1"):  # the steps each explorer took, with the versions they synced
        assert steps(out / explorer) == steps(launched_by_rft / explorer)
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 4, 16)
    assert sorted(p.name for p in (out / "log").iterdir()) == [
        "explorer.log", "explorer_1.log", "trainer.log", "trainer_1.log"]


def _placed(role_env: bytes, cwd: Path) -> int | None:
    """The pid of the `python -m rft` process the Ray driver placed whose environment holds `role_env`, run in
    `cwd`; None while there is none."""
    for proc in Path("/proc").iterdir():
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            if b"RFT_RAY_PLACED=1" in env and role_env in env and (proc / "cwd").resolve() == cwd.resolve():
                return int(proc.name)
        except (OSError, ValueError):
            continue
    return None


@ON_A_CLUSTER
def test_a_killed_explorer_actor_is_the_runs_one_line_and_the_rerun_resumes(cluster, assets, launched_by_rft,
                                                                            tmp_path):
    """Explorer 1's Ray actor SIGKILLed (its worker process: what a lost node does to it) once checkpoint 1 is
    written: the driver ends the run with one line naming it, no process of the run is left, and the same command
    run again resumes and trains as the uninterrupted run did."""
    out = tmp_path / "out"
    args = overrides(assets, out, 4, *TWO_AND_TWO, f"ray_init.address={cluster}")
    run = start("train", *args, cwd=tmp_path)
    wait_for(lambda: checkpointed(out, 1) or run.poll() is not None)
    explorer = _placed(b"RFT_EXPLORER_RANK=1", tmp_path)
    assert explorer is not None and run.poll() is None
    actor = int((Path("/proc") / str(explorer) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(actor, signal.SIGKILL)
    log, _ = run.communicate(timeout=180)
    assert run.returncode == 2 and not (out / "model").exists(), log
    line = [x for x in log.splitlines() if x.startswith("rft: error:")]
    assert len(line) == 1 and re.fullmatch(r"rft: error: the explorer 1 on \S+ died \(.+\); run the same command "
                                           r"again to resume", line[0]), log
    wait_for(lambda: _placed(b"RFT_RAY_PLACED=1", tmp_path) is None, timeout=30)  # the others follow their actors
    log = finish(start("train", *args, cwd=tmp_path))
    assert "resumed from" in log, log
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 4, 16)
    assert_same_training(out, launched_by_rft)


@ON_A_CLUSTER
def test_modes_explore_train_and_bench_on_ray_with_ctrl_c_passed_on(cluster, gated_assets, tmp_path):
    """Modes explore and train as two commands, each placed on the cluster (the trainer on 2 processes): Ctrl-C to
    the trainer's driver once checkpoint 1 is written reaches its processes, which stop at their next step (rft's
    `stopped by` line, exit 130); run again it finishes, every experience read once. Then mode bench on the
    cluster evaluates the checkpoints. The explorer's rewards are held from checkpoint 1 on until the trainer has
    stopped (GATED_REWARD): its step 4 needs version 2, written after checkpoint 1, so the trainer cannot finish
    before the signal however late the signal comes on a loaded machine."""
    out = tmp_path / "out"
    common = overrides(gated_assets, out, 4, "synchronizer.sync_interval=2", "synchronizer.sync_offset=1",
                       f"ray_init.address={cluster}", f"data.val_files={gated_assets / 'data' / 'val.parquet'}")
    (tmp_path / "hold").touch()
    trainer = start("train", *common, "trainer.mode=train", "trainer.n_gpus_per_node=2", cwd=tmp_path)
    explorer = start("train", *common, "trainer.mode=explore", cwd=tmp_path)
    wait_for(lambda: checkpointed(out, 1) or trainer.poll() is not None)
    trainer.send_signal(signal.SIGINT)
    log, _ = trainer.communicate(timeout=180)
    (tmp_path / "hold").unlink()
    assert trainer.returncode == 130, log
    assert "rft: SIGINT received: passed on to the 2 processes" in log
    assert re.search(r"^rft: stopped by SIGINT \(2 processes on Ray\); the same command resumes from .*global_step_\d$",
                     log, re.M), log
    assert "resumed from" in finish(start("train", *common, "trainer.mode=train", "trainer.n_gpus_per_node=2",
                                          cwd=tmp_path))
    finish(explorer)
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 4, 16)
    assert [x["rollout/model_version"] for x in lines(out / "explorer" / "metrics.jsonl")] == [0, 0, 0, 2]
    log = finish(start("train", *common, "trainer.mode=bench", "trainer.bench_on_latest_checkpoint=true",
                       cwd=tmp_path))
    assert log.startswith(f"rft: 1 process on the Ray cluster at {cluster}: bench on "), log
    assert [x["checkpoint"] for x in lines(out / "bench" / "metrics.jsonl")] == ["global_step_4"]


@ON_A_CLUSTER
def test_two_trainer_nodes_on_ray_train(cluster, assets, tmp_path):
    """trainer.nnodes=2: one trainer process per placement group (the two nodes' worth), torchrun's rendezvous at
    rank 0's node; rft's own launch refuses several nodes."""
    run = _train(assets, tmp_path, f"ray_init.address={cluster}", "trainer.nnodes=2", "trainer.n_gpus_per_node=1")
    assert run.returncode == 0, run.stderr
    assert "on 2 processes (cpu)" in run.stdout and (tmp_path / "model" / "model.safetensors").is_file()


@ON_A_CLUSTER
def test_a_cluster_too_small_for_the_placement_says_what_is_missing(cluster, assets, tmp_path):
    run = _train(assets, tmp_path, f"ray_init.address={cluster}", "trainer.n_gpus_per_node=4")
    assert run.returncode == 2
    # the nodes' address is the one Ray records: this machine's, where --node-ip-address 127.0.0.1 was asked
    line = re.fullmatch(
        re.escape(f"rft: error: the Ray cluster at {cluster}: the placement needs trainer node 0: 4 x (1 CPU) on one "
                  "node; the cluster has 2 nodes: ") + r"(\S+) \(2 CPU, 0 GPU\), (\S+) \(2 CPU, 0 GPU\)"
        + re.escape(": add nodes or resources (`ray start --num-cpus / --num-gpus`), or lower trainer.nnodes / "
                    "trainer.n_gpus_per_node"), run.stderr.strip())
    assert line is not None and line[1] == line[2], run.stderr


@ON_A_CLUSTER
def test_verl_num_cpus_starts_a_ray_instance_for_the_run_and_stops_it(assets, tmp_path, monkeypatch):
    import ray

    monkeypatch.setenv("HOME", str(tmp_path))  # the token Ray writes for a new local instance (~/.ray/auth_token)
    run = _train(assets, tmp_path, "ray_init.num_cpus=2", "trainer.n_gpus_per_node=2")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("rft: 2 processes on the Ray instance rft started on this machine "
                                 "(ray_init.num_cpus=2): trainer rank 0 on "), run.stdout
    assert (tmp_path / "model" / "model.safetensors").is_file()
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
        assert holder.stdout.readline().strip() == "holding"  # one of node0's CPUs is taken; the totals still fit
        run = _train(assets, tmp_path, f"ray_init.address={cluster}", "trainer.nnodes=2", "trainer.n_gpus_per_node=2",
                     "trainer.ray_wait_register_center_timeout=2")
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        f"rft: error: the Ray cluster at {cluster} did not grant trainer node 0: 2 x (1 CPU) on one node, trainer "
        "node 1: 2 x (1 CPU) on one node within 2 s (trainer.ray_wait_register_center_timeout); free when asked: "
        "{'CPU': 3.0}"]


def _start_own(args: list[str], cwd: Path) -> subprocess.Popen:
    """`rft train <args>` from `cwd` with HOME there: the token Ray writes for a new local instance
    (~/.ray/auth_token) stays out of the user's home."""
    return subprocess.Popen([sys.executable, "-m", "rft", "train", *args], cwd=cwd, env={**ENV, "HOME": str(cwd)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _listening(root: int) -> dict[tuple[str, str, int], str]:
    """{(process name, address, port): its command} of every TCP socket listening in `root`'s process tree now."""
    import psutil

    try:
        procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    found = {}
    for proc in procs:
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found[(proc.name(), conn.laddr.ip, conn.laddr.port)] = " ".join(proc.cmdline()[:4])
        except psutil.Error:  # ended meanwhile
            continue
    return found


def _loopback(address: str) -> bool:
    import ipaddress

    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


@ON_A_CLUSTER
def test_rfts_own_ray_instance_listens_on_loopback_only(assets, tmp_path):
    """ray_init.num_cpus: every listening socket of the run's processes (the driver, Ray's GCS, raylet, agents and
    workers, the placed rft process) is bound to 127.0.0.1, sampled while the run lives; with Ray's defaults they
    listened on `::` and the host's address."""
    out = tmp_path / "out"
    run = _start_own(overrides(assets, out, 1, "ray_init.num_cpus=2"), tmp_path)
    seen: dict = {}
    while run.poll() is None:
        seen.update(_listening(run.pid))
        time.sleep(0.2)
    log = run.stdout.read()
    assert run.returncode == 0, log
    assert {"gcs_server", "raylet"} <= {name for name, _, _ in seen}, seen
    assert [key for key in seen if not _loopback(key[1])] == [], seen


@pytest.fixture(scope="module")
def one_process_by_rft(gated_assets, tmp_path_factory) -> Path:
    """Mode both on one process for 4 steps, started by rft itself: what a run on Ray must train."""
    out = tmp_path_factory.mktemp("one_by_rft") / "out"
    finish(start("train", *overrides(gated_assets, out, 4), cwd=out.parent))
    return out


@ON_A_CLUSTER
def test_a_lost_ray_head_is_the_runs_one_line_and_the_rerun_resumes(gated_assets, one_process_by_rft, tmp_path):
    """The GCS of rft's own Ray instance SIGKILLed once checkpoint 1 is written (the head lost; its raylet and the
    placed process live on, the process's rewards held from then on: GATED_REWARD): the driver stops within
    ray_init.connect_timeout with one `rft: error:` line naming the head and exit 2, not Ray's own line and exit 1
    after 60 s; the placed process ends with it, and the same command then resumes and trains as the uninterrupted
    run did."""
    import psutil

    out = tmp_path / "out"
    args = overrides(gated_assets, out, 4, "ray_init.num_cpus=2", "ray_init.connect_timeout=3")
    (tmp_path / "hold").touch()
    run = _start_own(args, tmp_path)
    wait_for(lambda: checkpointed(out, 1) or run.poll() is not None)
    gcs = next(p for p in psutil.Process(run.pid).children(recursive=True) if p.name() == "gcs_server")
    address = next(f"{c.laddr.ip}:{c.laddr.port}" for c in gcs.net_connections(kind="tcp")
                   if c.status == psutil.CONN_LISTEN)
    lost = time.monotonic()
    gcs.kill()
    log, _ = run.communicate(timeout=180)
    took = time.monotonic() - lost
    assert run.returncode == 2 and not (out / "model").exists(), log
    assert took < 50, log  # Ray itself ends a driver whose GCS is gone after 60 s
    errors = [x for x in log.splitlines() if x.startswith("rft: error:")]
    assert len(errors) == 1 and re.fullmatch(
        re.escape("rft: error: the Ray instance rft started on this machine (ray_init.num_cpus=2) lost its head: its "
                  f"GCS at {address.removeprefix('::ffff:')} ") + r".+; the run's processes end with their nodes; run "
        r"the same command again to resume", errors[0]), log
    assert "Failed to connect to GCS" not in log, log
    wait_for(lambda: _placed(b"RFT_RAY_PLACED=1", tmp_path) is None, timeout=60)
    (tmp_path / "hold").unlink()
    run = _start_own(args, tmp_path)
    log, _ = run.communicate(timeout=600)
    assert run.returncode == 0 and "resumed from" in log, log
    assert_same_training(out, one_process_by_rft)


@ON_A_CLUSTER
def test_a_clusters_lost_head_is_the_runs_one_line_and_the_rerun_on_a_new_cluster_resumes(
        gated_assets, one_process_by_rft, tmp_path):
    """The issue's case: a cluster's head (its GCS) SIGKILLed mid-run. The driver's line names the head and says to
    start the cluster again (exit 2, within 50 s: not Ray's own line and exit 1 after 60 s), and the same command on a
    new cluster resumes and trains as the uninterrupted run did."""
    import psutil

    out = tmp_path / "out"
    (tmp_path / "hold").touch()
    for logs in ("ray", "ray2"):
        (tmp_path / logs).mkdir()
    with local_cluster(tmp_path / "ray") as address:
        port = int(address.rpartition(":")[2])
        args = overrides(gated_assets, out, 4, f"ray_init.address={address}", "ray_init.connect_timeout=3")
        run = start("train", *args, cwd=tmp_path)
        wait_for(lambda: checkpointed(out, 1) or run.poll() is not None)
        gcs = next(psutil.Process(c.pid) for c in psutil.net_connections(kind="tcp")
                   if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid)
        lost = time.monotonic()
        gcs.kill()
        log, _ = run.communicate(timeout=180)
        took = time.monotonic() - lost
    assert run.returncode == 2 and not (out / "model").exists(), log
    assert took < 50, log
    errors = [x for x in log.splitlines() if x.startswith("rft: error:")]
    assert len(errors) == 1 and re.fullmatch(
        re.escape(f"rft: error: the Ray cluster at {address} lost its head: its GCS at ") + r"\S+ .+; the run's "
        r"processes end with their nodes; start the cluster again, then run the same command again to resume",
        errors[0]), log
    wait_for(lambda: _placed(b"RFT_RAY_PLACED=1", tmp_path) is None, timeout=60)
    (tmp_path / "hold").unlink()
    with local_cluster(tmp_path / "ray2") as address:
        log = finish(start("train", *overrides(gated_assets, out, 4, f"ray_init.address={address}"), cwd=tmp_path))
    assert "resumed from" in log, log
    assert_same_training(out, one_process_by_rft)
