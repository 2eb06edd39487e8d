"""`rft studio`: a small web app on this machine (Python's own HTTP server, one page of plain JavaScript; no extra
package). Two pages:

* `/config`: a config generator whose forms are generated from rft's config schema (`forms.py`: every field's help
  text, choices and default; a beginner view of the keys a first run sets and an expert view of all of them),
  validated live by the validation `rft train` / `rft sft` runs, writing the YAML and able to start the run.
* `/run`: a live view of a run folder (`runs.py`): reward / accuracy / length / KL curves, phase timings, the latest
  validation generations, checkpoints, and the error of a failed run.
"""
