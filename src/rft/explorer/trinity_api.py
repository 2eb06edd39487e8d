"""Trinity-RFT's workflow API under its own module names, for workflow files written against Trinity-RFT.

A Trinity-RFT plugin file imports `trinity.common.workflows` (`WORKFLOWS`, `Workflow`, `Task`),
`trinity.common.experience` (`Experience`), `trinity.common.models.model` (`ModelWrapper`) and
`trinity.utils.log` (`get_logger`), and registers its class with `@WORKFLOWS.register_module("name")`. Where the
`trinity` package is not installed, `install()` (called before a workflow file is imported: `workflow.path`,
`TRINITY_PLUGIN_DIRS`) puts modules of those names in `sys.modules` that hold rft's own classes, so such a file
runs unchanged:

* `Workflow` is rft's, with Trinity's class attributes and their defaults (`can_repeat = False`: the runner runs
  the workflow `repeat_times` times, a fresh instance each, and the task's experiences are all of them, as
  Trinity-RFT's runner does; one with `can_repeat = True` is told `set_repeat_times(repeat_times, 0)` before its
  run; `can_reset`, `is_async`), `self.auxiliary_model_wrappers` (the handles) and
  `self.auxiliary_models` (their OpenAI clients, async ones for an `is_async` workflow), `self.logger`, and the
  task's `rollout_args` (Trinity's GenerationConfig: `temperature`, `top_p`, `top_k`, `max_tokens`, `n`,
  `logprobs`) from the run's sampling.
* `Experience` is rft's (`rft.experience`), which takes Trinity's constructor (`tokens`, `prompt_length`, `reward`,
  `logprobs`); `ModelWrapper` is rft's model handle; `Task` rft's.

Where the real package is installed it is left alone (its classes are Trinity-RFT's, which rft does not run).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from types import ModuleType, SimpleNamespace

from rft.experience import Experience
from rft.explorer.model import ModelHandle
from rft.explorer.workflow import Task, register_workflow
from rft.explorer.workflow import Workflow as RftWorkflow


class Workflow(RftWorkflow):
    """rft's workflow base with Trinity-RFT's attributes and defaults (see the module's docstring)."""

    can_reset: bool = False
    can_repeat: bool = False
    is_async: bool = False

    def __init__(self, *, task: Task, model: ModelHandle, auxiliary_models: list[ModelHandle] | None = None):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.auxiliary_model_wrappers = auxiliary_models
        self.auxiliary_models = ([m.get_openai_async_client() if type(self).is_async else m.get_openai_client()
                                  for m in auxiliary_models] if auxiliary_models else None)
        self.logger = logging.getLogger(type(self).__module__)
        self.run_id_base = 0
        s = model.sampling
        task.rollout_args = SimpleNamespace(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                            max_tokens=s.max_tokens, n=task.repeat_times, logprobs=0)

    def set_repeat_times(self, repeat_times: int, run_id_base: int) -> None:
        """Called before `run` on a workflow that repeats itself (`can_repeat = True`), as Trinity-RFT's runner
        calls it: a repeatable workflow implements it."""
        raise NotImplementedError("set_repeat_times() must be implemented for a repeatable workflow.")

    @property
    def resettable(self) -> bool:
        return type(self).can_reset

    @property
    def repeatable(self) -> bool:
        return type(self).can_repeat

    @property
    def asynchronous(self) -> bool:
        return type(self).is_async


class _Registry:
    """`WORKFLOWS` as Trinity-RFT's registry is used in plugin files: `register_module(name)`, a decorator."""

    def register_module(self, module_name: str, module_cls: type | None = None, force: bool = False,
                        lazy: bool = False):
        if module_cls is not None:
            return register_workflow(module_name)(module_cls)
        return register_workflow(module_name)


WORKFLOWS = _Registry()
MODULES = {
    "trinity": {},
    "trinity.common": {},
    "trinity.common.workflows": {"WORKFLOWS": WORKFLOWS, "Workflow": Workflow, "Task": Task},
    "trinity.common.workflows.workflow": {"WORKFLOWS": WORKFLOWS, "Workflow": Workflow, "Task": Task},
    "trinity.common.experience": {"Experience": Experience},
    "trinity.common.models": {},
    "trinity.common.models.model": {"ModelWrapper": ModelHandle},
    "trinity.utils": {},
    "trinity.utils.log": {"get_logger": lambda name=None, *args, **kwargs: logging.getLogger(name)},
}


def install() -> bool:
    """Put the `trinity` modules above in `sys.modules` unless the real package is importable; whether they are
    rft's."""
    if "trinity" in sys.modules:
        return getattr(sys.modules["trinity"], "__rft__", False)
    if importlib.util.find_spec("trinity") is not None:
        return False
    for name, attributes in MODULES.items():
        module = ModuleType(name, "rft's stand-in for Trinity-RFT's module of this name (rft.explorer.trinity_api)")
        module.__dict__.update(attributes, __rft__=True, __path__=[])
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    return True


def run_workflow(cls: type, task: Task, model: ModelHandle, auxiliary: list[ModelHandle]) -> list[Experience]:
    """A task's experiences from workflow class `cls`: one run, or, for a workflow that does not repeat itself
    (Trinity-RFT's `can_repeat = False`), `task.repeat_times` runs of a fresh instance each, their experiences
    together (a run that returns no list is returned as it is, for the runner to refuse)."""
    if getattr(cls, "can_repeat", True):
        workflow = cls(task=task, model=model, auxiliary_models=auxiliary)
        if isinstance(workflow, Workflow):  # written for Trinity-RFT: told its repeats first, as its runner does
            workflow.set_repeat_times(task.repeat_times, 0)
        return workflow.run()
    out: list = []
    for _ in range(task.repeat_times):
        result = cls(task=task, model=model, auxiliary_models=auxiliary).run()
        if not isinstance(result, list):
            return result
        out += result
    return out
