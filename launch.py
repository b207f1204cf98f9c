#!/usr/bin/env python
"""Train a GNN with fgnn: ``python launch.py --help`` lists every flag (logic in fgnn/cli.py)."""

import sys

from fgnn.cli import main

if __name__ == "__main__":
    sys.exit(main())
