#!/usr/bin/env python
"""Train a GNN with fgnn: ``python launch.py --help`` lists every flag (logic in fgnn/cli.py)."""

from fgnn.cli import exit_now, main

if __name__ == "__main__":
    exit_now(main())
