"""The example configs printed in the seed's spec files (../shared/spec), as data: verl's ppo_trainer.yaml and
sft_trainer.yaml blocks (reStructuredText `.. code:: yaml`) and Trinity-RFT's example blocks (a rendered page: a block
is the YAML between a blank line and its bullet list; `...` placeholder lines are dropped)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import yaml

SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec"
if not SPEC.is_dir():  # a worktree beside the shared folder
    SPEC = Path("/work/shared/spec")


def rst_yaml_blocks(path: Path) -> list[str]:
    lines = Path(path).read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip().startswith(".. code:: yaml"):
            i += 1
            block = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            out.append(textwrap.dedent("\n".join(block)).strip("\n"))
        else:
            i += 1
    return out


def verl_ppo_trainer_yaml() -> str:
    """ppo_trainer.yaml as the seed prints it: its data, actor_rollout_ref, reward_model, custom_reward_function,
    algorithm and trainer blocks (the separate custom_cls and Megatron optim blocks are explanations of parts)."""
    blocks = rst_yaml_blocks(SPEC / "verl_config_reference.rst")
    seen: dict[str, str] = {}
    for block in blocks[: blocks.index(next(b for b in blocks if b.startswith("trainer:"))) + 1]:
        key = next(iter(yaml.safe_load(block)))
        if key not in ("custom_cls", "optim"):
            seen.setdefault(key, block)
    return "\n".join(seen.values()) + "\n"


def verl_sft_trainer_yaml() -> str:
    """sft_trainer.yaml's optim and model blocks as the seed prints them."""
    blocks = rst_yaml_blocks(SPEC / "verl_config_reference.rst")
    return "\n".join(blocks[-2:]) + "\n"


def md_yaml_blocks(path: Path) -> list[dict]:
    lines = Path(path).read_text().splitlines()
    blocks, cur = [], None
    for line in lines:
        key = re.match(r"^[a-z_]+:", line)
        if cur is None:
            if key:
                cur = [line]
            continue
        if line.lstrip().startswith("•") or (line and not line[0].isspace() and not key and not line.startswith("- ")):
            blocks.append(cur)
            cur = None
            continue
        cur.append(line)
    if cur:
        blocks.append(cur)
    return [yaml.safe_load("\n".join(x for x in b if x.strip() != "...").replace("`", "'")) for b in blocks]


def merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
