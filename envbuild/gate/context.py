"""What every rule family reads: the lock, its environments and what each installs, the policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envbuild.gate.findings import Finding, Policy
from envbuild.gate.markers import InvalidMarker
from envbuild.gate.metadata import MetadataSources
from envbuild.gate.model import Entry, Environment, Members, ParsedLock

if TYPE_CHECKING:
    from packaging.requirements import Requirement

__all__ = ["Context", "View"]


@dataclass
class View:
    """One environment of the lock: what it installs, and its torch (None: none, or several)."""

    env: Environment
    members: Members
    torch: Entry | None
    by_name: dict[str, list[Entry]]
    # the same platform and Python with no extra requested (declared requirements)
    bare: Environment
    selections: int = 1  # how many selections of extras/groups this view stands for
    environments: int = 1  # how many platform x Python x selection environments
    # the environments it stands for, as bits of the check's space (``--base`` maps onto them)
    mask: int = 0

    def installs(self, entry: Entry) -> bool:
        """Whether a file the lock records of ``entry`` installs here (its wheel tags against this
        platform and Python, as the locker picks; an sdist always may; True where no file is named:
        a git pin, a folder, a requirements pin)."""
        from envbuild.index.wheeltags import installs_on

        files = [f for f, _ in entry.files] or ([entry.url] if entry.url else [])
        return not files or any(installs_on(f, self.env.python, self.env.platform) for f in files)

    def torch_for(self, entry: Entry, lock: ParsedLock, torch_name: str) -> Entry | None:
        """The torch ``entry`` is installed with: the lock's own edge where it records one."""
        return self.members.target_of(entry, torch_name, lock.entries) or self.torch


@dataclass
class Context:
    file: str
    lock: ParsedLock
    policy: Policy
    views: list[View]
    offline: bool = False
    index_urls: tuple[str, ...] = ()
    findings: dict[tuple[str, str, str], Finding] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    # what could not be verified, and why -> where
    explain: dict[str, list[str]] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    # where metadata came from; hosts that did not answer
    sources: MetadataSources = field(default_factory=MetadataSources)
    _reqs: dict[str, Requirement | None] = field(default_factory=dict)
    _no_file: dict[str, list[str]] = field(default_factory=dict)  # entry label -> environments
    _installs: dict[tuple[int, str, str], bool] = field(default_factory=dict)
    # a pin's files, as its index lists them (``check._installable``)
    index_files: dict[int, list[str] | None] = field(default_factory=dict)

    def add(
        self,
        package: str,
        rule: str,
        reason: str,
        env: Environment | None = None,
        entry: Entry | None = None,
    ) -> None:
        key = (rule, package, reason)
        f = self.findings.get(key)
        if f is None:
            f = self.findings[key] = Finding(
                self.file, package, rule, reason, line=entry.line if entry is not None else None
            )
        if env is not None and env.name not in f.environments:
            f.environments.append(env.name)

    def no_file(self, entry: Entry, view: View) -> bool:
        """True (and the environment named in a note) when no file of ``entry`` installs in
        ``view``: nothing of it is judged there, since nothing of it installs."""
        key = (entry.key, view.env.platform, view.env.python)
        if key not in self._installs:
            self._installs[key] = view.installs(entry)
        if self._installs[key]:
            return False
        where = self._no_file.setdefault(entry.label(), [])
        if view.env.name not in where:
            where.append(view.env.name)
        return True

    def no_file_notes(self) -> list[str]:
        return [
            f"{label}: no file of it installs on {'; '.join(where)} "
            "(no file for this platform: judged only where one does)"
            for label, where in self._no_file.items()
        ]

    def note(self, text: str) -> None:
        if text not in self.notices:
            self.notices.append(text)

    def explained(self, text: str, env: Environment | None = None) -> None:
        where = self.explain.setdefault(text, [])
        if env is not None and env.name not in where:
            where.append(env.name)

    def explanations(self) -> list[str]:
        out = []
        for text, where in self.explain.items():
            if not where:
                out.append(text)
            elif len(where) <= 2:
                out.append(f"{text} [in {'; '.join(where)}]")
            else:
                out.append(f"{text} [in {where[0]} and {len(where) - 1} more environments]")
        return out

    def requirement(self, raw: str) -> Requirement | None:
        if raw not in self._reqs:
            from packaging.requirements import InvalidRequirement, Requirement

            try:
                self._reqs[raw] = Requirement(raw)
            except InvalidRequirement:
                self._reqs[raw] = None
        return self._reqs[raw]

    def applies(self, req: Requirement, view: View) -> bool:
        """A declared requirement's marker in the view's environment, no extra requested
        (a marker that does not parse counts as holding)."""
        if req.marker is None:
            return True
        try:
            return view.bare.holds(str(req.marker), self.lock.markers)
        except InvalidMarker:
            return True
