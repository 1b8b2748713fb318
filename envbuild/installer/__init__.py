"""The installer: interpreters, venvs, and one step run through pip or uv as a subprocess."""
