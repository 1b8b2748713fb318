"""What every rule family reads: the lock, its environments and what each installs, the policy.

A view stands for one or more Pythons (``View.pythons``), judged alike because the lock gives
them the same judged entries from files that install in each (``gate.groups``). What a rule asks
beyond that (a declared requirement's marker, whether a file installs) is asked in each of them
(``Context.ask``): where the answers differ, the view is named in ``Context.splits`` and the check
judges its parts apart (``gate.check``), so no row stands for a Python it was not true for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envbuild.gate.findings import Finding, Policy
from envbuild.gate.markers import InvalidMarker
from envbuild.gate.metadata import MetadataSources
from envbuild.gate.model import Entry, Environment, Members, ParsedLock, where_words

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

    @property
    def pythons(self) -> tuple[str, ...]:
        """Every Python this view stands for."""
        return self.env.pythons or (self.env.python,)

    def bare_at(self, python: str) -> Environment:
        """``bare`` at another of its Pythons."""
        if python == self.bare.python:
            return self.bare
        cache: dict[str, Environment] = self.__dict__.setdefault("_bare_at", {})
        got = cache.get(python)
        if got is None:
            values = {
                **self.bare.values,
                "python_version": python,
                "python_full_version": python + ".0",
                "implementation_version": python + ".0",
            }
            got = cache[python] = Environment(self.bare.platform, python, values)
        return got

    def installs(self, entry: Entry, python: str | None = None) -> bool:
        """Whether a file the lock records of ``entry`` installs here (its wheel tags against this
        platform and ``python``, the view's first by default, as the locker picks; an sdist always
        may; True where no file is named: a git pin, a folder, a requirements pin)."""
        from envbuild.index.wheeltags import installs_on

        files = [f for f, _ in entry.files] or ([entry.url] if entry.url else [])
        py = python or self.env.python
        return not files or any(installs_on(f, py, self.env.platform) for f in files)

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
    _no_file: dict[str, list[Environment]] = field(default_factory=dict)  # label -> environments
    _some_file: dict[str, set[str]] = field(default_factory=dict)  # label -> environment names
    _installs: dict[tuple[int, str, str], bool] = field(default_factory=dict)
    # a pin's files, as its index lists them (``check._installable``)
    index_files: dict[int, list[str] | None] = field(default_factory=dict)
    # view (by its mask) -> the Pythons that answered a question True, where its Pythons differed
    splits: dict[int, list[set[str]]] = field(default_factory=dict)

    def ask(self, view: View, answers: dict[str, bool]) -> bool:
        """The answer of the view's first Python to a question asked in each of its Pythons; where
        they differ, the view is to be judged apart by them (``splits``)."""
        first = answers[view.pythons[0]]
        if any(a != first for a in answers.values()):
            sides = self.splits.setdefault(view.mask, [])
            side = {py for py, a in answers.items() if a}
            if side not in sides:
                sides.append(side)
        return first

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
        answers = {}
        for py in view.pythons:
            key = (entry.key, view.env.platform, py)
            if key not in self._installs:
                self._installs[key] = view.installs(entry, py)
            answers[py] = self._installs[key]
        label = entry.label()
        if self.ask(view, answers):
            self._some_file.setdefault(label, set()).add(view.env.name)
            return False
        where = self._no_file.setdefault(label, [])
        if view.env not in where:
            where.append(view.env)
        return True

    def no_file_notes(self) -> list[str]:
        """Per release, the environments where no file of it installs (where another entry of the
        same name and version has one there, a Poetry 1 lock's per-Python entries, it does)."""
        out = []
        for label, where in self._no_file.items():
            some = self._some_file.get(label, set())
            none = [env for env in where if env.name not in some]
            if none:
                out.append(
                    f"{label}: no file of it installs on {where_words(none)} (judged only where"
                    " one does)"
                )
        return out

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
        text = str(req.marker)
        try:
            if len(view.pythons) == 1 or "python" not in text:
                return view.bare.holds(text, self.lock.markers)
            return self.ask(
                view, {py: view.bare_at(py).holds(text, self.lock.markers) for py in view.pythons}
            )
        except InvalidMarker:
            return True
