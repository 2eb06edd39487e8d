"""Workflow files: a user's own (`workflow.path`, a file or a folder of them) and Trinity-RFT's plugin files
(`TRINITY_PLUGIN_DIRS`), imported before a workflow is looked up by name; a file written against Trinity-RFT's
module names finds rft's stand-ins for them (`rft.explorer.trinity_api`)."""

from __future__ import annotations

from rft.explorer import trinity_api
from rft.explorer.workflow import WORKFLOWS, WorkflowError


def load_workflow_file(path: str) -> None:
    """Import a Python file defining workflows (they register themselves with `register_workflow`), or every
    Python file of a folder (as Trinity-RFT's plugin folders), in name order."""
    from pathlib import Path

    from rft.userfile import load_user_module

    trinity_api.install()
    folder = Path(path).expanduser()
    for file in sorted(folder.glob("*.py")) if folder.is_dir() else [path]:
        load_user_module(file, "workflow.path", "rft_workflow")


def workflow_class(name: str, path: str | None = None) -> type:
    """The workflow registered as `name` (after importing `path` when given)."""
    if path:
        load_workflow_file(path)
    try:
        return WORKFLOWS.get(name)
    except KeyError:
        raise WorkflowError(f"workflow.type={name!r} is not a registered workflow; known: {WORKFLOWS.names()}"
                            + ("" if path else " (a workflow of your own: set workflow.path to the file that "
                                                "registers it with rft.explorer.workflow.register_workflow)")) from None
