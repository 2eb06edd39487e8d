"""Trinity-RFT's own example and benchmark YAMLs (../shared/peer-configs/trinity, issue 63) through `rft config
show`, the way ../shared/peer-configs/measure.py runs them: its own stand-ins (a tiny model for every model path,
GSM8K rows for every data path, GPU counts 1, scratch checkpoint folders, its ${oc.env:TRINITY_*} variables) and
its own runner (rft's CLI in a fork of this process), imported from that file, so this test and the measurement
cannot drift apart.

What it holds every item to: no traceback and no "bug in rft" line; every refusal names a key the item itself
writes; none says the old fallback; an item refused for an environment workflow names the environment's package.
RESOLVE_FLOOR is the count that resolves today, so a change that loses one fails here; issue 63's goal is 50 of
the 59 as written, paths swapped only (what stands between: Trinity workflows of environments whose packages do not
install here, Megatron and Tinker; and under measure.py's GPU counts 1, sequence parallelism over more GPUs than
that, which resolves with the items' own counts: the last test). Nothing resolves
suspiciously (a key it sets missing from the resolved config, or of another value there).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[2] / "shared" / "peer-configs"
GSM8K = PEERS.parent / "data" / "gsm8k"
RUN_CONFIGS = 59  # the corpus's Trinity YAMLs that are run configs (one more is a Data-Juicer recipe)
# 29 at b2daa78, + the BOTS example's three, + trainable RULER (its train_batch_size); earlier: + dapo_math
# (per-file eval columns, a workflow's overlong penalty), exp_replay, gsm8k_ruler
# + ALFWorld's two (alfworld_workflow, step_wise_alfworld_workflow; config show notes the package where it is missing),
# + learn_to_ask (its plugin's workflow), + RAFT_alfworld's two (its RAFT workflows), + bench/external_model (an API model)
# + the two Data-Juicer pipeline examples (what their operators need of the machine is a note under config show)
RESOLVE_FLOOR = 41
ENV_PACKAGES = ("alfworld", "scienceworld", "webshop", "gymnasium", "agentscope")


def _measure():
    """measure.py as a module (its stand-ins, runner and checks); a missing corpus fails, it does not skip: CI
    lays ../shared beside the clone, and a test that skips there tests nothing."""
    script = PEERS / "measure.py"
    assert script.is_file(), f"the peer corpus is missing: {script} (../shared/peer-configs beside the clone)"
    assert (GSM8K / "train.jsonl").is_file(), f"the GSM8K stand-in rows are missing: {GSM8K}/train.jsonl"
    spec = importlib.util.spec_from_file_location("peer_measure", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """The corpus measured: its records, and measure.py's runner and stand-ins to run an item again."""
    measure = _measure()
    work = tmp_path_factory.mktemp("peers_trinity")
    runner = measure.Runner(shutil.which("rft") or "rft", subprocess_mode=False)
    paths = measure.setup(runner, work, GSM8K)
    root = work / "trinity"
    shutil.copytree(PEERS / "trinity", root)
    out = []
    for path in sorted(root.rglob("*.y*ml")):
        if not path.name.endswith(".local.yaml"):
            out.append(measure.run_trinity_item(runner, path, root, paths, work))
    return {"records": [r for r in out if r["class"] != "N"],  # N: not a run config (the Data-Juicer recipe)
            "measure": measure, "runner": runner, "paths": paths, "root": root, "work": work}


@pytest.fixture(scope="module")
def records(corpus) -> list[dict]:
    return corpus["records"]


def test_every_trinity_example_resolves_or_is_refused_by_its_own_keys(records):
    assert len(records) == RUN_CONFIGS, [r["id"] for r in records]
    tracebacks = [(r["id"], r["errors"][:2]) for r in records if r["class"] == "T"]
    assert not tracebacks, tracebacks
    misnamed = [(r["id"], r["misnamed"][:2]) for r in records if r.get("misnamed")]
    resolved = [r["id"] for r in records if r["class"] == "R"]
    assert len(resolved) >= RESOLVE_FLOOR, (len(resolved), resolved)
    lines = [line for r in records for line in r.get("errors", [])]
    assert not [line for line in lines if "no equivalent in its one-process synchronous loop" in line]
    for r in records:  # an environment workflow's refusal names the package it needs
        for line in r.get("errors", []):
            if "Trinity-RFT's workflow that runs" in line:
                assert any(f"the {package} package" in line for package in ENV_PACKAGES), line
    # every refusal names a key the item writes (measure.py's check), not only rft's translation of it
    assert not misnamed, misnamed
    # resolved, but a key differs from what the item sets (measure.py's S): none
    suspicious = [(r["id"], r["suspicious"]) for r in records if r["class"] == "S"]
    assert not suspicious, suspicious


SEQUENCE_PARALLEL_ONLY = "does not divide the 1 process(es)"
PATHS_ONLY_FLOOR = 51  # issue 63's goal: 50 of the 59 as written, paths swapped only
# what may stand between an item and resolving as written: an environment whose package does not install here, a
# training backend rft has not
NOT_HERE = ("Trinity-RFT's workflow that runs", "'megatron'", "model.tinker")


def _as_written(local: dict, original: dict, tasks: str) -> dict:
    """`local` (measure.py's copy: model and data paths swapped, GPU counts 1) with the item's own cluster and
    engine counts, and a taskset path the item leaves null (its benchmark's templates: bench.py fills it) swapped
    for the GSM8K stand-in like the others: the item as written, its paths swapped only."""
    import copy

    out = copy.deepcopy(local)
    for key in ("node_num", "gpu_per_node"):
        if key in (original.get("cluster") or {}):
            out["cluster"][key] = original["cluster"][key]
    engines = ((original.get("explorer") or {}).get("rollout_model") or {}).get("engine_num")
    if engines is not None:
        out["explorer"]["rollout_model"]["engine_num"] = engines
    explorer_input = (out.get("buffer") or {}).get("explorer_input") or {}
    for taskset in [explorer_input.get("taskset") or {}, *(explorer_input.get("eval_tasksets") or [])]:
        if "path" in taskset and taskset["path"] is None:
            taskset["path"] = tasks
    return out


def test_the_corpus_resolves_as_written_with_its_paths_swapped_only(corpus):
    """Issue 63's measure: each item as written, its paths swapped only (`_as_written`: measure.py's stand-ins
    without its GPU counts of 1, under which the sequence-parallel examples cannot split one process). At least
    PATHS_ONLY_FLOOR resolve; every other is refused only for an environment whose package does not install here or
    a Megatron / Tinker backend. The ones only the stand-in's GPU count refuses (toolace, mix_chord, mix_vlm, the
    AgentScope examples: sequence parallelism 2 over 8 GPUs, 4 engines) are among them, engine_num's engines on the
    on-policy schedule one engine with a note, with sync_interval 2 four explorers with Trinity's nccl a broadcast
    to each."""
    import yaml

    measure, root = corpus["measure"], corpus["root"]
    resolved, refused = [], {}
    for r in corpus["records"]:
        original = yaml.safe_load((root / r["id"]).read_text())
        local = (root / r["id"]).with_name((root / r["id"]).stem + ".local.yaml")
        own = local.with_name(local.name.replace(".local.yaml", ".written.yaml"))
        own.write_text(yaml.safe_dump(_as_written(yaml.safe_load(local.read_text()), original,
                                                  str(corpus["paths"]["tds"]))))
        ckpt = corpus["work"] / "ckpt" / own.stem
        rc, out, err, _ = corpus["runner"](["config", "show", str(own.relative_to(root))], root,
                                           env=measure.trinity_env(corpus["paths"], ckpt))
        if rc == 0:
            resolved.append(r["id"])
            shown = yaml.safe_load(out)
            if any(SEQUENCE_PARALLEL_ONLY in line for line in r.get("errors", [])):
                assert shown["actor_rollout_ref"]["actor"]["ulysses_sequence_parallel_size"] == 2
                assert shown["trainer"]["n_gpus_per_node"] == 4, r["id"]  # 8 less the 4 engines' (Trinity's split)
                interval = (original.get("synchronizer") or {}).get("sync_interval", 1)
                assert shown["trainer"].get("explorer_num", 1) == (1 if interval == 1 else 4), r["id"]
                if interval == 1:
                    assert "engine_num=4" in err and "one engine generates each step's rollouts" in err, err[-600:]
        else:
            refused[r["id"]] = [line for line in err.splitlines() if line.startswith("rft: error:")]
    assert len(resolved) >= PATHS_ONLY_FLOOR, (len(resolved), "\n".join(f"{k}: {v}" for k, v in refused.items()))
    assert {r["id"] for r in corpus["records"] if any(SEQUENCE_PARALLEL_ONLY in line for line in r.get("errors", []))
            } <= set(resolved)
    for item, lines in refused.items():
        assert lines and all(any(why in line for why in NOT_HERE) for line in lines), (item, lines)
