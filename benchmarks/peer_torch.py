#!/usr/bin/env python
"""peer_torch.py -- training speed of tostnp against the same models in PyTorch eager on CPU.

    PYTHONPATH=. /tmp/torchvenv/bin/python benchmarks/peer_torch.py [--profile]

The same as ``python -m benchmarks.peer_torch``: the benchmark is the package
benchmarks/peer_torch/ (its docstring says what it measures and how).
"""
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.peer_torch.__main__ import main
    main()
