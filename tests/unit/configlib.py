"""What the configuration loader's unit tests share (test_config*.py):
sample files written into tmp_path, and their problems with the file
shown as F."""
import pathlib
import textwrap

import pytest

from scalws.config.errors import ConfigError
from scalws.config.loader import load_config

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A minimal valid site, for tests about everything else.
SITE = """\
sites:
  - listen: ":8080"
    routes:
      - {path: /, respond: 204}
"""


def write(tmp_path, text, name="scalws.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path, text):
    return load_config(write(tmp_path, text))


def problems(tmp_path, text):
    """The problem lines of a file that must be refused, file shown as F."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [line.replace(str(path), "F", 1) for line in str(info.value).splitlines()]


def one_problem(tmp_path, text):
    lines = problems(tmp_path, text)
    assert len(lines) == 1, lines
    return lines[0]
