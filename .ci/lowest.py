"""Print pip constraints pinning every direct dependency of lab (core and the feature extras) to its lower
bound in pyproject.toml: `make test-oldest` installs with them, so each `>=` bound is a version the suite
passed on. torch is left out: it is installed first at the pinned build (TORCH_VERSION), which must satisfy
its bound. The dev extra (pytest, ruff, import-linter) is test tooling, not lab's: import-linter itself needs
a newer rich than lab's lower bound, so test-oldest installs pytest (and pytest-xdist) alone, unconstrained."""
import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
extras = {name: reqs for name, reqs in project["optional-dependencies"].items() if name != "dev"}
requirements = project["dependencies"] + [r for reqs in extras.values() for r in reqs]
for req in requirements:
    m = re.match(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*([^;]*)", req)
    name, spec = m.group(1), m.group(3)
    lower = re.search(r">=\s*([^,\s]+)", spec)
    if name == project["name"] or name == "torch":
        continue
    if lower is None:
        sys.exit(f"{name}: no lower bound in pyproject.toml ({req!r}); every dependency needs a tested one")
    print(f"{name}=={lower.group(1)}")
