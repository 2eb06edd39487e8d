"""The ScienceWorld environment of Trinity-RFT's `sciworld_workflow` (the workflow: `rft.explorer.workflow`):
AllenAI's text simulator of science experiments (the scienceworld package, whose simulator is a Java program: a
Java runtime must be on the PATH). A task row's prompt is a JSON object, {"task_name", "var_num", "jar_path"}; the
simulator loads that task's variation (simplifications "easy", a step limit of 100), and each episode the model reads
an observation and answers with `<think>...</think><action>...</action>`, for at most 30 turns or until the task ends;
the reward is the best running total of the simulator's scores, divided by 100. `jar_path`: the row's simulator
when that file exists here, else the one the package ships."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rft.errors import RftError

SYSTEM_PROMPT = """
You are an agent, you job is to do some scientific experiment in a virtual test-based environments.

## Notes:
At each step, you should first think then perform action to fulfill the instruction. You should ALWAYS wrap your thinking with the <think> </think> tag and wrap your action with the <action> </action> tag.
You should ALWAYS take one action each step.
DONOT try to interact with the user at anytime. Finish the task by yourself.

## Action Format:
Below are the available commands you can use:
    open OBJ: open a container
    close OBJ: close a container
    activate OBJ: activate a device
    deactivate OBJ: deactivate a device
    connect OBJ to OBJ: connect electrical components
    disconnect OBJ: disconnect electrical components
    use OBJ [on OBJ]: use a device/item
    look around: describe the current room
    examine OBJ: describe an object in detail
    look at OBJ: describe a container's contents
    read OBJ: read a note or book
    move OBJ to OBJ: move an object to a container
    pick up OBJ: move an object to the inventory
    pour OBJ into OBJ: pour a liquid into a container
    mix OBJ: chemically mix a container
    teleport to LOC: teleport to a specific room
    focus on OBJ: signal intent on a task object
    wait: task no action for 10 steps
    wait1: task no action for a step

For example your output should be like this:
<think> Now I will check the bedroom ... </think><action>teleport to bedroom</action>
"""
"""Trinity-RFT's ScienceWorld system prompt, word for word (its leading newline included)."""

MAX_ENV_STEPS = 30  # Trinity-RFT's (its workflow reads no argument for it)


def require_scienceworld():
    try:
        from scienceworld import ScienceWorldEnv
    except ImportError:
        raise RftError("workflow.type=sciworld_workflow runs AllenAI's ScienceWorld: pip install 'rft[envs]' (the "
                       "scienceworld package)") from None
    if shutil.which("java") is None:
        raise RftError("workflow.type=sciworld_workflow: ScienceWorld's simulator is a Java program and no java is "
                       "on the PATH: install a Java runtime (e.g. apt install default-jre-headless)")
    return ScienceWorldEnv


def parse_action(response: str) -> str:
    """The text between the first <action> and the next </action> (Trinity's split), "" where there is none."""
    if "<action>" not in response:
        return ""
    return response.split("<action>")[1].split("</action>")[0].strip()


def task_config(text: str) -> dict:
    """A task row's prompt: the JSON object naming the task (task_name, var_num; jar_path optional here)."""
    try:
        config = json.loads(text)
        config["task_name"], config["var_num"]
    except (ValueError, TypeError, KeyError):
        raise RftError(f"sciworld_workflow reads a task row's prompt as JSON {{\"task_name\", \"var_num\", "
                       f"\"jar_path\"}} (Trinity's get_sciworld_data.py), got {text[:120]!r}") from None
    return config


def open_env(config: dict):
    """The simulator loaded with the row's task and variation (simplifications easy, step limit 100)."""
    ScienceWorldEnv = require_scienceworld()
    jar = config.get("jar_path")
    env = ScienceWorldEnv("", jar if jar and Path(jar).is_file() else None, envStepLimit=100)
    env.load(config["task_name"], int(config["var_num"]), "easy", generateGoldPath=True)
    return env


def close_env(env) -> None:
    """Stop the simulator and wait for its Java process (its own close leaves it running, and its __del__ then
    writes to a closed pipe)."""
    env.close()
    process = env._gateway.java_process
    try:
        process.wait(timeout=10)
    except Exception:
        process.kill()
        process.wait()
