"""Images: render container definitions (Dockerfile) from a stack's plan."""
