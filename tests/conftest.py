from __future__ import annotations

import pytest

from tests.media import MediaLibrary


@pytest.fixture(scope="session")
def media(tmp_path_factory) -> MediaLibrary:
    return MediaLibrary(tmp_path_factory.mktemp("media"))
