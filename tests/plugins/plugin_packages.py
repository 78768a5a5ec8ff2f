"""Plugins installed for a test as pip installs them: the package and its dist-info (with the spt_hf entry point)
in a folder that the test puts on sys.path (or a subprocess's PYTHONPATH)."""

import textwrap
from pathlib import Path

from spt_hf.registry import ENTRY_POINT_GROUP


def install_distribution(
    site: Path, distribution: str, package: str, files: dict[str, str], entry_point: str, version: str = "0.3"
) -> None:
    """Write `package` (its `files`: name -> source) and the dist-info of `distribution` `version`, declaring
    `entry_point` ("name = value") in spt_hf's entry point group, into the folder `site`."""
    (site / package).mkdir(parents=True)
    for name, source in files.items():
        (site / package / name).write_text(textwrap.dedent(source))
    info = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{package}\n")
    (info / "RECORD").write_text("".join(f"{package}/{name},,\n" for name in files))
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry_point}\n")
