"""What an installer is doing, read from its output: the phase of a step's live line, and when
its resolution is over (provision's prefetch waits for that: ``InstallProgress.resolved``).

pip and uv print different lines; one small state machine reads both (the lines never clash):

- pip: ``Collecting X`` (resolving), ``Downloading X.whl (180.2 MB)``, ``Progress N of M`` (bytes,
  with ``PIP_PROGRESS_BAR=raw``, which envbuild sets while a live display is on and the venv's pip
  knows it), ``Building wheel``, ``Installing collected packages``, ``Successfully installed``;
- uv: ``Resolved N packages``, ``Downloading X (16.0MiB)``, `` Downloaded X``, ``Building X``,
  ``Prepared N packages``, ``Installed N packages``, ``Audited N packages``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

_UNITS = {
    "B": 1,
    "kB": 1e3,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
}

_PIP_COLLECT = re.compile(r"^Collecting (\S+)")
_PIP_DOWNLOAD = re.compile(r"^\s*Downloading (\S+) \(([\d.]+) ?([kKMG]i?B|B)\)")
_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)$")
_PIP_INSTALL = re.compile(r"^Installing collected packages: (.*)")
_PIP_DONE = re.compile(r"^Successfully installed")
_PIP_BUILD = re.compile(r"^\s*Building wheels? for (\S+)")
_UV_RESOLVED = re.compile(r"^Resolved (\d+) packages?")
_UV_DOWNLOADED = re.compile(r"^\s*Downloaded (\S+)$")
_UV_BUILD = re.compile(r"^\s*Building (\S+)")
_UV_PREPARED = re.compile(r"^Prepared (\d+) packages?")
_UV_DONE = re.compile(r"^(Installed|Audited) (\d+) packages?")


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover - the loop returns


@dataclass
class InstallProgress:
    """The phase of one install step, fed line by line; ``describe()`` is its live line."""

    phase: str = "starting"
    subject: str = ""
    started: int = 0  # downloads begun
    finished: int = 0  # downloads ended
    sizes: dict[str, float] = field(default_factory=dict)  # file -> bytes, as announced
    done_bytes: float = 0.0  # of finished downloads
    current: str | None = None  # pip: the file downloading now
    current_bytes: float = 0.0
    download_t0: float | None = None
    installed: int | None = None
    clock: float = 0.0  # for tests: a fixed "now"; 0 means time.monotonic()

    def _now(self) -> float:
        return self.clock or time.monotonic()

    def _end_current(self) -> None:
        if self.current is not None:
            self.finished += 1
            self.done_bytes += self.sizes.get(self.current, self.current_bytes)
            self.current, self.current_bytes = None, 0.0

    def feed(self, line: str) -> bool:
        """Read one line; True when the phase or the numbers changed."""
        if m := _PIP_PROGRESS.match(line):
            self.current_bytes = float(m.group(1))
            return True
        if m := _PIP_DOWNLOAD.match(line):
            self._end_current()
            name = m.group(1).rsplit("/", 1)[-1]
            self.sizes[name] = float(m.group(2)) * _UNITS.get(m.group(3), 1)
            self.started += 1
            self.phase, self.subject = "downloading", name
            self.download_t0 = self.download_t0 or self._now()
            if "-" in name and (name.endswith(".whl") or name.endswith((".tar.gz", ".zip"))):
                self.current = name  # pip: one at a time; the next line ends it
            return True
        if m := _UV_DOWNLOADED.match(line):
            name = m.group(1)
            self.finished += 1
            self.done_bytes += self.sizes.get(name, 0.0)
            return True
        if m := _PIP_COLLECT.match(line):
            self._end_current()
            self.phase, self.subject = "resolving", m.group(1)
            return True
        # uv then downloads, unpacks or builds what is not in its cache
        if m := _UV_RESOLVED.match(line):
            self.phase, self.subject = "preparing", f"{m.group(1)} packages"
            return True
        if m := (_PIP_BUILD.match(line) or _UV_BUILD.match(line)):
            self._end_current()
            self.phase, self.subject = "building", m.group(1)
            return True
        if m := _PIP_INSTALL.match(line):
            self._end_current()
            self.phase, self.subject = "installing", m.group(1)
            return True
        if m := _UV_PREPARED.match(line):
            self.phase, self.subject = "installing", f"{m.group(1)} packages"
            return True
        if _PIP_DONE.match(line) or _UV_DONE.match(line):
            self._end_current()
            self.phase, self.subject = "installed", ""
            return True
        return False

    @property
    def resolved(self) -> bool:
        """Whether the installer is past resolving: uv's ``Resolved`` (or ``Audited``), pip's
        first ``Downloading`` or ``Installing collected packages``."""
        return self.phase not in ("starting", "resolving")

    @property
    def bytes_total(self) -> float:
        return sum(self.sizes.values())

    @property
    def bytes_done(self) -> float:
        return self.done_bytes + self.current_bytes

    def rate(self) -> float | None:
        if self.download_t0 is None:
            return None
        elapsed = self._now() - self.download_t0
        return self.bytes_done / elapsed if elapsed > 0.2 and self.bytes_done else None

    def describe(self) -> str:
        if self.phase == "downloading":
            rate = self.rate()
            return (
                f"downloading {self.finished}/{self.started} · {human_bytes(self.bytes_done)} of "
                f"{human_bytes(self.bytes_total)}"
                + (f" · {human_bytes(rate)}/s" if rate else "")
                + f" · {self.subject}"
            )
        if self.phase == "starting":
            return "starting"
        return f"{self.phase} {self.subject}".strip()
