"""git requirements in a lock: a ref (HEAD, a branch, a tag) resolves to a commit, once.

``resolve_git`` asks ``git ls-remote`` (fails fast, no credentials prompted). ``pin_git`` is what a
lock run calls: a requirement whose repository and ref are the ones the lock recorded keeps its
locked commit (a branch that moved on is not a reason for the lock to move), unless an upgrade
of that package was asked for.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError, PreflightError
from envbuild.index.net import redact
from envbuild.run import run
from envbuild.stacklock.model import VcsPin

_SHA40 = re.compile(r"^[0-9a-f]{40}$")

__all__ = ["GitRef", "git_ref", "pin_git", "resolve_git"]


class GitRef:
    """``git+REPO@REF#FRAG`` taken apart."""

    def __init__(self, url: str) -> None:
        rest = url[4:] if url.startswith("git+") else url
        self.frag = ""
        if "#" in rest:
            rest, frag = rest.split("#", 1)
            self.frag = "#" + frag
        self.repo, self.ref = rest, "HEAD"
        if "@" in rest.rsplit("/", 1)[-1]:
            self.repo, self.ref = rest.rsplit("@", 1)

    @property
    def is_commit(self) -> bool:
        return bool(_SHA40.match(self.ref))


def git_ref(requirement: str) -> GitRef | None:
    """The repository and ref of a ``name @ git+...`` requirement; None for anything else."""
    req = Requirement(requirement)
    return GitRef(req.url) if req.url and req.url.startswith("git+") else None


def _with_commit(req: Requirement, ref: GitRef, sha: str) -> str:
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    marker = f" ; {req.marker}" if req.marker else ""
    return f"{req.name}{extras} @ git+{ref.repo}@{sha}{ref.frag}{marker}"


def resolve_git(requirement: str, timeout: float = 20.0) -> str:
    """``name @ git+URL@REF`` -> ``name @ git+URL@<commit>`` (``git ls-remote``; fails fast)."""
    req = Requirement(requirement)
    ref = git_ref(requirement)
    if ref is None or ref.is_commit:
        return requirement
    repo = ref.repo
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o ConnectTimeout=10",
    }
    try:
        out = run(
            ["git", "ls-remote", repo, ref.ref],
            capture=True,
            separate_stderr=True,
            timeout=timeout,
            env=env,
        )
    except FileNotFoundError as exc:
        raise PreflightError(
            "git is needed to resolve git requirements to a commit, and it is not installed"
        ) from exc
    if out.timed_out:
        raise PreflightError(
            f"{req.name}: git ls-remote {redact(repo)} gave no answer within {timeout:g} s",
            hint="Check the network, or pin the requirement to a commit SHA.",
        )
    if out.returncode != 0:
        err = (out.stderr or "").strip()
        why = redact(err.splitlines()[-1] if err else f"exit {out.returncode}")
        raise PreflightError(
            f"{req.name}: cannot read the git repository {redact(repo)}: {why}",
            hint="Check the URL and the network, or pin the requirement to a commit SHA.",
        )
    rows = [line.split("\t") for line in (out.output or "").splitlines() if "\t" in line]
    wanted = {ref.ref, f"refs/heads/{ref.ref}", f"refs/tags/{ref.ref}", f"refs/tags/{ref.ref}^{{}}"}
    shas = [sha for sha, name in rows if name in wanted]
    peeled = [sha for sha, name in rows if name.endswith("^{}")]
    if not shas:
        raise ConfigError(
            f"{req.name}: the git ref {ref.ref!r} does not exist in {redact(repo)}",
            hint="Use a branch, a tag, HEAD or a commit SHA that the repository has.",
        )
    return _with_commit(req, ref, peeled[0] if peeled else shas[0])


def pin_git(requirement: str, locked: Mapping[str, VcsPin], *, move: bool) -> str:
    """``requirement`` with its git ref pinned to a commit: the locked one when ``locked`` (by
    canonical name) has a pin of the same repository and ref and ``move`` is false, else the ref's
    commit now (``resolve_git``). Other requirements come back as they are."""
    ref = git_ref(requirement)
    if ref is None or ref.is_commit:
        return requirement
    req = Requirement(requirement)
    old = locked.get(canonicalize_name(req.name))
    if (
        not move
        and old is not None
        and old.commit
        and old.ref == ref.ref
        and GitRef(old.url).repo == ref.repo
    ):
        return _with_commit(req, ref, old.commit)
    return resolve_git(requirement)
