"""Comparing receipts: what must not drift between hosts or runs (packages, torch, Python,
environment, hardware, the image, how a provision ended), what is information only (where it ran,
provenance), and the few lines ``receipt show`` prints first.

The readers take ``ReceiptBody``: a receipt this envbuild just made, or one ``schema.validate``
held to its types. A section or field added after ``envbuild.receipt/1`` first shipped
(``backend``, a provision's ``failure``) is read with ``.get``: older receipts lack it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

from envbuild.proof.backend import BackendJSON
from envbuild.proof.provenance import ProvenanceJSON
from envbuild.proof.receipt.schema import (
    DistributionJSON,
    LoadedReceipt,
    ProvisionFailureJSON,
    ProvisionPayload,
    ReceiptBody,
)


class DifferenceJSON(TypedDict):
    """One difference between two receipts."""

    section: str  # packages, torch, python, env, hardware, image, outcome, run or provenance
    key: str  # what differs: a package (`NAME (files)`: its files), a version, a variable, a key
    a: Any  # the reference's value (null: absent); any JSON value
    b: Any  # the other receipt's value; any JSON value
    # true: drift; false: information (host name, revision, another run of the same image)
    drift: bool


@dataclass(frozen=True)
class Difference:
    section: str  # packages, torch, python, env, hardware, image, outcome, run, provenance
    key: str
    a: Any
    b: Any
    drift: bool = True  # False: informational (host name, revision, time)

    def to_dict(self) -> DifferenceJSON:
        return {
            "section": self.section,
            "key": self.key,
            "a": self.a,
            "b": self.b,
            "drift": self.drift,
        }


def failure(doc: ReceiptBody) -> ProvisionFailureJSON | None:
    """How a provision stopped short (its payload's ``failure``); None for a run that finished,
    and for every other kind."""
    if doc["kind"] != "provision":
        return None
    return cast("ProvisionPayload", doc["payload"]).get("failure")


def outcome(doc: ReceiptBody) -> str:
    """How the run ended, in words: ``finished``, or the stage it failed in, with the exit code."""
    failed = failure(doc)
    if failed is None:
        return "finished"
    how = "interrupted" if failed.get("interrupted") else "failed"
    return f"{how} in {failed['stage']} (exit {failed['exit_code']})"


def stopped_short(doc: LoadedReceipt) -> str | None:
    """One paragraph on a provision that stopped short (None for one that finished): where, the
    exit code, the first line of why, the steps done, the lock it was of (and whether it is still
    there) and the receipt."""
    failed = failure(doc)
    if failed is None:
        return None
    why = (failed["reason"].strip().splitlines() or ["-"])[0].rstrip(".")
    done = ", ".join(failed["completed"]) or "none"
    lock = cast("ProvisionPayload", doc["payload"]).get("lock") or {}
    lock_file = lock.get("lock_file")
    of = ""
    if isinstance(lock_file, str):
        of = f" from {lock_file}" + ("" if Path(lock_file).is_file() else " (not there any more)")
    return (
        f"the last provision{of} {outcome(doc)}: {why}; steps done: {done} "
        f"(receipt {doc['_path']}). Run provision again to finish it"
    )


def _packages(doc: ReceiptBody) -> dict[str, DistributionJSON]:
    return {d["name"]: d for d in doc["software"].get("distributions") or []}


_IDENTITY_KEYS = ("content_sha256", "files_sha256", "record_sha256")  # the best both receipts have


def _files_differ(x: DistributionJSON, y: DistributionJSON) -> tuple[str, str] | None:
    """Same version, different files? None, or what to show for each side: the identity both
    receipts hold (``content_sha256``: independent of where the environment lives, read from
    disk), shortened, and the files changed on disk since the install where there are any."""
    key = next((k for k in _IDENTITY_KEYS if _identity(x, k) and _identity(y, k)), "record_sha256")
    if _identity(x, key) == _identity(y, key):
        return None
    return _files_shown(x, key), _files_shown(y, key)


def _identity(d: DistributionJSON, key: str) -> str | None:
    if key == "content_sha256":
        return d.get("content_sha256")
    return d.get("files_sha256") if key == "files_sha256" else d.get("record_sha256")


def _files_shown(d: DistributionJSON, key: str) -> str:
    shown = str(_identity(d, key) or "-")[:12]
    count = d.get("modified_count") or 0
    if not count:
        return shown
    names = [str(n) for n in d.get("modified") or []]
    more = f" and {count - len(names)} more" if count > len(names) else ""
    return f"{shown}; {count} file(s) changed on disk: {', '.join(names)}{more}"


def diff_receipts(a: ReceiptBody, b: ReceiptBody) -> list[Difference]:
    out: list[Difference] = []
    pa, pb = _packages(a), _packages(b)
    for name in sorted(set(pa) | set(pb)):
        x, y = pa.get(name), pb.get(name)
        if x is None or y is None:
            out.append(Difference("packages", name, x and x["version"], y and y["version"]))
        elif x["version"] != y["version"]:
            out.append(Difference("packages", name, x["version"], y["version"]))
        elif (files := _files_differ(x, y)) is not None:
            out.append(Difference("packages", f"{name} (files)", *files))
    sa, sb = a["software"], b["software"]
    for key, u, v in _flat_diff(sa.get("torch") or {}, sb.get("torch") or {}):
        out.append(Difference("torch", key, u, v))
    if sa.get("python") != sb.get("python"):
        out.append(Difference("python", "version", sa.get("python"), sb.get("python")))
    ea, eb = a["env"], b["env"]
    for sub, over_a, over_b in (
        ("overlay", ea.get("overlay"), eb.get("overlay")),
        ("in_force", ea.get("in_force"), eb.get("in_force")),
    ):
        for key, u, v in _flat_diff(over_a or {}, over_b or {}):
            if sub == "overlay" and key.endswith(("_CACHE_DIR", "_CACHE_PATH", "HF_HOME")):
                continue  # cache folders follow the data root
            out.append(Difference("env", f"{sub}.{key}", u, v))
    out += _hardware_diff(a, b)
    out += backend_diff(a.get("backend"), b.get("backend"))
    if outcome(a) != outcome(b):  # a run that stopped short is not one that finished
        out.append(Difference("outcome", str(b["kind"]), outcome(a), outcome(b)))
    va, vb = a["provenance"], b["provenance"]
    both = bool(a.get("backend") and b.get("backend"))  # then the host name is in the run group
    if not both and va.get("hostname") != vb.get("hostname"):
        out.append(
            Difference(
                "provenance", "hostname", va.get("hostname"), vb.get("hostname"), drift=False
            )
        )
    if va.get("envbuild_version") != vb.get("envbuild_version"):
        out.append(
            Difference(
                "provenance",
                "envbuild_version",
                va.get("envbuild_version"),
                vb.get("envbuild_version"),
                drift=False,
            )
        )
    ra, rb = _revision(va), _revision(vb)
    if ra != rb:
        out.append(Difference("provenance", "repo revision", ra, rb, drift=False))
    return out


def _revision(prov: ProvenanceJSON) -> str | None:
    repo = prov.get("repo")
    return repo.get("revision") if repo else None


def _hardware_diff(a: ReceiptBody, b: ReceiptBody) -> list[Difference]:
    out: list[Difference] = []
    ha, hb = a["hardware"], b["hardware"]
    pairs: dict[str, tuple[object, object]] = {
        "driver": (ha.get("driver"), hb.get("driver")),
        "topology": (ha.get("topology"), hb.get("topology")),
        "nvcc": (ha.get("nvcc"), hb.get("nvcc")),
        "gcc": (ha.get("gcc"), hb.get("gcc")),
        "numa_balancing": (ha.get("numa_balancing"), hb.get("numa_balancing")),
    }
    for key, (x, y) in pairs.items():
        if x != y:
            out.append(Difference("hardware", key, x, y))
    ga = [g.get("name") for g in ha.get("gpus") or []]
    gb = [g.get("name") for g in hb.get("gpus") or []]
    if ga != gb:
        out.append(Difference("hardware", "gpus", _gpus_shown(ga), _gpus_shown(gb)))
    ma, mb = a["provenance"].get("machine_class"), b["provenance"].get("machine_class")
    if ma != mb:
        out.append(Difference("hardware", "machine_class", ma, mb))
    return out


def _gpus_shown(names: Sequence[str | None]) -> str:
    return f"{len(names)} x {', '.join(sorted({str(n) for n in names})) or '-'}"


def backend_diff(a: BackendJSON | None, b: BackendJSON | None) -> list[Difference]:
    """``image`` differences (drift: the software came from another image, or one side ran in a
    container and the other not) and ``run`` differences (information: the same image ran as
    another task, job, pod, container, host or boot, or under another scheduler: a Slurm job on
    a host is the host's image). A receipt without the section (written before it) says nothing
    about either: one informational line."""
    if not a or not b:
        if a or b:
            return [
                Difference(
                    "image",
                    "backend",
                    a.get("kind") if a else "not recorded",
                    b.get("kind") if b else "not recorded",
                    drift=False,
                )
            ]
        return []
    out: list[Difference] = []
    if bool(a.get("container")) != bool(b.get("container")):
        out.append(
            Difference("image", "container", bool(a.get("container")), bool(b.get("container")))
        )
    for key, x, y in _flat_diff(a.get("image") or {}, b.get("image") or {}):
        out.append(Difference("image", key, x, y))
    if a.get("kind") != b.get("kind"):
        out.append(Difference("run", "backend kind", a.get("kind"), b.get("kind"), drift=False))
    for key, x, y in _flat_diff(a.get("run") or {}, b.get("run") or {}):
        out.append(Difference("run", key, x, y, drift=False))
    return out


def image_changed(diffs: list[Difference]) -> bool:
    return any(d.section == "image" and d.drift for d in diffs)


def run_changed(diffs: list[Difference]) -> bool:
    return any(d.section == "run" for d in diffs)


def _flat_diff(x: Mapping[str, object], y: Mapping[str, object]) -> list[tuple[str, Any, Any]]:
    return [(k, x.get(k), y.get(k)) for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]


def summary(doc: LoadedReceipt) -> dict[str, Any]:
    """The few lines ``receipt show`` prints first (a failed provision: where it stopped, why,
    and the steps done by then)."""
    sw, hw, prov = doc["software"], doc["hardware"], doc["provenance"]
    repo = prov.get("repo")
    torch = sw.get("torch") or {}
    gpus = hw.get("gpus") or []
    changed = [
        f"{d['name']} ({d.get('modified_count')})"
        for d in sw.get("distributions") or []
        if (d.get("modified_count") or 0) > 0
    ]
    names = doc["names"]
    failed = failure(doc)
    return {
        "file": doc.get("_path"),
        "kind": doc["kind"],
        "created": doc["created"],
        **(
            {
                "outcome": outcome(doc),
                "reason": failed["reason"],
                "steps done": ", ".join(failed["completed"]) or "none",
            }
            if failed is not None
            else {}
        ),
        "host lineage / profile / regime": " / ".join(
            str(names.get(k)) for k in ("host_lineage", "profile", "launch_regime")
        ),
        "host": f"{prov.get('hostname')} ({prov.get('machine_class')})",
        "source": (
            f"{(_revision(prov) or 'no git')[:12]}{' dirty' if repo and repo.get('dirty') else ''}"
        ),
        "envbuild": prov.get("envbuild_version"),
        "python": sw.get("python"),
        "torch": " ".join(f"{k}={v}" for k, v in torch.items()) or "not installed",
        "packages": len(sw.get("distributions") or []),
        **({"files changed on disk": ", ".join(changed)} if changed else {}),
        "driver / GPUs": (
            f"{hw.get('driver') or '-'} / {_gpus_shown([g.get('name') for g in gpus])}"
        ),
        "backend": _backend_line(doc.get("backend")),
    }


def _backend_line(backend: BackendJSON | None) -> str:
    if not backend:
        return "not recorded"
    image = backend.get("image") or {}
    shown = next(
        (f"{k}={image[k]}" for k in ("modal_image_id", "digest", "id", "ref") if image.get(k)), None
    )
    run = backend.get("run") or {}
    where = next(
        (
            f"{k}={run[k]}"
            for k in ("modal_task_id", "slurm_job_id", "k8s_pod", "container_id")
            if run.get(k)
        ),
        f"hostname={run.get('hostname')}",
    )
    return f"{backend.get('kind')}: image {shown or image.get('os') or 'unknown'}, run {where}"
