"""python3 -m memsnap ARGS: runs the memsnap command-line tool that ``pip install .`` put beside
the package (memsnap-cli, linked against the libmemsnap.so beside it); the ``memsnap`` script
that pip installs runs the same."""
import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    cli = os.path.join(here, "memsnap-cli")
    if not os.path.exists(cli):
        sys.exit("memsnap: error: no command-line tool beside the package in '%s' (pip install . puts it there; "
                 "from a source tree, run build/memsnap)" % here)
    os.execv(cli, ["memsnap"] + sys.argv[1:])


if __name__ == "__main__":
    main()
