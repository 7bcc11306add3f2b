"""Tensor arguments are addressed by leaf path: "arg" for a tensor, "arg/key" for one
entry of a dict argument (a weights dict). These three helpers are the convention,
for fixtures, the catalogue, the checks and the grading worker alike (which is why
this module imports nothing of the harness).
"""


def leaves(args: dict):
    """(path, value) for every leaf of keyword arguments; None and scalars count as leaves."""
    for arg, value in args.items():
        if isinstance(value, dict):
            yield from ((f"{arg}/{k}", v) for k, v in value.items())
        else:
            yield arg, value


def at(args: dict, path: str):
    """The leaf of keyword arguments at `path`."""
    arg, _, key = path.partition("/")
    return args[arg][key] if key else args[arg]


def assemble(structure: dict, leaf: dict) -> dict:
    """Keyword arguments shaped like `structure`, each leaf taken from `leaf[path]`."""
    return {arg: {k: leaf[f"{arg}/{k}"] for k in value} if isinstance(value, dict) else leaf[arg]
            for arg, value in structure.items()}
