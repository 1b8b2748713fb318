"""What all-reduce bandwidth a host's GPU links should give, against what dist-step measured.

The ranks' GPUs (their UUIDs, from the result) are found in ``nvidia-smi``'s list, and their
links in ``nvidia-smi topo -m``: the slowest link between two of them bounds a ring all-reduce.
NVLink (``NV18``: 18 links) moves about 25 GB/s a link each way on V100, A100 and H100/H200
(NVLink 2 to 4), and NCCL's all-reduce reaches about 75% of it (329 to 361 GB/s bus bandwidth
for 1 GiB on NV18 H100s, device KINDS.md); any PCIe path (``PIX``, ``PXB``, ``PHB``, ``NODE``,
``SYS``) is taken as PCIe Gen4 x16 through the host, about 12 GB/s of bus bandwidth. A
measurement under half the expected figure is flagged (``FAR_BELOW``): a link down, P2P off
(``NCCL_P2P_DISABLE``), traffic through the CPU. Ranks on several hosts go through the network,
which ``nvidia-smi`` does not describe: no expectation then.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from envbuild import nvidia
from envbuild.host.preflight import parse_topo

NVLINK_GBPS_PER_LINK = 25.0
NCCL_EFFICIENCY = 0.75
PCIE_BUSBW_GBPS = 12.0
FAR_BELOW = 0.5  # flagged under this fraction of the expected bus bandwidth

__all__ = ["expected_busbw", "judge"]


def expected_busbw(links: Sequence[str]) -> tuple[float, str] | None:
    """The bus bandwidth the slowest of ``links`` (``NV18``, ``SYS``...) should give, and why."""
    if not links:
        return None
    nv = [int(m.group(1)) for m in (re.fullmatch(r"NV(\d+)", link) for link in links) if m]
    if len(nv) == len(links):
        n = min(nv)
        return (
            n * NVLINK_GBPS_PER_LINK * NCCL_EFFICIENCY,
            f"NVLink NV{n}: {n} x {NVLINK_GBPS_PER_LINK:g} GB/s x {NCCL_EFFICIENCY:g}",
        )
    slow = sorted({link for link in links if not re.fullmatch(r"NV\d+", link)})
    return PCIE_BUSBW_GBPS, f"PCIe ({', '.join(slow)}): about {PCIE_BUSBW_GBPS:g} GB/s"


def judge(
    result: Mapping[str, Any],
    *,
    query: str | None = None,
    topo: str | None = None,
    host: str | None = None,
) -> dict[str, Any] | None:
    """The measured all-reduce bus bandwidth against the ranks' links: measured, expected, links,
    basis, verdict (``pass``, or ``warn`` far below); None where there is nothing to compare (one
    rank, CPU, several hosts, no nvidia-smi). ``query``/``topo``/``host``: given, not read."""
    bw = result.get("allreduce")
    ranks = result.get("ranks") or []
    if not isinstance(bw, Mapping) or not bw.get("busbw_gbps") or len(ranks) < 2:
        return None
    here = host or os.uname().nodename
    if any(r.get("host") != here for r in ranks) or any(not r.get("gpu_uuid") for r in ranks):
        return None
    query = query if query is not None else nvidia.query(nvidia.LIST_FIELDS).output
    topo = topo if topo is not None else nvidia.smi(["topo", "-m"]).output
    if not query or not topo:
        return None
    by_uuid = {g.uuid: g.index for g in nvidia.gpus_of(query)}
    indices = sorted({by_uuid[r["gpu_uuid"]] for r in ranks if r["gpu_uuid"] in by_uuid})
    if len(indices) < 2:
        return None
    cells = parse_topo(topo).cells
    links = [
        cells.get((f"GPU{a}", f"GPU{b}"), "?")
        for i, a in enumerate(indices)
        for b in indices[i + 1 :]
    ]
    expected = expected_busbw([link for link in links if link != "?"])
    if expected is None:
        return None
    measured = float(bw["busbw_gbps"])
    return {
        "measured_busbw_gbps": measured,
        "expected_busbw_gbps": expected[0],
        "basis": expected[1],
        "gpus": indices,
        "links": links,
        "verdict": "warn" if measured < FAR_BELOW * expected[0] else "pass",
    }


def describe(j: Mapping[str, Any]) -> str:
    word = "far below" if j["verdict"] == "warn" else "in line with"
    return (
        f"all-reduce busbw {j['measured_busbw_gbps']:.0f} GB/s, {word} the "
        f"{j['expected_busbw_gbps']:.0f} GB/s the links between GPU "
        f"{', '.join(map(str, j['gpus']))} should give ({j['basis']})"
    )
