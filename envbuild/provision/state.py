"""Provisioning state under the data root: each step's status, so a killed run resumes.

``<root>/.envbuild/manifest.json`` is rewritten atomically after every transition
(pending -> running -> ok | failed). A step left ``running`` by a crash or SIGKILL is
simply run again: pip and uv installs are idempotent, and the ABI guard re-checks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from envbuild._io import atomic_write_text, json_text
from envbuild.errors import ConfigError

SCHEMA = 1
Status = Literal["pending", "running", "ok", "failed"]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class StepState:
    name: str
    digest: str = ""
    status: Status = "pending"
    started: str | None = None
    ended: str | None = None
    seconds: float | None = None
    guard_seconds: float | None = None
    log: str | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    # what the step installed or changed: {name: {"version", "record_sha256"}} (``abi.Dist``
    # identity), so a later step that changes one of them without ``replaces`` is named by the guard
    installed: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class Manifest:
    path: Path
    stack: str = ""
    spec_digest: str = ""
    python: str = ""
    venv: str = ""
    backend: str = ""
    baseline: dict[str, Any] | None = None
    marker_env: dict[str, str] | None = None
    violation: str | None = None  # set when the last run stopped on an ABI violation
    steps: list[StepState] = field(default_factory=list)
    finished: str | None = None
    # provision --lock: the selection the root holds (``provision.exact.SyncJSON``)
    sync: dict[str, Any] | None = None
    # the file's text as last read or written: ``save`` skips a write that would change nothing
    _on_disk: str | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        if not path.exists():
            return cls(path=path)
        try:
            text = path.read_text()
            data = json.loads(text)
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(
                f"{path}: the provisioning manifest is unreadable ({exc}); "
                "move it away to start over (the venv will be re-verified)"
            ) from exc
        if data.get("schema") != SCHEMA:
            raise ConfigError(
                f"{path}: manifest schema {data.get('schema')!r} is not {SCHEMA}; move it away to"
                " start over"
            )
        steps = [StepState(**s) for s in data.pop("steps", [])]
        data.pop("schema", None)
        out = cls(path=path, steps=steps, **data)
        out._on_disk = text
        return out

    def save(self) -> None:
        data = asdict(self)
        data.pop("path")
        data.pop("_on_disk")
        text = json_text({"schema": SCHEMA, **data})
        if text == self._on_disk:
            return  # a no-op run changes nothing: no write, no fsync
        # step errors quote installer output
        atomic_write_text(self.path, text, private=True)
        self._on_disk = text

    def state(self, name: str) -> StepState:
        for s in self.steps:
            if s.name == name:
                return s
        s = StepState(name=name)
        self.steps.append(s)
        return s

    def pending(
        self, identities: Sequence[tuple[str, str, str]], only: str | None = None
    ) -> tuple[list[str], list[str]]:
        """The one answer to "which steps run": (the steps still to run, in order; those reset).

        ``identities``: (name, ``step_identity``, ``PlannedStep.digest``) of the plan's steps. A
        manifest written before a locked step's identity left its sources out records the step's
        full digest: where that is equal it names the same step, which is not run again for it.
        Then ``sync_steps``: a changed or moved step and every step after it go back to pending.
        ``only``: ``--step NAME``, that step alone (if it is not done)."""
        recorded = {s.name: s for s in self.steps}
        for name, identity, digest in identities:
            state = recorded.get(name)
            if state is not None and state.digest == digest:
                state.digest = identity
        reset = self.sync_steps([(name, identity) for name, identity, _ in identities])
        todo = [
            name
            for name, _, _ in identities
            if self.state(name).status != "ok" and (only is None or name == only)
        ]
        return todo, reset

    def sync_steps(self, planned: list[tuple[str, str]]) -> list[str]:
        """Align with the plan's (name, digest) list. A changed or moved step and every step after
        it go back to pending. Returns the names reset."""
        old = {s.name: s for s in self.steps}
        new: list[StepState] = []
        reset: list[str] = []
        dirty = False
        for i, (name, digest) in enumerate(planned):
            s = old.get(name)
            moved = i >= len(self.steps) or self.steps[i].name != name
            if s is None or s.digest != digest or moved or dirty:
                if s is not None and s.status == "ok":
                    reset.append(name)
                dirty = dirty or (s is not None and (s.digest != digest or moved))
                s = StepState(name=name, digest=digest)
            new.append(s)
        self.steps = new
        return reset
