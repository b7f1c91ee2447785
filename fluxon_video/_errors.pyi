"""Types of the compiled error mapping (_errors.pyx): FFmpeg codes to FluxonFsErrors."""

OUT_OF_MEMORY: int

def check(code: int, what: str = "call", name: str = "<native>") -> int: ...
