"""The README's minimal site is one `scalwsd --check-config` accepts on a
developer's machine, as the README says: its YAML block, written with the
folder it names, checked by the real command as an unprivileged user would
(no `user:`, no system user needed)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _site_yaml() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    sites = [b for b in blocks if b.lstrip().startswith("# site.yaml")]
    assert len(sites) == 1, blocks
    return sites[0]


def test_the_readme_site_checks(tmp_path):
    (tmp_path / "site.yaml").write_text(_site_yaml())
    (tmp_path / "public").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALWS_")}
    out = subprocess.run([sys.executable, "-m", "scalws", "--check-config", "site.yaml"],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "test is successful" in out.stdout
    assert "[warn]" not in out.stderr, out.stderr
