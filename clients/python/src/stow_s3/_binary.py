"""Finding the ``stow-s3`` binary."""

from __future__ import annotations

import os
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

BINARY_NAME = "stow-s3.exe" if os.name == "nt" else "stow-s3"

BinarySource = Literal["env", "bundled", "repository", "path"]


class StowBinaryNotFoundError(FileNotFoundError):
    """No usable ``stow-s3`` binary was found; ``tried`` lists every place looked at."""

    def __init__(self, tried: list[str]) -> None:
        self.tried = list(tried)
        lines = "\n".join(f"  - {t}" for t in self.tried)
        super().__init__(
            "stow-s3 binary not found; tried:\n"
            f"{lines}\n"
            "Set STOW_BIN to the binary, install a wheel that bundles it, "
            "or build it with `cargo build` in the repository."
        )


@dataclass(frozen=True)
class ResolvedBinary:
    """A binary found by :func:`resolve_stow_binary_detailed`, with where it came from."""

    path: str
    source: BinarySource


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _repository_candidates(start: Path) -> list[Path]:
    """``target/{release,debug}/stow-s3`` in the nearest ancestor that has a ``target`` dir."""
    for directory in [start, *start.parents]:
        target = directory / "target"
        if target.is_dir():
            return [target / "release" / BINARY_NAME, target / "debug" / BINARY_NAME]
    return []


def resolve_stow_binary_detailed() -> ResolvedBinary:
    """Find the binary: ``STOW_BIN``, the bundled one, the repository's build output, ``PATH``.

    In the repository step the newer of ``target/release`` and ``target/debug`` wins
    (a stale release build must not shadow a fresh debug build).
    """
    tried: list[str] = []

    env = os.environ.get("STOW_BIN")
    if env:
        candidate = Path(env).expanduser()
        if _executable(candidate):
            return ResolvedBinary(str(candidate.resolve()), "env")
        # An explicit STOW_BIN that does not work is an error, not a hint to look elsewhere.
        raise StowBinaryNotFoundError([f"STOW_BIN={env} (not an executable file)"])
    tried.append("STOW_BIN (not set)")

    package_dir = Path(__file__).resolve().parent
    bundled = [package_dir / "bin" / BINARY_NAME]
    scripts = sysconfig.get_path("scripts")
    if scripts:
        # Where a maturin `bindings = "bin"` wheel installs the binary.
        bundled.append(Path(scripts) / BINARY_NAME)
    for candidate in bundled:
        if _executable(candidate):
            return ResolvedBinary(str(candidate), "bundled")
        tried.append(f"bundled: {candidate}")

    repo = [c for c in _repository_candidates(package_dir)]
    found = [c for c in repo if _executable(c)]
    if found:
        newest = max(found, key=lambda c: c.stat().st_mtime)
        return ResolvedBinary(str(newest), "repository")
    if repo:
        tried.extend(f"repository: {c}" for c in repo)
    else:
        tried.append(f"repository: no target/ directory above {package_dir}")

    on_path = shutil.which(BINARY_NAME)
    if on_path:
        return ResolvedBinary(on_path, "path")
    tried.append(f"PATH: no {BINARY_NAME}")
    raise StowBinaryNotFoundError(tried)


def resolve_stow_binary() -> str:
    """The path of the ``stow-s3`` binary (see :func:`resolve_stow_binary_detailed`)."""
    return resolve_stow_binary_detailed().path


def stow_binary_available() -> bool:
    """Whether :func:`resolve_stow_binary` would succeed."""
    try:
        resolve_stow_binary_detailed()
    except StowBinaryNotFoundError:
        return False
    return True
