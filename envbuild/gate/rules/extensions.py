"""Prebuilt CUDA extensions against the torch they are installed with.

An extension wheel binds to the C++ symbols of one torch minor, the runtime of one CUDA major
and one C++ ABI; paired with another torch it fails at import with ``undefined symbol``
(Dao-AILab/flash-attention#709, #836, #919, #931, #1717, #1832). The claim is read by
``envbuild.abitag`` (the one parser, shared with the wheelhouse that writes such labels) from the
entry's local version, else from its artifact file names. The torch it is checked against is the
one the lock's own edge names (uv.lock), else the environment's one torch.
"""

from __future__ import annotations

from envbuild.abitag import AbiClaim, mismatches, parse_claim, torch_build, unverifiable_reason
from envbuild.gate.context import Context
from envbuild.gate.model import Entry

__all__ = ["KNOWN_EXTENSIONS", "check", "claim_of"]

# Projects that ship compiled torch extensions; one of these without a readable claim is listed
# by --explain (a wheel from PyPI or a source build carries none).
KNOWN_EXTENSIONS = frozenset({
    "flash-attn", "flash-attn-3", "flash-attn-4", "flash-attn-cute", "mamba-ssm", "causal-conv1d",
    "flashinfer-python", "xformers", "apex", "transformer-engine", "transformer-engine-torch", "deepspeed",
    "vllm-flash-attn", "sageattention", "torch-scatter", "torch-sparse", "torch-cluster", "grouped-gemm",
    "natten", "fused-dense-lib", "dropout-layer-norm", "rotary-emb", "qoptim-cuda", "bitsandbytes",
})


def claim_of(entry: Entry) -> AbiClaim | None:
    if entry.version and "+" in entry.version:
        claim = parse_claim(entry.version)
        if claim is not None:
            return claim
    for url, _ in entry.files:
        if url.split("?", 1)[0].endswith(".whl"):
            claim = parse_claim(url)
            if claim is not None:
                return claim
    if entry.url:
        return parse_claim(entry.url)
    return None


def check(ctx: Context) -> None:
    protected = ctx.policy.protected
    torch_name = ctx.policy.torch
    claims: dict[int, AbiClaim | None] = {}
    for view in ctx.views:
        platform = "linux" if view.env.system == "linux" else view.env.system or "linux"
        for entry in view.members.entries:
            if entry.name in protected or entry.key in view.members.roots:
                continue
            if entry.key not in claims:
                claims[entry.key] = claim_of(entry)
            claim = claims[entry.key]
            if claim is None and entry.name not in KNOWN_EXTENSIONS and not entry.url:
                continue
            torch = view.torch_for(entry, ctx.lock, torch_name)
            if torch is None or torch.version is None:
                if claim is not None:
                    ctx.explained(f"{entry.label()}: claims {claim.text}, but there is no single torch to "
                                  "compare it with", view.env)
                continue
            build = torch_build(torch.version)
            if claim is not None:
                for m in mismatches(claim, build, platform):
                    ctx.add(entry.name, "extension-abi", f"{entry.label()} is {m.message}: it will fail to "
                            f"import (undefined symbol); use the wheel built for torch {torch.version} or "
                            "build it from source against it", view.env, entry)
            why = unverifiable_reason(claim, build, platform)
            if why:
                ctx.explained(f"{entry.label()} with torch {torch.version}: {why}", view.env)
