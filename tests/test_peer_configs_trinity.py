"""Trinity-RFT's own example and benchmark YAMLs (../shared/peer-configs/trinity, issue 63) through `rft config
show`, the way ../shared/peer-configs/measure.py runs them: its own stand-ins (a tiny model for every model path,
GSM8K rows for every data path, GPU counts 1, scratch checkpoint folders, its ${oc.env:TRINITY_*} variables) and
its own runner (rft's CLI in a fork of this process), imported from that file, so this test and the measurement
cannot drift apart.

What it holds every item to: no traceback and no "bug in rft" line; every refusal names a key the item itself
writes; none says the old fallback; an item refused for an environment workflow names the environment's package.
RESOLVE_FLOOR is the count that resolves today, so a change that loses one fails here; issue 63's goal is 50 of
the 59 (what stands between: Trinity workflows and reward functions rft has not, train_batch_size other than
batch_size x repeat_times, sequence parallelism over more GPUs than the stand-in's 1). Nothing resolves
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
def records(tmp_path_factory) -> list[dict]:
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
    return [r for r in out if r["class"] != "N"]  # N: not a run config (the Data-Juicer recipe)


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
