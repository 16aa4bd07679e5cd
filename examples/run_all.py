"""Run every numbered example and print one check line each; exit non-zero if any check fails."""

import importlib.util
import pathlib
import sys


def main() -> int:
    here = pathlib.Path(__file__).parent
    sys.path.insert(0, str(here))
    failed = []
    for path in sorted(here.glob("[0-9][0-9]_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if not mod.main():
            failed.append(path.name)
    print(f"{'all examples passed' if not failed else 'FAILED: ' + ', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
