"""python -m kvblock --version: the package and library versions."""
import argparse

import kvblock


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m kvblock")
    p.add_argument("--version", action="store_true", help="print the package and library versions")
    args = p.parse_args()
    if args.version:
        print(f"kvblock {kvblock.__version__} (libkvblock {kvblock.library_version()} at {kvblock.library_path()})")
    else:
        p.print_help()


if __name__ == "__main__":
    main()
