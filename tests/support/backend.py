"""A stdlib-only PEP 517/660 build backend a generated test project keeps (``backend-path``): the
name and version come from the pyproject beside it, so uv and pip build the project (editable or
not) offline, as they build a real one."""

from __future__ import annotations

__all__ = ["BACKEND"]

BACKEND = r"""
import base64, hashlib, os, zipfile
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

def _meta():
    with open("pyproject.toml", "rb") as f:
        p = tomllib.load(f)["project"]
    return p["name"], p["version"]

def _wheel(directory, files):
    name, version = _meta()
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files[info + "/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files[info + "/WHEEL"] = "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(text.encode())}")
    files[info + "/RECORD"] = "\n".join(rows + [info + "/RECORD,,"]) + "\n"
    out = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, out), "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return out

def get_requires_for_build_wheel(config_settings=None):
    return []

get_requires_for_build_editable = get_requires_for_build_wheel

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {})

def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"_%s_editable.pth" % _meta()[0].replace("-", "_"): os.path.abspath(".") + "\n"})
"""  # noqa: E501 (embedded backend source: the text is the value)
