"""Where a run happens: the backend identity every receipt carries.

Detected from the environment and a few small files, with no network and no subprocess
(microseconds): a bare host, an OCI/Docker container, a Modal container, a Slurm job, a
Kubernetes pod. Two identities are kept apart, because ``receipt diff`` must tell "the image
changed" from "the same image ran again somewhere else":

* ``image``: what the software came from. Modal's ``MODAL_IMAGE_ID``; the image digest/ref an
  operator or a build passes in (``ENVBUILD_IMAGE_DIGEST``, ``ENVBUILD_IMAGE_REF``); what podman and
  buildah write to ``/run/.containerenv`` (``image=``, ``imageid=``); and the OS release
  (``/etc/os-release``), which is the image of a bare host.
* ``run``: this execution. Modal's task id, environment, region and cloud; Slurm's job, step,
  array task, cluster, node list and rank; the Kubernetes pod and namespace; the container's name
  or id; the host name, a hash of ``/etc/machine-id`` (systemd asks that the raw id not be shown,
  so an application-specific digest stands in for it) and the boot id.

``kind`` names the most specific scheduler found (modal > slurm > kubernetes > container >
host); ``container`` says whether the process runs in a container at all, with the evidence in
``hints``. Docker puts no image digest inside a container: pass it in
(``docker run -e ENVBUILD_IMAGE_DIGEST=$(docker inspect -f '{{.Id}}' IMAGE)``), or it is unknown.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

Kind = Literal["host", "container", "kubernetes", "slurm", "modal"]
KINDS: tuple[Kind, ...] = ("host", "container", "kubernetes", "slurm", "modal")

# Variable -> key in the receipt. Names checked against Modal's docs ("Environment variables":
# MODAL_TASK_ID, MODAL_IMAGE_ID, MODAL_REGION, MODAL_CLOUD_PROVIDER in every container;
# MODAL_ENVIRONMENT, MODAL_IS_REMOTE in Functions) and Slurm's sbatch/srun "OUTPUT ENVIRONMENT
# VARIABLES". MODAL_IDENTITY_TOKEN is a credential and is never read.
MODAL_IMAGE = {"MODAL_IMAGE_ID": "modal_image_id"}
MODAL_RUN = {
    "MODAL_TASK_ID": "modal_task_id",
    "MODAL_ENVIRONMENT": "modal_environment",
    "MODAL_REGION": "modal_region",
    "MODAL_CLOUD_PROVIDER": "modal_cloud_provider",
}
SLURM_RUN = {
    "SLURM_JOB_ID": "slurm_job_id",
    "SLURM_JOB_NAME": "slurm_job_name",
    "SLURM_ARRAY_JOB_ID": "slurm_array_job_id",
    "SLURM_ARRAY_TASK_ID": "slurm_array_task_id",
    "SLURM_STEP_ID": "slurm_step_id",
    "SLURM_CLUSTER_NAME": "slurm_cluster",
    "SLURM_JOB_NODELIST": "slurm_nodelist",
    "SLURM_PROCID": "slurm_procid",
}
IMAGE_VARS = {"ENVBUILD_IMAGE_DIGEST": "digest", "ENVBUILD_IMAGE_REF": "ref"}
# /run/.containerenv (podman, buildah run): key=value lines; which ones name the image, which the
# run
CONTAINERENV_IMAGE = {"image": "ref", "imageid": "id"}
CONTAINERENV_RUN = {"name": "container_name", "id": "container_id"}
_CGROUP_ID = re.compile(r"(?:docker|libpod|crio|containerd|cri-containerd)[-/:]([0-9a-f]{64})")
_CGROUP_HINT = re.compile(r"/(docker|kubepods|libpod|lxc|containerd|crio)\b")


class BackendJSON(TypedDict):
    """Where the run happened (``Backend.to_dict``): what the software came from, kept apart from
    this execution."""

    kind: Kind  # the most specific scheduler found: modal, slurm, kubernetes, container or host
    container: bool  # whether the process ran in a container at all
    # what the software came from (`modal_image_id`, `digest`, `ref`, `id`, `os`, ...)
    image: dict[str, str]
    # this execution (`modal_task_id`, `slurm_job_id`, `k8s_pod`, `hostname`, `boot_id`, ...)
    run: dict[str, str]
    hints: list[str]  # the evidence (`/.dockerenv`, `MODAL_TASK_ID`, `cgroup: docker`)


@dataclass(frozen=True)
class Backend:
    kind: Kind
    container: bool
    image: Mapping[str, str] = field(default_factory=dict)
    run: Mapping[str, str] = field(default_factory=dict)
    hints: tuple[str, ...] = ()  # the evidence: "/.dockerenv", "MODAL_TASK_ID", "cgroup: docker"

    def to_dict(self) -> BackendJSON:
        return {
            "kind": self.kind,
            "container": self.container,
            "image": dict(self.image),
            "run": dict(self.run),
            "hints": list(self.hints),
        }


def _read(path: Path, limit: int = 65536) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return ""


def _key_values(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip().strip('"')
    return out


def detect(environ: Mapping[str, str] | None = None, root: Path = Path("/")) -> Backend:
    """The backend of this process. ``root`` is where ``/.dockerenv``, ``/proc`` and ``/etc`` are
    read from (tests point it at a folder laid out like one)."""
    env = os.environ if environ is None else environ
    image: dict[str, str] = {}
    run: dict[str, str] = {}
    hints: list[str] = []

    os_release = _key_values(_read(root / "etc/os-release"))
    if os_release.get("ID"):
        image["os"] = f"{os_release['ID']} {os_release.get('VERSION_ID', '')}".strip()

    container = False
    if (root / ".dockerenv").exists():
        container = True
        hints.append("/.dockerenv")
    containerenv = root / "run/.containerenv"
    if containerenv.exists():
        container = True
        hints.append("/run/.containerenv")
        fields = _key_values(_read(containerenv))
        image.update(
            {
                ours: fields[theirs]
                for theirs, ours in CONTAINERENV_IMAGE.items()
                if fields.get(theirs)
            }
        )
        run.update(
            {
                ours: fields[theirs]
                for theirs, ours in CONTAINERENV_RUN.items()
                if fields.get(theirs)
            }
        )
    cgroup = _read(root / "proc/self/cgroup")
    if (m := _CGROUP_HINT.search(cgroup)) is not None:
        container = True
        hints.append(f"cgroup: {m.group(1)}")
    if "container_id" not in run and (m := _CGROUP_ID.search(cgroup)) is not None:
        run["container_id"] = m.group(1)[:12]
    if env.get("container"):  # systemd's convention: podman, systemd-nspawn, lxc set it
        container = True
        hints.append(f"container={env['container']}")
    image.update({ours: env[var] for var, ours in IMAGE_VARS.items() if env.get(var)})

    kind: Kind = "container" if container else "host"
    if env.get("KUBERNETES_SERVICE_HOST"):
        kind, container = "kubernetes", True
        hints.append("KUBERNETES_SERVICE_HOST")
        run["k8s_pod"] = env.get("HOSTNAME") or socket.gethostname()
        namespace = _read(
            root / "var/run/secrets/kubernetes.io/serviceaccount/namespace", 256
        ).strip()
        if namespace:
            run["k8s_namespace"] = namespace
    if env.get("SLURM_JOB_ID"):
        kind = "slurm"
        hints.append("SLURM_JOB_ID")
        run.update({ours: env[var] for var, ours in SLURM_RUN.items() if env.get(var)})
    if env.get("MODAL_TASK_ID") or env.get("MODAL_IMAGE_ID"):
        kind, container = "modal", True  # gVisor: no /.dockerenv
        hints.append("MODAL_TASK_ID" if env.get("MODAL_TASK_ID") else "MODAL_IMAGE_ID")
        image.update({ours: env[var] for var, ours in MODAL_IMAGE.items() if env.get(var)})
        run.update({ours: env[var] for var, ours in MODAL_RUN.items() if env.get(var)})

    run["hostname"] = socket.gethostname()
    machine_id = _read(root / "etc/machine-id", 256).strip()
    if machine_id:
        run["machine_id_sha256"] = hashlib.sha256(f"envbuild:{machine_id}".encode()).hexdigest()[
            :16
        ]
    boot_id = _read(root / "proc/sys/kernel/random/boot_id", 256).strip()
    if boot_id:
        run["boot_id"] = boot_id
    return Backend(kind=kind, container=container, image=image, run=run, hints=tuple(hints))
