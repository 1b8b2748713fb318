"""Backend identity in receipts (bare host, OCI container, Modal, Slurm, Kubernetes), and
``receipt diff`` telling "the image changed" (exit 10) from "the run changed" (exit 0)."""

from __future__ import annotations

import copy
import json
import socket
from pathlib import Path

import pytest

from envbuild.cli import main
from envbuild.layout import Paths
from envbuild.proof.backend import detect
from envbuild.proof.receipt import (
    SoftwareJSON,
    VerifyPayload,
    backend_diff,
    diff_receipts,
    load_receipt,
    write_receipt,
)
from envbuild.spec import resolve_spec

MACHINE_ID = "0123456789abcdef0123456789abcdef"
CONTAINER_ID = "4f" * 32


def fake_root(
    tmp_path: Path, *, cgroup: str = "0::/\n", files: dict[str, str] | None = None
) -> Path:
    """A folder laid out like ``/`` with the files ``detect`` reads."""
    root = tmp_path / "root"
    layout = {
        "etc/os-release": 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\n',
        "etc/machine-id": MACHINE_ID + "\n",
        "proc/sys/kernel/random/boot_id": "b0b0b0b0-1111-2222-3333-444455556666\n",
        "proc/self/cgroup": cgroup,
        **(files or {}),
    }
    for rel, text in layout.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_bare_host(tmp_path: Path) -> None:
    b = detect({}, fake_root(tmp_path))
    assert b.kind == "host" and not b.container and b.hints == ()
    assert b.image == {"os": "ubuntu 22.04"}
    assert b.run["hostname"] == socket.gethostname()
    assert b.run["boot_id"] == "b0b0b0b0-1111-2222-3333-444455556666"
    # the raw machine id is not shown (systemd asks for an application-specific digest)
    assert len(b.run["machine_id_sha256"]) == 16 and MACHINE_ID not in json.dumps(b.to_dict())


def test_docker_container(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path, cgroup=f"0::/\n4:memory:/docker/{CONTAINER_ID}\n", files={".dockerenv": ""}
    )
    b = detect(
        {"ENVBUILD_IMAGE_DIGEST": "sha256:" + "a" * 64, "ENVBUILD_IMAGE_REF": "envbuild/cpu:1"},
        root,
    )
    assert b.kind == "container" and b.container
    assert "/.dockerenv" in b.hints and "cgroup: docker" in b.hints
    assert b.image == {
        "os": "ubuntu 22.04",
        "digest": "sha256:" + "a" * 64,
        "ref": "envbuild/cpu:1",
    }
    assert b.run["container_id"] == CONTAINER_ID[:12]


def test_podman_buildah_containerenv(tmp_path: Path) -> None:
    containerenv = (
        'engine="podman-4.3.1"\nname="train-1"\nid="'
        + "c" * 64
        + '"\nimage="localhost/envbuild/cpu:latest"\nimageid="'
        + "d" * 64
        + '"\nrootless=1\n'
    )
    b = detect(
        {"container": "podman"}, fake_root(tmp_path, files={"run/.containerenv": containerenv})
    )
    assert (
        b.kind == "container" and "/run/.containerenv" in b.hints and "container=podman" in b.hints
    )
    assert b.image["ref"] == "localhost/envbuild/cpu:latest" and b.image["id"] == "d" * 64
    assert b.run["container_name"] == "train-1" and b.run["container_id"] == "c" * 64


def test_modal(tmp_path: Path) -> None:
    env = {
        "MODAL_TASK_ID": "ta-01ABC",
        "MODAL_IMAGE_ID": "im-42",
        "MODAL_ENVIRONMENT": "main",
        "MODAL_REGION": "us-east-1",
        "MODAL_CLOUD_PROVIDER": "CLOUD_PROVIDER_AWS",
        "MODAL_IS_REMOTE": "1",
        "MODAL_IDENTITY_TOKEN": "eyJ-secret-token",
    }
    b = detect(env, fake_root(tmp_path))
    assert b.kind == "modal" and b.container  # gVisor has no /.dockerenv; the variables say it
    assert b.image == {"os": "ubuntu 22.04", "modal_image_id": "im-42"}
    assert {
        k: b.run[k]
        for k in ("modal_task_id", "modal_environment", "modal_region", "modal_cloud_provider")
    } == {
        "modal_task_id": "ta-01ABC",
        "modal_environment": "main",
        "modal_region": "us-east-1",
        "modal_cloud_provider": "CLOUD_PROVIDER_AWS",
    }
    assert "eyJ-secret-token" not in json.dumps(b.to_dict())


def test_slurm_inside_a_container(tmp_path: Path) -> None:
    env = {
        "SLURM_JOB_ID": "1234",
        "SLURM_JOB_NAME": "pretrain",
        "SLURM_CLUSTER_NAME": "h200",
        "SLURM_JOB_NODELIST": "node[01-04]",
        "SLURM_PROCID": "3",
        "ENVBUILD_IMAGE_DIGEST": "sha256:" + "e" * 64,
    }
    b = detect(env, fake_root(tmp_path, files={".dockerenv": ""}))
    assert b.kind == "slurm" and b.container  # pyxis/enroot style: a Slurm job in an image
    assert b.run["slurm_job_id"] == "1234" and b.run["slurm_nodelist"] == "node[01-04]"
    assert b.run["slurm_procid"] == "3" and b.run["slurm_cluster"] == "h200"
    assert b.image["digest"] == "sha256:" + "e" * 64


def test_kubernetes(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        cgroup="0::/kubepods/besteffort/pod1/" + CONTAINER_ID + "\n",
        files={"var/run/secrets/kubernetes.io/serviceaccount/namespace": "training\n"},
    )
    b = detect({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "trainer-7d9f-x2"}, root)
    assert b.kind == "kubernetes" and b.container and "cgroup: kubepods" in b.hints
    assert b.run["k8s_pod"] == "trainer-7d9f-x2" and b.run["k8s_namespace"] == "training"


def test_this_machine() -> None:
    """The real detection on the machine the tests run on: cheap, and consistent with its files."""
    b = detect()
    assert b.kind in ("host", "container", "kubernetes", "slurm", "modal")
    # a Slurm job may run on a bare node
    assert b.container == (b.kind != "host") or b.kind == "slurm"
    if Path("/.dockerenv").exists():
        assert b.container and "/.dockerenv" in b.hints
    assert b.run["hostname"] == socket.gethostname()


# ----------------------------------------------------------------------------- receipts and diff

SOFTWARE: SoftwareJSON = {
    "python": "3.11.9",
    "torch": {"version": "2.13.0+cpu"},
    "distributions": [{"name": "torch", "version": "2.13.0+cpu", "record_sha256": "1" * 64}],
}


@pytest.fixture
def modal_receipt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("SLURM_JOB_ID", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODAL_TASK_ID", "ta-AAA")
    monkeypatch.setenv("MODAL_IMAGE_ID", "im-111")
    monkeypatch.setenv("MODAL_REGION", "us-east-1")
    payload: VerifyPayload = {
        "ok": True,
        "venv": "-",
        "baseline_from": "-",
        "violations": [],
        "torch": None,
        "guard_seconds": 0.0,
    }
    return write_receipt(
        Paths(root=tmp_path / "data"),
        "verify",
        payload,
        spec=resolve_spec("cpu", None),
        software=copy.deepcopy(SOFTWARE),
    )


def _edit(src: Path, dst: Path, **backend: dict[str, str]) -> Path:
    doc = json.loads(src.read_text())
    for part, values in backend.items():
        doc["backend"][part].update(values)
    dst.write_text(json.dumps(doc))
    return dst


def test_receipt_records_backend(modal_receipt: Path) -> None:
    doc = load_receipt(modal_receipt)
    assert doc["schema"] == "envbuild.receipt/1"
    assert doc["backend"]["kind"] == "modal"
    assert doc["backend"]["image"]["modal_image_id"] == "im-111"
    assert doc["backend"]["run"]["modal_task_id"] == "ta-AAA"


def test_diff_run_changed_same_image(
    modal_receipt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _edit(
        modal_receipt,
        tmp_path / "b.json",
        run={"modal_task_id": "ta-BBB", "hostname": "modal-worker-9"},
    )
    assert main(["receipt", "diff", str(modal_receipt), str(other)]) == 0
    out = capsys.readouterr().out
    assert "the run changed (same image)" in out and "ta-BBB" in out and "no drift" in out
    assert "image changed" not in out

    assert main(["receipt", "diff", str(modal_receipt), str(other), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["drift"] is False and doc["run_changed"] is True and doc["image_changed"] is False
    groups = doc["receipts"][0]["groups"]
    assert {d["key"] for d in groups["run"]} == {"modal_task_id", "hostname"}
    assert groups["image"] == [] and groups["environment"] == []


def test_diff_image_changed(
    modal_receipt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _edit(
        modal_receipt,
        tmp_path / "b.json",
        image={"modal_image_id": "im-222"},
        run={"modal_task_id": "ta-CCC"},
    )
    assert main(["receipt", "diff", str(modal_receipt), str(other)]) == 10
    out = capsys.readouterr().out
    assert "the image changed; the run changed" in out and "im-222" in out
    assert main(["receipt", "diff", str(modal_receipt), str(other), "--json"]) == 10
    rec = json.loads(capsys.readouterr().out)["receipts"][0]
    assert rec["image_changed"] and rec["run_changed"] and rec["drift"]
    assert [(d["key"], d["a"], d["b"], d["drift"]) for d in rec["groups"]["image"]] == [
        ("modal_image_id", "im-111", "im-222", True)
    ]
    # a bare-host receipt of the same packages: not from that image (an image change) ...
    doc = json.loads(modal_receipt.read_text())
    doc["backend"] = {
        "kind": "host",
        "container": False,
        "image": {"os": "ubuntu 22.04"},
        "run": {"hostname": "h"},
    }
    found = {(d.section, d.key): d.drift for d in diff_receipts(load_receipt(modal_receipt), doc)}
    assert found[("image", "container")] and found[("image", "modal_image_id")]
    assert found[("run", "backend kind")] is False


def test_slurm_job_on_the_same_host_image_is_a_run_change(tmp_path: Path) -> None:
    """A Slurm job on a bare node has the node's image: only the run differs (fleet diffs stay
    0)."""
    host = detect({}, fake_root(tmp_path)).to_dict()
    job = detect({"SLURM_JOB_ID": "77", "SLURM_PROCID": "0"}, fake_root(tmp_path)).to_dict()
    # diff_receipts' backend part (a receipt's other sections: typed)
    diffs = backend_diff(host, job)
    assert {(d.section, d.key, d.drift) for d in diffs} == {
        ("run", "backend kind", False),
        ("run", "slurm_job_id", False),
        ("run", "slurm_procid", False),
    }


def test_old_receipt_without_backend_still_diffs(
    modal_receipt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(modal_receipt.read_text())
    del doc["backend"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    assert main(["receipt", "show", str(old)]) == 0
    assert "not recorded" in capsys.readouterr().out
    assert main(["receipt", "diff", str(old), str(modal_receipt), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)["receipts"][0]
    assert rec["groups"]["image"] == [
        {"section": "image", "key": "backend", "a": "not recorded", "b": "modal", "drift": False}
    ]


def test_damaged_backend_section_is_a_config_error(
    modal_receipt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(modal_receipt.read_text())
    doc["backend"]["image"] = "im-111"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["receipt", "diff", str(modal_receipt), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "backend.image: must be a table" in err and "Traceback" not in err
