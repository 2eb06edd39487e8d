"""Orchestration: how the learners of `rft.trainer` are driven. Where the processes of a run come from (`launch`, Ray's
`cluster`), a process's role (`roles`), the one step loop of every RL mode (`step_loop`) and its roles (`run`: mode
both in one process; `modes`: explore, train, both as two processes, bench), staged configs (`stages`) and the demo
(`demo`). `rft.trainer` holds the learners (RL, SFT, DPO, reward models), their checkpoints and the checks; nothing
there imports this package (tests/test_layers.py)."""
