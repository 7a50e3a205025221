"""Puts scripts/corpus on sys.path for the tests (they import the build's modules directly)."""
import os
import sys

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts", "corpus")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)
