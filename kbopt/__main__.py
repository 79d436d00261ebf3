from kbopt.cli import run

run()
