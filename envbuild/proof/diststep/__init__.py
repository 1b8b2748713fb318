"""The distributed step: ``launch`` starts torchrun (``agent.py``) in the target venv with one
``worker.py`` per GPU, and ``watch`` follows the ranks while it runs.
"""
