from loopwright.cli.main import run

run()
