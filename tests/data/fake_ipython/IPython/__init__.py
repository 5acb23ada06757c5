"""A stand-in for IPython (tests/recorder/test_show.py): only what memsnap.show uses."""
