"""Images: a stack's plan rendered for another builder: a Dockerfile (``docker``), a Modal image
(``modal``), the variables of the Ansible playbook (``ansible``)."""

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``docker/Dockerfile``",
    "``docker/<stack>.steps/``",
    "``modal_images/<stack>.py``",
    "``modal_images/<stack>.steps/``",
)
