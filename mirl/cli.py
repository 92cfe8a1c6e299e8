"""The `mirl` command: one sub-command module per noun under `mirl.commands`.

Each module exposes `register(subparsers)`, adding its parser with `func=` set; heavy imports stay
inside the functions so `mirl --help` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMANDS = ["tasks", "image", "rollout", "detect", "run", "batch", "train"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mirl", description="Misbehavior-driven RL for terminal agents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"mirl.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"mirl.commands.{name}":
                continue  # a command still being built
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("LiteLLM", "litellm", "httpx", "papermill", "traitlets", "transformers", "urllib3", "docker"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mirl ... | head` closed the pipe: not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
