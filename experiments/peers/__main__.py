"""``python -m experiments.peers COMMAND``: the command line of :mod:`experiments.peers.cli`."""

from experiments.peers.cli import main

if __name__ == "__main__":
    main()
