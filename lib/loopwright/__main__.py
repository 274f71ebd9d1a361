from loopwright.cli import run

run()
