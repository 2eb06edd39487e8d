"""Trinity-RFT's data processor: operators over the tasks before exploring (`tasks.py`, the task pipeline) and over
each explore step's experiences before they reach the buffer (`experience.py`, the experience pipeline). The
operators are rft's own code under Trinity-RFT's and Data-Juicer's names and arguments, and Data-Juicer's own filters
through a worker in an environment of its own (`data_juicer.py`; docs/workflows.md says why)."""

from rft.data_processor import data_juicer  # noqa: F401 - registers the data_juicer operator
from rft.data_processor.experience import EXPERIENCE_OPERATORS, ExperiencePipeline
from rft.data_processor.tasks import TASK_OPERATORS, run_task_pipeline

__all__ = ["EXPERIENCE_OPERATORS", "ExperiencePipeline", "TASK_OPERATORS", "run_task_pipeline"]
