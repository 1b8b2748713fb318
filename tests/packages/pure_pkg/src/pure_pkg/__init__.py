__version__ = "0.3.1"


def greet() -> str:
    return "hello from pure_pkg"
