"""The PEP 517 build backend of ktune-client, standard library only.

pip imports it from this directory (pyproject.toml: backend-path), so
`pip install ./client/python` needs nothing else, with or without build isolation and without
network access, in any Python 3.11 or newer (setuptools' backend needs the `wheel` package for
that, which a plain Python does not have). It reads [project] from pyproject.toml and packs the
package directory named by the project (ktune_client: every file below it but caches) into a
pure-Python wheel; an sdist adds pyproject.toml, the README and this directory. Nothing is
written into the source tree: only the wheel, sdist or metadata directory pip asks for.
Files carry a fixed timestamp (SOURCE_DATE_EPOCH, else 1980-01-01), so builds are
reproducible.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BACKEND_DIR = Path(__file__).resolve().parent
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_SUFFIXES = {".pyc", ".pyo"}


class _Project:
    """[project] of pyproject.toml, as much of it as a pure-Python wheel needs."""

    def __init__(self, root: Path) -> None:
        with open(root / "pyproject.toml", "rb") as f:
            data = tomllib.load(f)
        project = data.get("project")
        if not isinstance(project, dict) or "name" not in project or "version" not in project:
            raise ValueError(f"{root / 'pyproject.toml'}: [project] needs name and version")
        self.root = root
        self.project = project
        self.name = str(project["name"])
        self.version = str(project["version"])
        # The distribution name in file names (PEP 427/625) and the import package's directory.
        self.dist = self.name.replace("-", "_").replace(".", "_").lower()
        tool = data.get("tool", {}).get("ktune-build", {})
        self.package = str(tool.get("package", self.dist))
        if not (root / self.package / "__init__.py").is_file():
            raise ValueError(f"{root / self.package}: no __init__.py (the package to build)")

    @property
    def dist_info(self) -> str:
        return f"{self.dist}-{self.version}.dist-info"

    def metadata(self) -> str:
        p = self.project
        lines = ["Metadata-Version: 2.1", f"Name: {self.name}", f"Version: {self.version}"]
        if "description" in p:
            lines.append(f"Summary: {p['description']}")
        if "requires-python" in p:
            lines.append(f"Requires-Python: {p['requires-python']}")
        for classifier in p.get("classifiers", []):
            lines.append(f"Classifier: {classifier}")
        for requirement in p.get("dependencies", []):
            lines.append(f"Requires-Dist: {requirement}")
        for extra, requirements in p.get("optional-dependencies", {}).items():
            lines.append(f"Provides-Extra: {extra}")
            for requirement in requirements:
                lines.append(f'Requires-Dist: {requirement}; extra == "{extra}"')
        body = ""
        readme = p.get("readme")
        if isinstance(readme, str):
            lines.append("Description-Content-Type: "
                         + ("text/markdown" if readme.endswith(".md") else "text/plain"))
            body = (self.root / readme).read_text(encoding="utf-8")
        return "\n".join(lines) + "\n\n" + body

    def package_files(self) -> list[Path]:
        """Every file of the package directory but caches, sorted (paths relative to root)."""
        files = []
        for path in sorted((self.root / self.package).rglob("*")):
            relative = path.relative_to(self.root)
            if any(part in _SKIPPED_DIRS for part in relative.parts):
                continue
            if path.is_file() and path.suffix not in _SKIPPED_SUFFIXES:
                files.append(relative)
        return files


def _epoch() -> int:
    """SOURCE_DATE_EPOCH, not before 1980 (the earliest time a zip file can hold)."""
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)


def _timestamp() -> tuple[int, int, int, int, int, int]:
    return time.gmtime(_epoch())[:6]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


class _WheelWriter:
    """A wheel being written: members in order, RECORD last (PEP 427)."""

    def __init__(self, path: Path, project: _Project) -> None:
        self.project = project
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records: list[str] = []

    def add(self, name: str, data: bytes, executable: bool = False) -> None:
        info = zipfile.ZipInfo(name, date_time=_timestamp())
        info.external_attr = (0o755 if executable else 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        self.records.append(f"{name},{_record_hash(data)},{len(data)}")

    def finish(self, tag: str) -> None:
        dist_info = self.project.dist_info
        self.add(f"{dist_info}/METADATA", self.project.metadata().encode())
        wheel = ("Wheel-Version: 1.0\nGenerator: ktune_build\nRoot-Is-Purelib: true\n"
                 f"Tag: {tag}\n")
        self.add(f"{dist_info}/WHEEL", wheel.encode())
        record = f"{dist_info}/RECORD"
        self.records.append(f"{record},,")
        info = zipfile.ZipInfo(record, date_time=_timestamp())
        info.external_attr = 0o644 << 16
        self.zip.writestr(info, "\n".join(self.records) + "\n")
        self.zip.close()


_TAG = "py3-none-any"


def _wheel_name(project: _Project) -> str:
    return f"{project.dist}-{project.version}-{_TAG}.whl"


# PEP 517 hooks ------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _Project(ROOT)
    target = Path(metadata_directory) / project.dist_info
    target.mkdir(parents=True, exist_ok=True)
    (target / "METADATA").write_text(project.metadata(), encoding="utf-8")
    return project.dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _Project(ROOT)
    name = _wheel_name(project)
    writer = _WheelWriter(Path(wheel_directory) / name, project)
    for relative in project.package_files():
        writer.add(relative.as_posix(), (ROOT / relative).read_bytes())
    writer.finish(_TAG)
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth file puts this source directory on sys.path (PEP 660)."""
    project = _Project(ROOT)
    name = _wheel_name(project)
    writer = _WheelWriter(Path(wheel_directory) / name, project)
    writer.add(f"_{project.dist}_editable.pth", (str(ROOT) + "\n").encode())
    writer.finish(_TAG)
    return name


def build_sdist(sdist_directory, config_settings=None):
    project = _Project(ROOT)
    base = f"{project.dist}-{project.version}"
    files = [Path("pyproject.toml")]
    readme = project.project.get("readme")
    if isinstance(readme, str):
        files.append(Path(readme))
    files += [p.relative_to(ROOT) for p in sorted(_BACKEND_DIR.glob("*.py"))]
    files += project.package_files()
    name = f"{base}.tar.gz"

    def add(tar: tarfile.TarFile, member: str, data: bytes) -> None:
        info = tarfile.TarInfo(f"{base}/{member}")
        info.size, info.mtime, info.mode = len(data), _epoch(), 0o644
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for relative in files:
            add(tar, relative.as_posix(), (ROOT / relative).read_bytes())
        add(tar, "PKG-INFO", project.metadata().encode())
    return name
