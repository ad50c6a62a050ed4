"""Issue 31: every dependency installs from a wheel on a Raspberry Pi, so nothing compiles there.

pip resolves the app's dependencies (and the `demo` extra's) as a Pi with Raspberry Pi OS / Debian 12
would: aarch64, glibc 2.36 (pip needs each manylinux level named), Python 3.11.2 (the newest release
of a package can need more: soupsieve 4 asks for 3.11.5, so a Pi gets 2.x), binaries only. One
missing wheel fails the resolution and names the package. Slow: it asks the package index.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PI_PYTHON = "3.11.2"          # Debian 12 / Raspberry Pi OS Bookworm
PI_GLIBC_MINOR = 36           # glibc 2.36 there
PLATFORMS = ["manylinux2014_aarch64"] + [f"manylinux_2_{minor}_aarch64" for minor in range(17, PI_GLIBC_MINOR + 1)]


def requirements(*extras: str) -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + [r for extra in extras for r in project["optional-dependencies"][extra]]


@pytest.mark.slow
@pytest.mark.parametrize("extras", [(), ("demo",)], ids=["app", "app+demo"])
def test_every_dependency_has_an_aarch64_wheel_for_the_pis_python(tmp_path, extras):
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version",
               PI_PYTHON, "-d", str(tmp_path), *[f"--platform={p}" for p in PLATFORMS], *requirements(*extras)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    errors = "\n".join(line for line in done.stderr.splitlines() if "WARNING: Location" not in line)
    assert done.returncode == 0, f"a dependency has no aarch64 wheel for Python {PI_PYTHON}:\n{errors}"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files and all(name.endswith(".whl") for name in files), files
    compiled = [name for name in files if not name.endswith("-none-any.whl")]
    assert all("aarch64" in name for name in compiled), compiled
    print(f"\n{len(files)} wheels, {len(compiled)} of them built for aarch64: {', '.join(compiled)}")
