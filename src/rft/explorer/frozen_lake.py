"""The FrozenLake environment of Trinity-RFT's `frozen_lake_workflow` (the workflow: `rft.explorer.workflow`): the
model walks gymnasium's FrozenLake grid, one action a turn.

A task row holds no prompt: `seed`, `size` and `p` (the chance a tile is frozen) make the map (`generate_map`, a
seeded random board with a path from start to goal in at most env_max_steps, as Trinity's, which follows rLLM's), or
the workflow arg `desc` gives it. Each of the task's `repeat_times` episodes starts from the map's start (the env
reset with the row's seed), and each turn the model sees the board as text (`render`: P the player, _ frozen, O a
hole, G the goal) in Trinity's words (`SYSTEM_PROMPT`, `observation_message`) and answers with an action in ``` ```
(Up, Down, Left, Right, or their numbers 4, 2, 1, 3); the episode ends at the goal or in a hole, after agent_max_steps
turns, or when the conversation's tokens after the first prompt reach the run's response budget
(data.max_response_length, Trinity's max_response_tokens: each turn may write what is left of it). The reward is
what the env paid, 1 at the goal and 0 otherwise. One experience per episode, the loss on the model's turns only.
Needs the gymnasium package (`pip install 'rft[envs]'`).
"""

from __future__ import annotations

import re

import numpy as np

from rft.errors import RftError

SYSTEM_PROMPT = """You are Qwen, created by Alibaba Cloud. You are a helpful assistant. You are walking on a frozen lake.

FrozenLake Quick Guide
Goal: Reach the goal (G). Player (P) and Goal (G) must overlap.

Symbols:
_ Frozen | O Hole | G Goal | P Player

Rules:
1. Avoid falling into holes (O).
2. Frozen tiles are slippery, you may move perpendicular to your intended direction.

Valid Action (separated by | ):
Up | Down | Left | Right

Rewards:
Fall into hole: 0
Reach goal: +1.0

You will be provided the current observation, please decide on the next Action.
You should show your thought process and then input the final action in ``` ```.
You should only output the NEXT ACTION at each interation in the ``` ```. For example, if you want to move up, you should output ```Up```.
You should plan ahead and need to achieve it in minimum number of steps.
You should be aware that frozen tiles can be slippery, but the chance is small and you should not overthink it.

Please show your thinking process and put the final action in ``` ```. In every turn, the final action MUST be one of Up, Down, Left, Right.
"""
"""Trinity-RFT's FrozenLake system prompt (after RAGEN's), word for word: the model sees the same text."""

CELLS = {b"P": 0, b"F": 1, b"H": 2, b"G": 3}
GRID = {0: " P \t", 1: " _ \t", 2: " O \t", 3: " G \t", 4: " X \t", 5: " √ \t"}  # 4: in a hole, 5: on the goal
DIRECTIONS = {"left": 1, "down": 2, "right": 3, "up": 4}  # Trinity's actions; gymnasium's are one less
INVALID = 0
MAP_TRIES = 10_000  # maps drawn before a row's size, p and env_max_steps are called impossible (Trinity draws forever)
INVALID_NOTE = ("\nYour last response is invalid. Your position didn't change at all. You may need to recheck your "
                "thinking process, action outputted, and the format of response. Remember, you should only output the "
                "NEXT ACTION at each interation in the ``` ```. For example, if you want to move up, you should output "
                "```Up```.")


def require_gymnasium():
    try:
        import gymnasium
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv
    except ImportError:
        raise RftError("workflow.type=frozen_lake_workflow steps gymnasium's FrozenLake: pip install "
                       "'rft[envs]' (the gymnasium package)") from None
    return gymnasium, FrozenLakeEnv


def _has_path(board: list[list[str]], size: int, max_steps: int) -> bool:
    """A path from S to G avoiding holes in at most `max_steps` moves (Trinity's depth-first search, which may
    visit a tile first by a longer path and then not again: the same answers as Trinity's)."""
    r0, c0 = map(int, np.argwhere(np.array(board) == "S")[0])
    frontier, seen = [(r0, c0, 0)], set()
    while frontier:
        r, c, steps = frontier.pop()
        if steps > max_steps or (r, c) in seen:
            continue
        seen.add((r, c))
        for dr, dc in ((1, 0), (0, 1), (-1, 0), (0, -1)):
            nr, nc = r + dr, c + dc
            if not (0 <= nr < size and 0 <= nc < size):
                continue
            if board[nr][nc] == "G":
                return True
            if board[nr][nc] != "H":
                frontier.append((nr, nc, steps + 1))
    return False


def generate_map(size: int = 8, p: float = 0.8, seed: int = 0, max_steps: int = 5) -> list[str]:
    """A random `size` x `size` map with a path from start to goal in at most `max_steps` moves: tiles frozen with
    probability `p`, start and goal at different random tiles, drawn again until the path exists, from gymnasium's
    seeded generator (Trinity-RFT's generate_random_map: the same maps for the same arguments)."""
    from gymnasium.utils import seeding

    if size < 2:
        raise RftError(f"a FrozenLake map of size {size} has no room for a start and a goal: give the row a size of "
                       "at least 2")
    rng, _ = seeding.np_random(seed)
    p = min(1, p)
    for _ in range(MAP_TRIES):
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p]).tolist()
        while True:
            start = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            goal = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            if start != goal:
                break
        board[start[0]][start[1]], board[goal[0]][goal[1]] = "S", "G"
        if _has_path(board, size, max_steps):
            return ["".join(row) for row in board]
    raise RftError(f"no FrozenLake map of size {size} with frozen tiles at p={p} has a path of at most {max_steps} "
                   f"moves in {MAP_TRIES} draws (seed {seed}): raise p or env_max_steps")


def parse_action(response: str) -> int:
    """The action in the reply's last ``` ``` (a direction's name, any case, or its number); INVALID otherwise."""
    matches = re.findall(r"```(.*?)```", response, re.DOTALL)
    if not matches:
        return INVALID
    text = matches[-1].strip().lower()
    if text in DIRECTIONS:
        return DIRECTIONS[text]
    if text.isdigit() and int(text) in DIRECTIONS.values():
        return int(text)
    return INVALID


class Lake:
    """One episode's env: gymnasium's FrozenLakeEnv on the map, reset with the row's seed."""

    def __init__(self, desc: list[str], is_slippery: bool, seed: int):
        _, FrozenLakeEnv = require_gymnasium()
        self.env = FrozenLakeEnv(desc=desc, is_slippery=is_slippery)
        self.env.reset(seed=seed)

    def position(self) -> tuple[int, int]:
        return int(self.env.s) // self.env.ncol, int(self.env.s) % self.env.ncol

    def on_goal(self) -> bool:
        return self.env.desc[self.position()] == b"G"

    def step(self, action: int) -> tuple[float, bool]:
        """(the reward, whether the episode is over) of Trinity's action (gymnasium's is one less)."""
        if self.on_goal():
            return 1.0, True
        if action == INVALID or action not in DIRECTIONS.values():
            return 0.0, False
        _, reward, terminated, _, _ = self.env.step(action - 1)
        return float(reward), bool(terminated)

    def render(self) -> str:
        """The board as Trinity's text observation: the start drawn frozen, the player where it stands (X in a hole,
        √ on the goal)."""
        desc = self.env.desc
        at = self.position()
        rows = []
        for r in range(desc.shape[0]):
            cells = []
            for c in range(desc.shape[1]):
                tile = b"F" if desc[r, c] == b"S" else desc[r, c]
                cell = CELLS[tile]
                if (r, c) == at:
                    cell = {b"H": 4, b"G": 5}.get(tile, 0)
                cells.append(GRID[cell])
            rows.append("".join(cells))
        return "\n".join(rows)


def observation_message(step: int, observation: str, unchanged: bool, remaining: int) -> str:
    """Trinity-RFT's user turn: the observation, the note after a turn that moved nothing, the turns left."""
    text = (f"Current Observation ({step}): \n{observation}\nYou have not achieved the goal, P has not reached G yet. "
            "Please give the next action.")
    if unchanged:
        text += INVALID_NOTE
    if remaining > 0:
        text += f"\nThe maximum number of steps remaining is {remaining}."
    return text
