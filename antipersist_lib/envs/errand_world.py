"""ErrandWorld: a four-room text world for testing the kit's plumbing. NOT a benchmark.

Task: bring an object to a room. Each object always lies in the same room, so experience from
earlier tasks tells the agent where to look; an agent without memory must search. With a
small step budget, searching can fail while remembering succeeds, which lets tests and the
pipeline demo show memory mattering with a deterministic scripted policy.
"""

from __future__ import annotations

from antipersist_lib.envs.base import Environment, StepResult
from antipersist_lib.errors import InfrastructureError
from antipersist_lib.records import Partition, Task

ROOMS = ("attic", "garden", "hall", "kitchen")
HOME = {"apple": "garden", "book": "attic", "cup": "kitchen", "lamp": "attic", "spoon": "kitchen", "ball": "garden"}


def make_tasks(split: str = "train", n: int = 12, benchmark: str = "errandworld") -> list[Task]:
    """Deterministic task list: object i % 6 to room (i // 6 + offset) % 4, two task types."""
    objects = sorted(HOME)
    tasks = []
    for i in range(n):
        obj = objects[i % len(objects)]
        target = ROOMS[(i + (0 if split == "train" else 1)) % len(ROOMS)]
        if target == HOME[obj]:
            target = ROOMS[(ROOMS.index(target) + 1) % len(ROOMS)]
        ttype = "bring_fruit" if obj in ("apple", "ball") else "bring_item"
        tasks.append(
            Task(
                task_id=i,
                benchmark=benchmark,
                task_type=ttype,
                instruction=f"Your task is to: bring the {obj} to the {target}.",
                split=split,
                env_args={"object": obj, "target": target, "start": "hall"},
            )
        )
    return tasks


def partition(n_train: int = 12, n_heldout: int = 6) -> Partition:
    """The test world's fixed partition (generated, not stored)."""
    return Partition(
        "errandworld",
        0,
        {"generated": True},
        tuple(make_tasks("train", n_train)),
        tuple(make_tasks("heldout", n_heldout)),
        notes="ErrandWorld: the kit's test world, not a benchmark",
    )


class ErrandWorld(Environment):
    benchmark = "errandworld"
    action_help = f"Commands: look, go to <room>, take <object>, drop <object>, inventory. Rooms: {', '.join(ROOMS)}."

    def __init__(self, *, crash_at_step: int | None = None) -> None:
        self._crash_at = crash_at_step
        self.closed = False

    def _reset(self, task: Task) -> str:
        if self.closed:
            raise InfrastructureError("ErrandWorld engine was closed")
        self._task = task
        a = task.env_args
        self.obj, self.target, self.room = a["object"], a["target"], a["start"]
        self.where = HOME[self.obj]
        self.holding = False
        self.delivered = False
        self.t = 0
        return f"{task.instruction}\nYou are in the {self.room}. {self._look()}"

    def _look(self) -> str:
        seen = [
            o for o, r in HOME.items() if r == self.room and not (o == self.obj and (self.holding or self.delivered))
        ]
        if self.delivered and self.room == self.target:
            seen.append(self.obj)
        return f"In the {self.room} you see: {', '.join(sorted(seen)) if seen else 'nothing'}."

    def _step(self, action: str) -> StepResult:
        if self._task is None:
            raise InfrastructureError("step before reset")
        self.t += 1
        if self._crash_at is not None and self.t >= self._crash_at:
            raise InfrastructureError("ErrandWorld engine crashed (injected)")
        a = " ".join(action.lower().split())
        if a == "look":
            return StepResult(self._look())
        if a == "inventory":
            return StepResult(f"You carry: {self.obj if self.holding else 'nothing'}.")
        if a.startswith("go to "):
            room = a[6:].removeprefix("the ")
            if room not in ROOMS:
                return StepResult("Nothing happens.", valid=False)
            self.room = room
            return StepResult(f"You go to the {room}. {self._look()}")
        if a.startswith("take "):
            obj = a[5:].removeprefix("the ")
            if obj == self.obj and self.room == self.where and not self.holding and not self.delivered:
                self.holding = True
                return StepResult(f"You take the {obj}.")
            if HOME.get(obj) == self.room and obj != self.obj:
                return StepResult(f"You take the {obj}. It is not what the task asks for, so you put it back.")
            return StepResult("Nothing happens.", valid=False)
        if a.startswith("drop "):
            obj = a[5:].removeprefix("the ")
            if obj == self.obj and self.holding:
                self.holding = False
                if self.room == self.target:
                    self.delivered = True
                    return StepResult(f"You drop the {obj}. Task complete.", reward=1.0, done=True)
                self.where = self.room
                return StepResult(f"You drop the {obj} in the {self.room}.")
            return StepResult("Nothing happens.", valid=False)
        return StepResult("Nothing happens.", valid=False)

    @property
    def success(self) -> bool:
        return self.delivered

    def close(self) -> None:
        self.closed = True
