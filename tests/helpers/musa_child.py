"""A fork-server job for the MUSA fork-safety test: resolve MUSA in the forked child (the fake
torch_musa of tests/helpers/fake_musa is imported here, not in the server) and print what the
child saw: the device's name, the count, whether torch_musa marks this process a bad fork."""

from __future__ import annotations

import sys

from orchestrator.platform import device as devmod


def main(argv: list[str] | None = None) -> int:
    dev = devmod.resolve("musa")
    musa = devmod.musa_module()
    print(f"{dev.name} {dev.count} bad_fork={musa._is_in_bad_fork()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
