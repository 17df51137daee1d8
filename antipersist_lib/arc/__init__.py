"""ARC-AGI Stream: the kit's generator of ARC-style tasks over the paper's family x skill grid (App. A).

Modules (import them directly; nothing is re-exported here):

- ``grids``: the grid type, validation with errors that say what is wrong, and object helpers.
- ``tools``: the seven per-skill tool helpers plus ``find_objects``, importable and as ``TOOL_SOURCE``
  (the same code, prepended to solver code inside the sandbox that cannot import the kit).
- ``families``: the six selection families of Table 5, each a seeded scene generator and a rule.
- ``generator``: ``make_task`` (10 train + test examples and ground-truth ``solve`` source) and
  the paper's task pools (19 / 200 / 250 training tasks, 50 held-out).
- ``sandbox``: the subprocess grader that runs model-written ``solve`` code against a task.
"""
