"""Operations behind the `fluxon-video` command line: list, stat, index, warm, read."""
